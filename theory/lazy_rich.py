"""Lazy versus rich: the diagonal linear network's implicit bias (docs/science.md §4).

Woodworth et al. (COLT 2020, arXiv 2002.09277), depth 2: β = w₊² − w₋², init w₊ = w₋ = α·1.
Gradient flow on ‖Xβ − y‖² gives w₊ = α e^{−2s}, w₋ = α e^{2s} with s = Xᵀ∫r ∈ range(Xᵀ),
so β = 2α² sinh(u) with u ∈ range(Xᵀ). That is the KKT condition of (their Thm. 1)

    β_α = argmin Q_α(β)  s.t.  Xβ = y,    Q_α(β) = α² Σ_i q(β_i/α²),
    q(z) = 2 − √(4 + z²) + z·asinh(z/2),   q'(z) = asinh(z/2),  q(0) = 0,

with the limits 4α² Q_α(β) → ‖β‖₂² as α → ∞ (kernel/lazy: minimum ℓ2) and
Q_α(β)/ln(1/α²) → ‖β‖₁ as α → 0 (rich: minimum ℓ1) (:func:`derive_limits`).

Depth D ≥ 3 (their §5): β = w₊^D − w₋^D. Solving dw/dt = ∓D w^{D−1} g coordinatewise gives
β = α^D h_D(u), u ∈ range(Xᵀ), with h_D(u) = (1 − u)^{−D/(D−2)} − (1 + u)^{−D/(D−2)} on
|u| < 1, hence Q^D_α(β) = α^D Σ_i q_D(β_i/α^D), q_D(z) = ∫_0^z h_D^{−1}(s) ds. Near 0,
q_D(z) ≈ (D − 2) z² / (4D) (ℓ2 as α → ∞); q_D(z)/|z| → 1 (ℓ1 as α → 0, without the log
that depth 2 needs) (:func:`derive_depth_limits`).

Numeric solver (:func:`solve_q_alpha`): the dual. With u = Xᵀλ, β(λ) = α^D h_D(Xᵀλ)
(h_2 = 2 sinh) minimizes Φ(λ) = Σ_i H_D((Xᵀλ)_i) − λ·y/α^D, H_D' = h_D, a smooth strictly
convex function (X of full row rank) whose gradient is (Xβ(λ) − y)/α^D. Damped Newton with
Armijo backtracking (which also keeps |u| < 1 for D ≥ 3), Cholesky solves from scipy, stops
when ‖Xβ − y‖ ≤ tol·‖y‖. Dividing by α^D keeps the problem scaled for α from 1e-3 to 1e2:
for large α the solution has λ ~ 1/α^D and Φ is nearly quadratic, for small α the
exponential/barrier curvature is followed by the backtracking.

Chizat, Oyallon, Bach (NeurIPS 2019): a model α h(w) trains lazily when α → ∞; for the
two-layer net this reads m κ → ∞ (γ < 1 at γ' = 0) (:func:`chizat_lazy`).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import scipy.integrate
import scipy.linalg
import scipy.optimize
import sympy as sp

from . import phase
from .exact import ORDER_LIMIT, positive_float

z = sp.Symbol("z", real=True)
u_s = sp.Symbol("u", real=True)
alpha = sp.Symbol("alpha", positive=True)
b = sp.Symbol("b", positive=True)
D_s = sp.Symbol("D", positive=True)


# ----------------------------------------------------------------------------- depth 2, symbolic
def q_expr() -> sp.Expr:
    """q(z) = 2 − √(4 + z²) + z·asinh(z/2) (Woodworth et al. eq. for Q_α)."""
    return 2 - sp.sqrt(4 + z**2) + z * sp.asinh(z / 2)


def q_alpha_expr(beta: sp.Expr = b) -> sp.Expr:
    """Q_α for one coordinate: α² q(β/α²)."""
    return alpha**2 * q_expr().subs(z, beta / alpha**2)


def q_derivative() -> sp.Expr:
    """q'(z), simplified: asinh(z/2) (the inverse of the link β = 2α² sinh(u))."""
    return sp.simplify(sp.diff(q_expr(), z))


