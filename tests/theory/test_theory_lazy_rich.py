"""Lazy versus rich (docs/science.md §4): q, Q_α, both limits, the solver, depth D."""

import numpy as np
import pytest
import scipy.optimize
import sympy as sp

from smallinit.theory import lazy_rich as LR

z, b, alpha = LR.z, LR.b, LR.alpha


def test_q_derivative_value_and_series():
    assert LR.q_derivative() == sp.asinh(z / 2)
    assert LR.q_expr().subs(z, 0) == 0
    series = sp.Poly(LR.q_series(8), z)
    assert series.coeff_monomial(z**2) == sp.Rational(1, 4)
    assert series.coeff_monomial(z**4) == sp.Rational(-1, 192)
    assert series.coeff_monomial(z**6) == sp.Rational(1, 2560)
    assert series.coeff_monomial(z**3) == 0  # q is even


def test_both_limits():
    lim = LR.derive_limits()
    assert lim["q0"] == 0
    assert lim["l2"] == b**2  # 4α² Q_α(β) → β² as α → ∞
    assert lim["l1"] == b and lim["l1_negative"] == b  # Q_α/ln(1/α²) → |β| as α → 0


def test_link_from_the_flow_is_the_kkt_condition():
    # w± = α e^{∓2s} gives β = 2α² sinh(u); q' = asinh(z/2) is exactly its inverse
    link = LR.link_from_flow()
    assert sp.simplify(link - 2 * alpha**2 * sp.sinh(LR.u_s)) == 0
    assert sp.simplify(link.subs(LR.u_s, LR.q_derivative()) / alpha**2 - z) == 0


def test_numeric_q_matches_sympy_and_is_stable_at_small_z():
    f = sp.lambdify(z, LR.q_expr(), "mpmath")
    for v in (-30.0, -2.0, -0.1, 0.3, 1.0, 7.0, 1e3):
        assert LR.q(v) == pytest.approx(float(f(v)), rel=1e-12)
    assert LR.q(1e-8) == pytest.approx(2.5e-17, rel=1e-9)  # z²/4, no cancellation


def _null_directions(X, k, rng):
    _, _, vt = np.linalg.svd(X)
    null = vt[X.shape[0] :]
    return null.T @ rng.standard_normal((null.shape[0], k))


@pytest.mark.parametrize("a", [1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0])
def test_solver_satisfies_constraint_and_kkt(a):
    X, y, _ = LR.planted_sparse_problem(n=8, dim=24, k=3, seed=1)
    beta = LR.solve_q_alpha(X, y, a)
    assert np.linalg.norm(X @ beta - y) <= 1e-8 * np.linalg.norm(y)
    # KKT: ∇Q_α(β) = asinh(β/(2α²)) lies in range(Xᵀ)
    grad = np.arcsinh(beta / (2 * a**2))
    proj = X.T @ np.linalg.lstsq(X.T, grad, rcond=None)[0]
    assert np.linalg.norm(grad - proj) <= 1e-6 * max(np.linalg.norm(grad), 1e-12)
    # and no feasible direction lowers Q_α
    rng = np.random.default_rng(0)
    base = LR.Q_alpha(beta, a)
    for v in _null_directions(X, 5, rng).T:
        for t in (1e-3, -1e-3):
            assert LR.Q_alpha(beta + t * v * np.linalg.norm(beta), a) >= base * (1 - 1e-12)


def test_solver_matches_a_primal_solver():
    X, y, _ = LR.planted_sparse_problem(n=3, dim=6, k=2, seed=2)
    a = 0.5
    ref = scipy.optimize.minimize(
        lambda v: LR.Q_alpha(v, a),
        LR.min_l2_interpolant(X, y),
        method="SLSQP",
        constraints={"type": "eq", "fun": lambda v: X @ v - y},
        options={"ftol": 1e-14},
    )
    assert ref.success
    assert np.allclose(LR.solve_q_alpha(X, y, a), ref.x, atol=1e-6)


