"""Two-layer phase diagram (docs/science.md §2): registry, normalized flow, Δ, bounds,
conservation."""

import math

import numpy as np
import pytest
import sympy as sp

from smallinit.theory import lazy_rich, phase
from smallinit.theory.phase import (
    classify,
    coordinates,
    delta,
    log_allowance,
    m,
    slope_agrees,
    slope_in_interval,
    slope_interval,
)

R = sp.Rational

# docs/science.md §2 lists these (α, β1, β2 → (γ, γ')); the registry's coordinates are derived with
# coordinates() and must land here, with the regime Δ decides.
SPEC_POINTS = {
    "lecun": ((R(1, 2), R(1, 2)), "linear"),
    "he": ((R(1, 2), R(1, 2)), "linear"),
    "xavier": ((1, 0), "critical"),
    "ntk": ((R(1, 2), 0), "linear"),
    "mean_field": ((1, 0), "critical"),
}


@pytest.mark.parametrize("name", sorted(SPEC_POINTS))
def test_registry_points_match_spec(name):
    (g, gp), regime = SPEC_POINTS[name]
    s = phase.scheme(name)
    assert s.coordinates() == (g, gp)
    point = s.point()
    assert point.regime == regime
    assert point.delta == g - 1 - max(gp, 0)


def test_families_diagonal_and_gamma_rule():
    s_, g_ = phase.s_param, phase.gamma_param
    assert phase.scheme("e_diagonal").coordinates() == (s_, s_)  # the diagonal γ = γ'
    assert phase.scheme("gamma_ffn_fixed").coordinates() == (g_, g_)
    assert phase.scheme("gamma_ffn_proportional").coordinates() == (2 * g_, 0)
    # the diagonal is linear everywhere; the proportional FFN changes regime at γ = 1/2
    assert [r for _, r in phase.scheme("e_diagonal").regimes()] == ["linear"]
    pieces = phase.scheme("gamma_ffn_proportional").regimes()
    assert [(phase.describe_set(w, g_), r) for w, r in pieces] == [
        ("gamma < 1/2", "linear"),
        ("gamma = 1/2", "critical"),
        ("gamma > 1/2", "condensed"),
    ]
    member = phase.scheme("gamma_ffn_proportional").at("1")
    assert member.coordinates() == (2, 0)
    assert member.point().regime == "condensed"
    assert member.point().slope == (R(1, 2), sp.oo)
    assert phase.scheme("e_diagonal").at(R(3, 2)).point().regime == "linear"


def test_proportional_widths_move_lecun_onto_the_critical_point():
    lecun = phase.scheme("lecun")
    assert coordinates(lecun.alpha, lecun.beta1, lecun.beta2, "proportional") == (1, 0)


def test_coordinates_of_non_power_laws():
    # κ = log(m)/m still has rate 1; an exponential has no finite rate
    assert coordinates(m / sp.log(m), 1, 1) == (1, 0)
    with pytest.raises(ValueError, match="does not scale as a power of m"):
        coordinates(sp.exp(m), 1, 1)
    with pytest.raises(ValueError, match="scaling='wide'"):
        coordinates(1, 1, 1, "wide")


def test_normalized_flow_equals_original_flow():
    for sizes in ((2, 2, 2), (3, 1, 3)):
        residuals = phase.rescaled_flow_residuals(*sizes)
        assert len(residuals) == sizes[0] * (sizes[1] + 2)
        assert all(r == 0 for r in residuals)


def test_normalized_flow_check_can_fail(monkeypatch):
    # with κ' inverted the identity must break: the check is not vacuous
    monkeypatch.setattr(phase, "kappa_prime", lambda b1, b2: sp.sympify(b2) / sp.sympify(b1))
    assert any(r != 0 for r in phase.rescaled_flow_residuals(1, 1, 1))


def test_kappa_definitions():
    a, b1, b2 = phase.alpha_s, phase.beta1_s, phase.beta2_s
    assert phase.kappa(a, b1, b2) == b1 * b2 / a
    assert phase.kappa_prime(b1, b2) == b1 / b2


def test_delta_vanishes_on_the_boundary_rays_and_nowhere_else():
    t = sp.Symbol("t", nonnegative=True)
    rays = phase.critical_rays()
    for start, direction in rays:
        g = start[0] + t * direction[0]
        gp = start[1] + t * direction[1]
        assert sp.simplify(delta(g, gp)) == 0
        for value in (0, R(1, 3), 5):
            assert classify(g.subs(t, value), gp.subs(t, value)) == "critical"
    # just off the rays: linear on one side, condensed on the other
    assert classify(R(99, 100), -1) == "linear" and classify(R(101, 100), -1) == "condensed"
    assert classify(2, R(101, 100)) == "linear" and classify(2, R(99, 100)) == "condensed"


@pytest.mark.parametrize(
    "g,gp,regime",
    [
        (0.5, 0, "linear"),
        (1, 0, "critical"),
        (1.5, 0, "condensed"),
        (1.5, 0.5, "critical"),
        (1.5, 0.6, "linear"),
        (1, -1, "critical"),
        (0.99, -1, "linear"),
        (2, -3, "condensed"),
        ("3/2", "1/2", "critical"),
        (1.1, 0.1, "critical"),  # exact: 1.1 - 1 - 0.1 is 0
    ],
)
def test_classify(g, gp, regime):
    assert classify(g, gp) == regime


def test_slope_interval_bounds():
    assert slope_interval(R(1, 2), 0) == (-sp.oo, R(-1, 2))  # linear: S_w <= Δ
    assert slope_interval(2, R(1, 2)) == (R(1, 4), sp.oo)  # condensed: S_w >= Δ/2
    assert slope_interval(1, 0) == (0, 0)
    point = phase.PhasePoint.at(2, 0)
    data = point.as_dict()
    assert data["slope_lo_value"] == 0.5 and data["slope_hi_value"] is None
    assert point.slope_text() == "≥ 1/2"