def q_series(order: int = 8) -> sp.Expr:
    """Taylor series of q at 0: z²/4 − z⁴/192 + z⁶/2560 − … (no O term)."""
    return sp.series(q_expr(), z, 0, order).removeO()


@functools.lru_cache(maxsize=1)
def derive_limits() -> dict[str, sp.Expr]:
    """Both limits of Q_α for one coordinate β = b > 0 (q is even, so |β| in general).

    ``l2``: lim_{α→∞} 4α² Q_α(b) = b²;  ``l1``: lim_{α→0} Q_α(b)/ln(1/α²) = b;
    ``l1_negative``: the same for β = −b, = b = |β|.
    """
    return {
        "q0": q_expr().subs(z, 0),
        "l2": sp.limit(4 * alpha**2 * q_alpha_expr(b), alpha, sp.oo),
        "l1": sp.limit(q_alpha_expr(b) / sp.log(1 / alpha**2), alpha, 0, "+"),
        "l1_negative": sp.limit(q_alpha_expr(-b) / sp.log(1 / alpha**2), alpha, 0, "+"),
    }


def link_from_flow() -> sp.Expr:
    """β(u) of the depth-2 flow: α²(e^{u} − e^{−u}) with u = −4s, simplified to 2α² sinh u.

    w₊ = α e^{−2s} and w₋ = α e^{2s} solve dw₊/dt = −2w₊ g, dw₋/dt = 2w₋ g with s' = g.
    """
    s = sp.Symbol("s", real=True)
    beta = (alpha * sp.exp(-2 * s)) ** 2 - (alpha * sp.exp(2 * s)) ** 2
    return sp.simplify(beta.subs(s, -u_s / 4).rewrite(sp.sinh))


# ----------------------------------------------------------------------------- depth D, symbolic
def h_D_expr(depth: Any = D_s) -> sp.Expr:
    """h_D(u) = (1 − u)^{−D/(D−2)} − (1 + u)^{−D/(D−2)}, D ≥ 3 (β = α^D h_D(u))."""
    depth = sp.sympify(depth)
    k = depth / (depth - 2)
    return (1 - u_s) ** (-k) - (1 + u_s) ** (-k)


def H_D_expr(depth: Any = D_s) -> sp.Expr:
    """H_D with H_D' = h_D and H_D(0) = D − 2: ((D−2)/2)[(1−u)^{−2/(D−2)} + (1+u)^{−2/(D−2)}]."""
    depth = sp.sympify(depth)
    e = 2 / (depth - 2)
    return (depth - 2) / 2 * ((1 - u_s) ** (-e) + (1 + u_s) ** (-e))


def depth_link_from_flow(depth: int) -> sp.Expr:
    """β(s) of the depth-D flow, from d(w^{2−D})/dt = D(D−2)·(±g): w₊ = α(1 + cs)^{−1/(D−2)},
    w₋ = α(1 − cs)^{−1/(D−2)}, c = D(D−2)α^{D−2}; returned as β/α^D in u = −cs."""
    s = sp.Symbol("s", real=True)
    c = depth * (depth - 2) * alpha ** (depth - 2)
    wp = alpha * (1 + c * s) ** sp.Rational(-1, depth - 2)
    wm = alpha * (1 - c * s) ** sp.Rational(-1, depth - 2)
    return sp.simplify(((wp**depth - wm**depth) / alpha**depth).subs(s, -u_s / c))