def test_limits_numerically():
    X, y, _ = LR.planted_sparse_problem()
    l1, l2 = LR.min_l1_interpolant(X, y), LR.min_l2_interpolant(X, y)
    assert np.linalg.norm(LR.solve_q_alpha(X, y, 100.0) - l2) < 1e-6 * np.linalg.norm(l2)
    dists = [np.linalg.norm(LR.solve_q_alpha(X, y, a) - l1) for a in (1e-1, 1e-2, 1e-3)]
    assert dists[0] > dists[1] > dists[2]  # depth 2 reaches ℓ1 only at rate 1/ln(1/α²)
    assert np.linalg.norm(LR.solve_q_alpha(X, y, 1e-3, depth=3) - l1) < 1e-3


def test_gradient_descent_on_the_diagonal_network_finds_argmin_q_alpha():
    """β = w₊² − w₋² from w± = α·1, small-step gradient descent on ½‖Xβ − y‖²/n."""
    X, y, _ = LR.planted_sparse_problem(n=5, dim=12, k=2, seed=3)
    for a in (0.1, 1.0):
        wp = np.full(12, a)
        wm = np.full(12, a)
        lr = 2e-3
        for _ in range(200_000):
            g = X.T @ (X @ (wp**2 - wm**2) - y) / len(y)
            wp, wm = wp - lr * 2 * wp * g, wm + lr * 2 * wm * g
            if np.linalg.norm(X @ (wp**2 - wm**2) - y) < 1e-10:
                break
        target = LR.solve_q_alpha(X, y, a)
        assert np.linalg.norm(wp**2 - wm**2 - target) < 2e-2 * np.linalg.norm(target)


def test_depth_d_closed_forms():
    for depth in (3, 4, 5):
        assert sp.simplify(LR.depth_link_from_flow(depth) - LR.h_D_expr(depth)) == 0
        lim = LR.derive_depth_limits(depth)
        assert lim["curvature"] == sp.Rational(depth - 2, 2 * depth)
        assert lim["h_at_1"] == sp.oo
        # H_D' = h_D
        assert sp.simplify(sp.diff(LR.H_D_expr(depth), LR.u_s) - LR.h_D_expr(depth)) == 0
    assert LR.derive_depth_limits()["curvature"] == (LR.D_s - 2) / (2 * LR.D_s)


def test_depth_d_numeric_q():
    depth = 3
    for zv in (0.3, 2.0, 40.0):
        h = 1e-5
        slope = (LR.q_D(zv + h, depth) - LR.q_D(zv - h, depth)) / (2 * h)
        assert slope == pytest.approx(LR.h_D_inverse(zv, depth), rel=1e-6)  # q_D' = h_D⁻¹
        assert LR.h_D(LR.h_D_inverse(zv, depth), depth) == pytest.approx(zv, rel=1e-10)
    assert LR.q_D(1e-3, depth) == pytest.approx((depth - 2) / (4 * depth) * 1e-6, rel=1e-4)
    ratios = [LR.q_D(v, depth) / v for v in (1e2, 1e4, 1e6)]
    assert ratios[0] < ratios[1] < ratios[2] < 1 and ratios[2] > 0.97  # slope → 1: ℓ1
    assert LR.q_D(0.7, 2) == pytest.approx(float(LR.q(0.7)))


def test_bad_inputs():
    X, y, _ = LR.planted_sparse_problem(n=3, dim=6, k=1)
    with pytest.raises(ValueError, match="alpha"):
        LR.solve_q_alpha(X, y, 0.0)
    with pytest.raises(ValueError, match="depth"):
        LR.solve_q_alpha(X, y, 1.0, depth=1)
    with pytest.raises(ValueError, match="full row rank"):
        LR.solve_q_alpha(np.vstack([X, X[:1]]), np.append(y, y[0]), 1.0)
    with pytest.raises(ValueError, match=r"X must be \(n, d\)"):
        LR.solve_q_alpha(X, y[:2], 1.0)