@pytest.mark.parametrize("bad", ["abc", float("nan"), float("inf"), None, True])
def test_bad_gamma_is_a_one_line_value_error(bad):
    with pytest.raises(ValueError) as err:
        classify(bad, 0)
    assert "gamma" in str(err.value) and "\n" not in str(err.value)


def test_unknown_scheme():
    with pytest.raises(ValueError, match="choose one of lecun"):
        phase.scheme("glorot")


def test_conservation_law_symbolic():
    assert phase.conservation_residuals(2, 2, 2) == [0, 0]


def _descend(lr: float, horizon: float = 4.0):
    """Gradient descent on the ReLU net of docs/science.md §2's 1-d setting up to time ``horizon``;
    returns (max drift of a² − ‖w‖², max change of a²) over neurons."""
    rng = np.random.default_rng(0)
    x = np.linspace(-0.5, 0.5, 4)
    y = x**2
    X = np.column_stack([x, np.ones_like(x)])  # x̃ = (x, 1): the bias is in w
    a = rng.standard_normal(20)
    W = rng.standard_normal((20, 2))
    c0, a0 = phase.conserved_quantities(a, W), a.copy()
    for _ in range(int(round(horizon / lr))):
        pre = X @ W.T
        act = np.maximum(pre, 0)
        err = act @ a - y
        grad_a = act.T @ err / len(y)
        grad_W = ((err[:, None] * (pre > 0) * a[None, :]).T @ X) / len(y)
        a -= lr * grad_a
        W -= lr * grad_W
    return (np.max(np.abs(phase.conserved_quantities(a, W) - c0)), np.max(np.abs(a**2 - a0**2)))


def test_conservation_law_along_numerical_gradient_flow():
    """a_k² − ‖w_k‖² is conserved by the flow: under gradient descent it drifts only by the
    discretization error, which halves with the step, while a_k² itself moves by O(1)."""
    drift1, moved = _descend(2e-3)
    drift2, _ = _descend(1e-3)
    assert moved > 0.1
    assert drift1 < 1e-2 * moved
    assert 1.8 < drift1 / drift2 < 2.2  # first order in the step: zero for the flow


def test_chizat_criterion_agrees_with_delta_at_nonpositive_gamma_prime():
    checked = 0
    for s in phase.SCHEMES.values():
        if s.param is not None:
            continue
        g, gp = s.coordinates()
        if gp > 0:
            continue
        lazy = lazy_rich.chizat_lazy(s.alpha, s.beta1, s.beta2)
        assert (lazy == "lazy") == (classify(g, gp) == "linear")
        assert (lazy == "borderline") == (classify(g, gp) == "critical")
        checked += 1
    assert checked == 3  # NTK, Xavier, mean field
    # mκ max(1, 1/κ') ~ m^{−Δ}: lazy exactly when Δ < 0, also for γ' > 0
    assert lazy_rich.generalized_lazy_exponent(R(3, 2), 1) == R(1, 2)
    assert lazy_rich.chizat_lazy(m ** R(3, 2), 1, 1) == "not lazy"


@pytest.mark.parametrize(
    "regime,slope,expect",
    [
        ("linear", -0.2, True),
        ("linear", 0.05, False),
        ("linear", 0.0, False),
        ("condensed", 0.3, True),
        ("condensed", -0.01, False),
        ("condensed", 0.0, False),
        ("critical", 0.1, True),
        ("critical", -0.14, True),
        ("critical", 0.15, True),
        ("critical", 0.2, False),
        ("linear", None, None),
        ("condensed", math.nan, None),
        ("critical", math.inf, None),
    ],
)
def test_slope_agreement_by_sign(regime, slope, expect):
    assert slope_agrees(regime, slope, 0.15) is expect


def test_slope_agreement_rejects_unknown_regime():
    for call in (
        lambda: slope_agrees("lazy", 0.1, 0.15),
        lambda: slope_in_interval("lazy", None, 0.0, 0.1, [8, 16], 0.15),
    ):
        with pytest.raises(ValueError, match="regime='lazy'") as err:
            call()
        assert "\n" not in str(err.value)


def test_slope_in_interval_with_log_allowance():
    widths = [128, 256, 512]
    allowance = 1 / math.log(128)  # ≈ 0.206: d ln(ln m)/d ln m at the smallest width
    assert log_allowance(widths) == pytest.approx(allowance, rel=1e-15)
    # linear at Δ = −0.4: allowed up to −0.4 + 0.206 (open end as None or −∞ alike)
    for lo in (None, -math.inf, -sp.oo):
        assert slope_in_interval("linear", lo, -0.4, -0.4 + allowance - 1e-9, widths, 0.15)
        assert not slope_in_interval("linear", lo, -0.4, -0.4 + allowance + 1e-9, widths, 0.15)
    # condensed at Δ = 0.5: S_w ≥ 0.25, no allowance; the end itself is inside
    assert slope_in_interval("condensed", 0.25, None, 0.25, widths, 0.15)
    assert slope_in_interval("condensed", R(1, 4), sp.oo, 0.25, widths, 0.15)
    assert not slope_in_interval("condensed", 0.25, None, 0.2, widths, 0.15)
    assert slope_in_interval("critical", 0.0, 0.0, -0.1, widths, 0.15)
    assert not slope_in_interval("critical", 0.0, 0.0, 0.16, widths, 0.15)
    assert slope_in_interval("linear", None, -0.4, None, widths, 0.15) is None
    with pytest.raises(ValueError, match="must be > 1"):
        log_allowance([1, 4])