@functools.lru_cache(maxsize=16)
def derive_depth_limits(depth: Any = D_s) -> dict[str, sp.Expr]:
    """Limits of q_D from h_D alone (q_D has no closed form for general D).

    ``curvature``: q_D''(0) = (h_D^{−1})'(0) = 1/h_D'(0) = (D − 2)/(2D), so
    q_D(z) ≈ (D − 2) z²/(4D) and 4D/(D−2) · α^D Q^D_α(β) → ‖β‖₂² as α → ∞.
    ``h_at_1``: h_D(u) → ∞ as u → 1⁻ (for an integer D), so q_D'(z) = h_D^{−1}(z) → 1 as
    z → ∞ and Q^D_α(β) → ‖β‖₁ as α → 0.
    """
    h = h_D_expr(depth)
    out = {"curvature": sp.simplify(1 / sp.diff(h, u_s).subs(u_s, 0))}
    if depth != D_s:
        out["h_at_1"] = sp.limit(h, u_s, 1, "-")
    return out


# ----------------------------------------------------------------------------- numeric q
def q(zv: Any) -> np.ndarray:
    """q(z) in floating point, written as z·asinh(z/2) − z²/(2 + √(4 + z²)) to avoid the
    cancellation of 2 − √(4 + z²) at small z."""
    zv = np.asarray(zv, dtype=float)
    return zv * np.arcsinh(zv / 2) - zv**2 / (2 + np.sqrt(4 + zv**2))


def _check_depth(depth: int) -> int:
    if isinstance(depth, bool) or not isinstance(depth, int) or not 2 <= depth <= ORDER_LIMIT:
        raise ValueError(
            f"depth={depth!r} is not allowed; it must be an integer in 2..{ORDER_LIMIT}"
        )
    return depth


def h_D(uv: Any, depth: int) -> np.ndarray:
    """h_D(u) numerically (h_2(u) = 2 sinh u)."""
    depth = _check_depth(depth)
    uv = np.asarray(uv, dtype=float)
    if depth == 2:
        return 2 * np.sinh(uv)
    k = depth / (depth - 2)
    return (1 - uv) ** (-k) - (1 + uv) ** (-k)


def _h_D_prime(uv: np.ndarray, depth: int) -> np.ndarray:
    if depth == 2:
        return 2 * np.cosh(uv)
    k = depth / (depth - 2)
    return k * ((1 - uv) ** (-k - 1) + (1 + uv) ** (-k - 1))


def _H_D(uv: np.ndarray, depth: int) -> np.ndarray:
    if depth == 2:
        return 2 * np.cosh(uv)
    e = 2 / (depth - 2)
    return (depth - 2) / 2 * ((1 - uv) ** (-e) + (1 + uv) ** (-e))


def h_D_inverse(zv: float, depth: int) -> float:
    """u with h_D(u) = z (asinh(z/2) for D = 2; bracketing root in (−1, 1) otherwise)."""
    depth = _check_depth(depth)
    if depth == 2:
        return float(np.arcsinh(zv / 2))
    if zv == 0:
        return 0.0
    sign = math.copysign(1.0, zv)
    target = abs(zv)
    hi = 1.0 - 1e-16
    # h_D is odd and increasing; find u in (0, 1) with h_D(u) = |z|.
    return sign * scipy.optimize.brentq(
        lambda v: float(h_D(v, depth)) - target, 0.0, hi, xtol=1e-15
    )


def q_D(zv: float, depth: int) -> float:
    """q_D(z) = ∫_0^z h_D^{−1}(s) ds (q_2 = q), by adaptive quadrature for D ≥ 3."""
    depth = _check_depth(depth)
    if depth == 2:
        return float(q(zv))
    value, _ = scipy.integrate.quad(lambda s: h_D_inverse(s, depth), 0.0, abs(zv), limit=200)
    return value


def _alpha_power(a: float, depth: int) -> float:
    """α^D, or ValueError naming α and D when it leaves the normal float range."""
    try:
        scale = a**depth
    except OverflowError:
        scale = math.inf
    if not (math.isfinite(scale) and scale >= np.finfo(float).tiny):
        raise ValueError(
            f"alpha={a:g} at depth={depth} gives alpha^depth = {scale:g}, "
            "outside the float range; choose alpha nearer 1 or a smaller depth"
        )
    return scale


def Q_alpha(beta: Any, alpha_value: Any, depth: int = 2) -> float:
    """Q^D_α(β) = α^D Σ_i q_D(β_i/α^D) (depth 2: Woodworth et al.'s Q_α)."""
    depth = _check_depth(depth)
    a = positive_float(alpha_value, "alpha")
    beta = np.asarray(beta, dtype=float)
    scale = _alpha_power(a, depth)
    if depth == 2:
        return float(scale * np.sum(q(beta / scale)))
    return float(scale * sum(q_D(v / scale, depth) for v in beta.ravel()))


# ----------------------------------------------------------------------------- the solver
def _check_problem(X: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    X = np.asarray(X, dtype=float)
    y = np.asarray(y, dtype=float)
    if X.ndim != 2 or y.shape != (X.shape[0],):
        raise ValueError(f"X must be (n, d) and y (n,); got {X.shape} and {y.shape}")
    if X.shape[0] > X.shape[1] or np.linalg.matrix_rank(X) < X.shape[0]:
        raise ValueError(
            f"X of shape {X.shape} must have full row rank (an underdetermined problem, "
            "n <= d), so that Xβ = y has solutions"
        )
    if not (np.all(np.isfinite(X)) and np.all(np.isfinite(y))):
        raise ValueError("X and y must be finite")
    return X, y


def solve_q_alpha(
    X: Any, y: Any, alpha_value: Any, depth: int = 2, tol: float = 1e-9, max_iter: int = 500
) -> np.ndarray:
    """argmin Q^D_α(β) s.t. Xβ = y, through the dual (module docstring).

    Returns β with ‖Xβ − y‖ ≤ 10·tol·max(‖y‖, 1); raises ValueError if Newton does not get
    there in ``max_iter`` steps (never silently returns an unconverged point).
    """
    depth = _check_depth(depth)
    X, y = _check_problem(X, y)
    a = positive_float(alpha_value, "alpha")
    scale = _alpha_power(a, depth)
    yt = y / scale
    target = tol * max(float(np.linalg.norm(y)), 1.0) / scale

    def objective(lam: np.ndarray) -> float:
        uv = X.T @ lam
        if depth > 2 and np.max(np.abs(uv)) >= 1:
            return math.inf
        with np.errstate(over="ignore"):
            val = float(np.sum(_H_D(uv, depth)) - lam @ yt)
        return val if math.isfinite(val) else math.inf

    def gradient(lam: np.ndarray) -> np.ndarray:
        return X @ h_D(X.T @ lam, depth) - yt

    with np.errstate(over="ignore", invalid="ignore"):
        lam = _newton(objective, gradient, X, depth, target, max_iter)
    uv = X.T @ lam
    residual = float(np.linalg.norm(X @ (scale * h_D(uv, depth)) - y))
    if residual <= 10 * target * scale:
        return scale * h_D(uv, depth)
    raise ValueError(
        f"argmin Q_alpha did not converge for alpha={a:g}, depth={depth}: "
        f"residual {residual:.3g} after {max_iter} Newton steps"
    )


def _newton(
    objective, gradient, X: np.ndarray, depth: int, target: float, max_iter: int
) -> np.ndarray:
    """Damped Newton on the dual Φ (see :func:`solve_q_alpha`); returns λ."""
    lam = np.zeros(X.shape[0])
    value = objective(lam)
    grad = gradient(lam)
    for _ in range(max_iter):
        gnorm = float(np.linalg.norm(grad))
        if gnorm <= target:
            break
        hess = (X * _h_D_prime(X.T @ lam, depth)) @ X.T
        try:
            step = -scipy.linalg.cho_solve(scipy.linalg.cho_factor(hess), grad)
        except (np.linalg.LinAlgError, ValueError):
            step = -np.linalg.lstsq(hess, grad, rcond=None)[0]
        slope = float(grad @ step)
        t_step = 1.0
        while t_step >= 1e-14:
            new = lam + t_step * step
            new_value = objective(new)
            if math.isfinite(new_value):
                # Armijo on Φ; near the optimum Φ's rounding hides the decrease, so a step
                # that shrinks the gradient (the primal residual) is accepted as well.
                if new_value <= value + 1e-4 * t_step * slope:
                    break
                if np.linalg.norm(gradient(new)) < (1 - 1e-4 * t_step) * gnorm:
                    break
            t_step /= 2
        else:
            break  # no progress possible in floating point
        lam, value = new, new_value
        grad = gradient(lam)
    return lam


def min_l2_interpolant(X: Any, y: Any) -> np.ndarray:
    """argmin ‖β‖₂ s.t. Xβ = y: Xᵀ(XXᵀ)^{−1}y (the α → ∞ limit)."""
    X, y = _check_problem(X, y)
    return X.T @ scipy.linalg.solve(X @ X.T, y, assume_a="pos")


def min_l1_interpolant(X: Any, y: Any) -> np.ndarray:
    """argmin ‖β‖₁ s.t. Xβ = y by linear programming (HiGHS), β = p − n, p, n ≥ 0
    (the α → 0 limit)."""
    X, y = _check_problem(X, y)
    dim = X.shape[1]
    res = scipy.optimize.linprog(
        np.ones(2 * dim), A_eq=np.hstack([X, -X]), b_eq=y, bounds=(0, None), method="highs"
    )
    if not res.success or res.x is None:
        raise ValueError(f"minimum-l1 interpolant: linear program failed ({res.message})")
    return res.x[:dim] - res.x[dim:]


def planted_sparse_problem(n: int = 10, dim: int = 40, k: int = 3, seed: int = 0):
    """A reproducible underdetermined regression with a k-sparse planted β* (Gaussian X,
    y = Xβ*), the setting of Woodworth et al. Fig. 1. Returns (X, y, β*)."""
    if not (0 < k <= dim and 0 < n <= dim):
        raise ValueError(f"need 0 < k <= dim and 0 < n <= dim; got n={n}, dim={dim}, k={k}")
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, dim))
    beta_star = np.zeros(dim)
    beta_star[:k] = 1.0
    return X, X @ beta_star, beta_star


# ----------------------------------------------------------------------------- Chizat
def chizat_quantity(alpha_: Any, beta1: Any, beta2: Any) -> sp.Expr:
    """m κ: the inverse of Chizat's relative scale for the two-layer net.

    In the rescaled model f = κ Σ ā σ(w̄·x̃), ‖Df‖² ~ m κ², ‖D²f‖ ~ κ and the initial error
    is O(1), so Chizat's ratio ‖f₀ − y‖‖D²f‖/‖Df‖² ~ 1/(m κ): lazy when m κ → ∞.
    """
    return phase.kappa(alpha_, beta1, beta2) * phase.m


def chizat_lazy(alpha_: Any, beta1: Any, beta2: Any, scaling: str = "fixed") -> str:
    """``"lazy"`` when m κ → ∞, ``"not lazy"`` when m κ → 0, ``"borderline"`` otherwise
    (docs/science.md §4: at γ' = 0 this is γ < 1, the linear regime of the diagram)."""
    limit = sp.limit(
        phase._width_law(chizat_quantity(alpha_, beta1, beta2), scaling), phase.m, sp.oo
    )
    if limit == sp.oo:
        return "lazy"
    if limit == 0:
        return "not lazy"
    return "borderline"


def generalized_lazy_exponent(gamma: Any, gamma_prime: Any) -> sp.Expr:
    """Exponent of m κ max(1, 1/κ') ~ m^{1 − γ + max(γ', 0)} = m^{−Δ}: Chizat's criterion
    with the κ'-anisotropy of the normalized flow; it is lazy exactly when Δ < 0."""
    return -phase.delta(gamma, gamma_prime)
