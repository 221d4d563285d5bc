"""The two-layer ReLU phase diagram (docs/science.md §2; Luo, Xu, Ma, Zhang, JMLR 22(71), 2021).

Model (Luo et al. eq. 1): f(x) = (1/α) Σ_{k=1..m} a_k σ(w_k·x̃), σ = ReLU, x̃ = (x, 1), with
a_k ~ N(0, β1²), w_k ~ N(0, β2² I), loss R = (1/2n) Σ_i (f(x_i) − y_i)², gradient flow.

Rescaling (Luo et al. §3): ā = a/β1, w̄ = w/β2, t̄ = t/(β1β2). Because ReLU is positively
1-homogeneous, f = κ Σ ā_k σ(w̄_k·x̃) and the flow becomes

    dā_k/dt̄ = −(1/κ') ∂R/∂ā_k,    dw̄_k/dt̄ = −κ' ∇_{w̄_k} R,
    κ = β1β2/α,   κ' = β1/β2.

:func:`rescaled_flow_residuals` checks this identity symbolically. The coordinates are
γ = lim_{m→∞} −ln κ / ln m and γ' = lim_{m→∞} −ln κ' / ln m (:func:`coordinates`), and the
regime is decided by Δ(γ, γ') = γ − 1 − max(γ', 0) (:func:`classify`):

    linear    Δ < 0   (γ < 1 or γ' > γ − 1)    relative change of input weights → 0
    critical  Δ = 0   (rays {γ = 1, γ' ≤ 0} and {γ' = γ − 1, γ' ≥ 0})
    condensed Δ > 0   (γ > 1 and γ' < γ − 1)    relative change → ∞

Slope of the relative distance RD of the input weights against width (docs/science.md §2, no minus
sign): RD ≲ m^Δ log m in the linear regime (S_w ≤ Δ), RD ≳ m^{Δ/2} in the condensed regime
(S_w ≥ Δ/2) (:func:`slope_interval`); whether a measured S_w agrees with them is decided
here, once (:func:`slope_agrees`, :func:`slope_in_interval`). Per neuron, a_k² − ‖w_k‖²
(bias included) is conserved by the gradient flow (:func:`conservation_residuals`).

Width scalings: ``"fixed"`` keeps the input dimension d constant as m → ∞ (Luo et al.'s
setting); ``"proportional"`` sets d = m/r with a fixed ratio r (a transformer FFN with
d_ff = r·d_model, docs/science.md §5).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Literal

import numpy as np
import sympy as sp

from .exact import rate_value, show, to_exact

#: Width m (number of hidden neurons), input dimension d, width ratio r = m/d.
m, d, r = sp.symbols("m d r", positive=True)
#: Generic positive scales of the model, used in the symbolic identities.
alpha_s, beta1_s, beta2_s = sp.symbols("alpha beta1 beta2", positive=True)

Scaling = Literal["fixed", "proportional"]
SCALINGS: tuple[str, ...] = ("fixed", "proportional")
REGIMES: tuple[str, ...] = ("linear", "critical", "condensed")


# ----------------------------------------------------------------------------- ReLU, symbolically
def _positive_factor(z: sp.Expr) -> tuple[sp.Expr, sp.Expr] | None:
    """Split ``z`` into (positive factor, rest) when sympy can see a positive factor."""
    z = sp.factor_terms(z)
    if not z.is_Mul:
        return None
    pos = [f for f in z.args if f.is_positive]
    if not pos:
        return None
    return sp.Mul(*pos), sp.Mul(*[f for f in z.args if not f.is_positive])


class relu(sp.Function):  # noqa: N801 - a mathematical function, named as in the text
    """ReLU through its two defining properties, the only ones the identities use:
    positive 1-homogeneity, σ(c z) = c σ(z) for c > 0, and σ' = :class:`relu_step`."""

    @classmethod
    def eval(cls, z):
        split = _positive_factor(z)
        if split is not None:
            return split[0] * cls(split[1])
        return None

    def fdiff(self, argindex=1):
        return relu_step(self.args[0])


class relu_step(sp.Function):  # noqa: N801
    """σ' of ReLU (the step function): 0-homogeneous, σ'(c z) = σ'(z) for c > 0, and
    Euler's relation z σ'(z) = σ(z) (:func:`euler_relation`)."""

    @classmethod
    def eval(cls, z):
        split = _positive_factor(z)
        if split is not None:
            return cls(split[1])
        return None


def euler_relation(expr: sp.Expr) -> sp.Expr:
    """Rewrite σ'(u) as σ(u)/u (Euler's relation for a 1-homogeneous σ, u ≠ 0)."""
    return expr.replace(lambda e: isinstance(e, relu_step), lambda e: relu(e.args[0]) / e.args[0])


# ----------------------------------------------------------------------------- κ, κ'
def kappa(alpha: Any, beta1: Any, beta2: Any) -> sp.Expr:
    """κ = β1 β2 / α: the output scale of the rescaled model (Luo et al. eq. 6)."""
    return sp.simplify(sp.sympify(beta1) * sp.sympify(beta2) / sp.sympify(alpha))


def kappa_prime(beta1: Any, beta2: Any) -> sp.Expr:
    """κ' = β1 / β2: the ratio of output to input weight scales (Luo et al. eq. 6)."""
    return sp.simplify(sp.sympify(beta1) / sp.sympify(beta2))


def _two_layer_loss(a, W, X, y, scale):
    """R = (1/2n) Σ_i (scale · Σ_k a_k σ(w_k·x̃_i) − y_i)² with x̃_i = (x_i, 1)."""
    n = len(y)
    total = 0
    for xi, yi in zip(X, y, strict=True):
        xt = list(xi) + [1]
        f = scale * sum(
            ak * relu(sum(wj * xj for wj, xj in zip(wk, xt, strict=True)))
            for ak, wk in zip(a, W, strict=True)
        )
        total += (f - yi) ** 2
    return total / (2 * n)


def _instance(m_neurons: int, d_in: int, n_points: int):
    a = sp.symbols(f"a0:{m_neurons}", real=True)
    W = [sp.symbols(f"w{k}_0:{d_in + 1}", real=True) for k in range(m_neurons)]
    X = [sp.symbols(f"x{i}_0:{d_in}", real=True) for i in range(n_points)]
    y = sp.symbols(f"y0:{n_points}", real=True)
    return a, W, X, y


def rescaled_flow_residuals(m_neurons: int = 2, d_in: int = 2, n_points: int = 2) -> list:
    """Left minus right side of the normalized flow, for every parameter; all are 0.

    Takes the original flow ȧ = −∂R/∂a, ẇ = −∇_w R of f = (1/α) Σ a_k σ(w_k·x̃), substitutes
    a = β1 ā, w = β2 w̄, t = β1β2 t̄ (so dā/dt̄ = β2 ȧ and dw̄/dt̄ = β1 ẇ) and subtracts the
    normalized flow dā/dt̄ = −(1/κ') ∂R̄/∂ā, dw̄/dt̄ = −κ' ∇_w̄ R̄ of the model
    f̄ = κ Σ ā_k σ(w̄_k·x̃) (docs/science.md §2). Every entry is sympy 0 when the identity holds. The
    data, targets and parameters are generic symbols; the sizes only set how many.
    """
    a, W, X, y = _instance(m_neurons, d_in, n_points)
    abar = sp.symbols(f"abar0:{m_neurons}", real=True)
    Wbar = [sp.symbols(f"wbar{k}_0:{d_in + 1}", real=True) for k in range(m_neurons)]
    R = _two_layer_loss(a, W, X, y, 1 / alpha_s)
    Rbar = _two_layer_loss(abar, Wbar, X, y, kappa(alpha_s, beta1_s, beta2_s))
    kp = kappa_prime(beta1_s, beta2_s)
    subs = {ak: beta1_s * abk for ak, abk in zip(a, abar, strict=True)}
    for wk, wbk in zip(W, Wbar, strict=True):
        subs.update({wj: beta2_s * wbj for wj, wbj in zip(wk, wbk, strict=True)})

    residuals = []
    for ak, abk in zip(a, abar, strict=True):
        lhs = beta2_s * (-sp.diff(R, ak)).subs(subs)
        rhs = -(1 / kp) * sp.diff(Rbar, abk)
        residuals.append(sp.simplify(lhs - rhs))
    for wk, wbk in zip(W, Wbar, strict=True):
        for wj, wbj in zip(wk, wbk, strict=True):
            lhs = beta1_s * (-sp.diff(R, wj)).subs(subs)
            rhs = -kp * sp.diff(Rbar, wbj)
            residuals.append(sp.simplify(lhs - rhs))
    return residuals


def conservation_residuals(m_neurons: int = 2, d_in: int = 2, n_points: int = 2) -> list:
    """d/dt (a_k² − ‖w_k‖²) along the original flow, one per neuron; all are 0.

    d/dt (a_k² − ‖w_k‖²) = −2 a_k ∂R/∂a_k + 2 w_k·∇_{w_k} R, and w_k·∇_{w_k} R = a_k ∂R/∂a_k
    by Euler's relation z σ'(z) = σ(z) (docs/science.md §2; Du, Hu, Lee 2018, Thm 2.1). The bias is
    the last entry of w_k, so it is part of the conserved norm.
    """
    a, W, X, y = _instance(m_neurons, d_in, n_points)
    R = _two_layer_loss(a, W, X, y, 1 / alpha_s)
    out = []
    for ak, wk in zip(a, W, strict=True):
        rate = 2 * ak * (-sp.diff(R, ak)) - sum(2 * wj * (-sp.diff(R, wj)) for wj in wk)
        out.append(sp.simplify(euler_relation(sp.expand(rate))))
    return out


def conserved_quantities(a: np.ndarray, W: np.ndarray) -> np.ndarray:
    """a_k² − ‖w_k‖² for each neuron (W: one row per neuron, bias column included)."""
    a = np.asarray(a, dtype=float)
    W = np.asarray(W, dtype=float)
    return a**2 - np.sum(W**2, axis=1)


# ----------------------------------------------------------------------------- coordinates
def _width_law(expr: Any, scaling: str) -> sp.Expr:
    expr = sp.sympify(expr)
    if scaling == "fixed":
        return expr
    if scaling == "proportional":
        return expr.subs(d, m / r)
    raise ValueError(f"scaling={scaling!r} is not allowed; choose one of {', '.join(SCALINGS)}")


def _rate(expr: sp.Expr, name: str) -> sp.Expr:
    """lim_{m→∞} −ln(expr)/ln m, the exponent of expr ~ m^{−rate}."""
    if not expr.is_positive and expr.is_positive is not None:
        raise ValueError(f"{name}={expr} is not positive, so it has no logarithm")
    log_expr = sp.expand_log(sp.log(expr), force=True)
    coeff = log_expr.coeff(sp.log(m))
    if not (log_expr - coeff * sp.log(m)).has(m) and not coeff.has(m):
        return sp.simplify(-coeff)  # a power law c·m^{−rate}: read the exponent off
    rate = sp.limit(-log_expr / sp.log(m), m, sp.oo)
    if rate.has(sp.oo, -sp.oo, sp.zoo, sp.nan) or isinstance(rate, sp.AccumBounds):
        raise ValueError(f"{name}={expr} does not scale as a power of m (limit is {rate})")
    return sp.simplify(rate)


@functools.lru_cache(maxsize=512)
def _coordinates_cached(alpha: sp.Expr, beta1: sp.Expr, beta2: sp.Expr, scaling: str):
    k = _width_law(kappa(alpha, beta1, beta2), scaling)
    kp = _width_law(kappa_prime(beta1, beta2), scaling)
    return _rate(k, "kappa"), _rate(kp, "kappa'")


def coordinates(alpha: Any, beta1: Any, beta2: Any, scaling: str = "fixed"):
    """Exact (γ, γ') = (lim −ln κ/ln m, lim −ln κ'/ln m) as m → ∞ (docs/science.md §2, Luo et al.
    eq. 7).

    α, β1, β2 are sympy expressions in :data:`m` and :data:`d` (and possibly a parameter).
    ``scaling="fixed"`` keeps d constant; ``"proportional"`` puts d = m/r first (one of
    :data:`Scaling`; any other is a ValueError).
    """
    args = tuple(
        sp.sympify(to_exact(v, n))
        for v, n in ((alpha, "alpha"), (beta1, "beta1"), (beta2, "beta2"))
    )
    return _coordinates_cached(*args, scaling)


def delta(gamma: Any, gamma_prime: Any) -> sp.Expr:
    """Δ(γ, γ') = γ − 1 − max(γ', 0) (docs/science.md §2; its sign decides the regime)."""
    g = rate_value(gamma, "gamma")
    gp = rate_value(gamma_prime, "gamma_prime")
    return g - 1 - sp.Max(gp, 0)


#: |Δ| at or below which a point counts as critical (Δ = 0). Exact inputs (0.1 is read as
#: 1/10) need none; a γ derived by float arithmetic (1.1 − 1 = 0.10000000000000009) carries
#: rounding noise of order 1e-16 that must not decide the regime. 1e-9 is far above that
#: noise and far below any Δ that could show in m^Δ at a width a computer holds
#: (m^(1e-9) − 1 < 1e-7 for m < 1e40). ``tol=0`` classifies exactly.
DEFAULT_TOL = 1e-9


def _check_tol(tol: Any) -> float:
    if (
        isinstance(tol, bool)
        or not isinstance(tol, int | float)
        or not math.isfinite(tol)
        or tol < 0
        or tol >= 0.5
    ):
        raise ValueError(
            f"tol={tol!r} is not allowed; give a number with 0 <= tol < 0.5 "
            f"(default {DEFAULT_TOL:g}; 0 classifies exactly)"
        )
    return float(tol)


def _sign(value: sp.Expr, what: str, tol: float = 0.0) -> int:
    """−1, 0 or +1: the sign of ``value``, with |value| <= ``tol`` counting as 0."""
    if value.is_zero:
        return 0
    if tol and value.is_number and abs(value) <= sp.Rational(repr(tol)):
        return 0
    if value.is_positive:
        return 1
    if value.is_negative:
        return -1
    raise ValueError(
        f"cannot decide the sign of {what} = {value}; give numbers, or use regime_intervals "
        "for a family with a free parameter"
    )


def classify(gamma: Any, gamma_prime: Any, *, tol: float = DEFAULT_TOL) -> str:
    """``"linear"`` (Δ < 0), ``"critical"`` (Δ = 0) or ``"condensed"`` (Δ > 0), exactly up
    to ``tol``: |Δ| <= tol counts as Δ = 0 (:data:`DEFAULT_TOL`; 0 for exact).

    Floats are read as the decimals they print as, so classify(1.1, 0.1) is critical, and
    with the default tolerance so is classify(1.1, 1.1 - 1) (Δ = −9e-17 by rounding).
    """
    tol = _check_tol(tol)
    return REGIMES[_sign(delta(gamma, gamma_prime), "Delta", tol) + 1]


def slope_interval(
    gamma: Any, gamma_prime: Any, *, tol: float = DEFAULT_TOL
) -> tuple[sp.Expr, sp.Expr]:
    """Predicted interval (lo, hi) of the width slope S_w = d ln RD / d ln m (docs/science.md §2).

    Linear regime: RD ≲ m^Δ log m, so S_w ≤ Δ (up to the log factor): (−∞, Δ].
    Condensed regime: RD ≳ m^{Δ/2}, so S_w ≥ Δ/2: [Δ/2, +∞).
    Critical (Δ = 0, or |Δ| <= ``tol`` as in :func:`classify`): both bounds meet, S_w = 0
    (RD stays O(1), e.g. mean field).
    """
    dl = delta(gamma, gamma_prime)
    sign = _sign(dl, "Delta", _check_tol(tol))
    if sign < 0:
        return -sp.oo, dl
    if sign > 0:
        return dl / 2, sp.oo
    return sp.Integer(0), sp.Integer(0)


def log_allowance(widths: Any) -> float:
    """Largest slope the log m factor of the linear bound RD ≲ m^Δ log m can add over
    ``widths``: d ln(ln m)/d ln m = 1/ln m, largest at the smallest width (needs m > 1)."""
    m_min = min(widths)
    if not m_min > 1:
        raise ValueError(f"widths={list(widths)} is not allowed; every width must be > 1")
    return 1.0 / math.log(m_min)


def _measured(s_w: Any) -> float | None:
    if s_w is None:
        return None
    s = float(s_w)
    return s if math.isfinite(s) else None


def slope_agrees(regime: str, s_w: Any, critical_tol: float) -> bool | None:
    """Does a measured slope S_w agree with theory's regime? (docs/science.md §2)

    The sign decides: linear S_w < 0, condensed S_w > 0, critical |S_w| ≤ ``critical_tol``.
    None when there is no slope (None or not finite). The one rule the toy scan and the
    toy-to-transformer comparison grade by.
    """
    s = _measured(s_w)
    if regime not in REGIMES:
        raise ValueError(f"regime={regime!r} is not one of {', '.join(REGIMES)}")
    if s is None:
        return None
    if regime == "linear":
        return s < 0
    if regime == "condensed":
        return s > 0
    return abs(s) <= critical_tol


def slope_in_interval(
    regime: str, lo: Any, hi: Any, s_w: Any, widths: Any, critical_tol: float
) -> bool | None:
    """Is a measured S_w inside theory's interval [lo, hi] (:func:`slope_interval`; None or
    ±∞ for an open end)? The linear upper end gets :func:`log_allowance` over ``widths``
    (the log m factor of RD ≲ m^Δ log m); at a critical point the interval is {0} and
    |S_w| ≤ ``critical_tol`` counts as inside. None when there is no slope.
    """
    s = _measured(s_w)
    if regime not in REGIMES:
        raise ValueError(f"regime={regime!r} is not one of {', '.join(REGIMES)}")
    if s is None:
        return None
    if regime == "critical":
        return abs(s) <= critical_tol
    low = -math.inf if lo is None else float(lo)
    high = math.inf if hi is None else float(hi)
    if regime == "linear":
        high += log_allowance(widths)
    return low <= s <= high


def critical_rays() -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """The boundary Δ = 0 as two rays (start, direction), from the triple point (1, 0).

    On γ' ≤ 0 the max is 0 and Δ = γ − 1, so Δ = 0 is {γ = 1, γ' ≤ 0}: start (1, 0),
    direction (0, −1). On γ' ≥ 0, Δ = γ − 1 − γ', so Δ = 0 is {γ' = γ − 1, γ' ≥ 0}: start
    (1, 0), direction (1, 1) (docs/science.md §2). The tests check Δ = 0 along both symbolically.
    """
    return [((1, 0), (0, -1)), ((1, 0), (1, 1))]


# ----------------------------------------------------------------------------- families
def regime_intervals(gamma: Any, gamma_prime: Any, param: sp.Symbol) -> list[tuple]:
    """For coordinates that depend on one real parameter: [(set of param, regime), ...].

    Δ is piecewise smooth in the parameter (the max switches where γ' = 0), so the sign can
    only change at a root of γ', of γ − 1 or of γ − 1 − γ'. Between and at those roots the
    regime is constant and is decided by :func:`classify`; adjacent equal pieces are merged.
    """
    g, gp = sp.sympify(gamma), sp.sympify(gamma_prime)
    roots: set[sp.Expr] = set()
    for expr in (gp, g - 1, g - 1 - gp):
        if expr.has(param):
            roots.update(s for s in sp.solve(expr, param) if s.is_real)
    cuts = sorted(roots, key=float)
    probes: list[tuple[sp.Set, sp.Expr]] = []
    if not cuts:
        probes.append((sp.S.Reals, sp.Integer(0)))
    else:
        probes.append((sp.Interval.open(-sp.oo, cuts[0]), cuts[0] - 1))
        for lo, hi in zip(cuts, cuts[1:], strict=False):
            probes.append((sp.FiniteSet(lo), lo))
            probes.append((sp.Interval.open(lo, hi), (lo + hi) / 2))
        probes.append((sp.FiniteSet(cuts[-1]), cuts[-1]))
        probes.append((sp.Interval.open(cuts[-1], sp.oo), cuts[-1] + 1))
    pieces: list[tuple[sp.Set, str]] = []
    for where, value in probes:
        regime = classify(g.subs(param, value), gp.subs(param, value))
        if pieces and pieces[-1][1] == regime:
            pieces[-1] = (sp.Union(pieces[-1][0], where), regime)
        else:
            pieces.append((where, regime))
    return pieces


def describe_set(where: sp.Set, param: sp.Symbol) -> str:
    """``'γ < 1/2'``-style text for an interval or point of the parameter."""
    name = str(param)
    if where == sp.S.Reals:
        return f"all {name}"
    if isinstance(where, sp.FiniteSet):
        return " or ".join(f"{name} = {show(v)}" for v in where)
    if isinstance(where, sp.Interval):
        lo, hi = where.start, where.end
        left = "" if lo == -sp.oo else f"{show(lo)} {'<' if where.left_open else '≤'} "
        right = "" if hi == sp.oo else f" {'<' if where.right_open else '≤'} {show(hi)}"
        if lo == -sp.oo and hi != sp.oo:
            return f"{name}{right}"
        if hi == sp.oo and lo != -sp.oo:
            return f"{name} {'>' if where.left_open else '≥'} {show(lo)}"
        return f"{left}{name}{right}"
    return sp.sstr(where)


# ----------------------------------------------------------------------------- registry
@dataclasses.dataclass(frozen=True)
class PhasePoint:
    """A point of the diagram with everything the theory predicts for it."""

    gamma: sp.Expr
    gamma_prime: sp.Expr
    delta: sp.Expr
    regime: str
    slope: tuple[sp.Expr, sp.Expr]

    @classmethod
    def at(cls, gamma: Any, gamma_prime: Any, *, tol: float = DEFAULT_TOL) -> PhasePoint:
        """The point (γ, γ'); |Δ| <= ``tol`` counts as critical (:func:`classify`)."""
        g, gp = to_exact(gamma, "gamma"), to_exact(gamma_prime, "gamma_prime")
        return cls(
            g,
            gp,
            sp.simplify(delta(g, gp)),
            classify(g, gp, tol=tol),
            slope_interval(g, gp, tol=tol),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "gamma": show(self.gamma),
            "gamma_prime": show(self.gamma_prime),
            "delta": show(self.delta),
            "regime": self.regime,
            "slope_lo": show(self.slope[0]),
            "slope_hi": show(self.slope[1]),
            "slope": self.slope_text(),
            "gamma_value": float(self.gamma),
            "gamma_prime_value": float(self.gamma_prime),
            "delta_value": float(self.delta),
            # JSON has no infinity: an open end of the interval is None.
            "slope_lo_value": None if self.slope[0] == -sp.oo else float(self.slope[0]),
            "slope_hi_value": None if self.slope[1] == sp.oo else float(self.slope[1]),
        }

    def slope_text(self) -> str:
        """The S_w prediction in words: ``≤ Δ``, ``≥ Δ/2`` or ``= 0``."""
        lo, hi = self.slope
        if lo == -sp.oo:
            return f"≤ {show(hi)}"
        if hi == sp.oo:
            return f"≥ {show(lo)}"
        return f"= {show(lo)}"


#: Parameters of the one-parameter families.
gamma_param = sp.Symbol("gamma", real=True)
s_param = sp.Symbol("s", real=True)


@dataclasses.dataclass(frozen=True)
class Scheme:
    """A named initialization of the two-layer model: (α, β1, β2) in m, d (docs/science.md §2)."""

    name: str
    label: str
    alpha: sp.Expr
    beta1: sp.Expr
    beta2: sp.Expr
    scaling: str = "fixed"
    param: sp.Symbol | None = None
    source: str = ""

    def coordinates(self) -> tuple[sp.Expr, sp.Expr]:
        """(γ, γ') derived with :func:`coordinates` under this scheme's width scaling."""
        return coordinates(self.alpha, self.beta1, self.beta2, self.scaling)

    def at(self, value: Any) -> Scheme:
        """The member of a family at parameter ``value`` (a fixed scheme is returned as is)."""
        if self.param is None:
            return self
        v = rate_value(value, str(self.param))
        return dataclasses.replace(
            self,
            label=f"{self.label} [{self.param}={show(v)}]",
            alpha=self.alpha.subs(self.param, v),
            beta1=self.beta1.subs(self.param, v),
            beta2=self.beta2.subs(self.param, v),
            param=None,
        )

    def point(self) -> PhasePoint:
        """Coordinates, Δ, regime and S_w interval (a fixed scheme only)."""
        if self.param is not None:
            raise ValueError(f"scheme {self.name!r} is a family; pick a member with .at(value)")
        return PhasePoint.at(*self.coordinates())

    def regimes(self) -> list[tuple]:
        """For a family: the regime as a function of its parameter (:func:`regime_intervals`)."""
        if self.param is None:
            return [(sp.S.Reals, self.point().regime)]
        return regime_intervals(*self.coordinates(), self.param)


SCHEMES: dict[str, Scheme] = {
    s.name: s
    for s in (
        Scheme(
            "lecun",
            "LeCun",
            sp.Integer(1),
            sp.sqrt(1 / m),
            sp.sqrt(1 / d),
            source="LeCun et al. 1998; Luo et al. Table 1",
        ),
        Scheme(
            "he",
            "He",
            sp.Integer(1),
            sp.sqrt(2 / m),
            sp.sqrt(2 / d),
            source="He et al. 2015; Luo et al. Table 1",
        ),
        Scheme(
            "xavier",
            "Xavier",
            sp.Integer(1),
            sp.sqrt(2 / (m + 1)),
            sp.sqrt(2 / (m + d)),
            source="Glorot & Bengio 2010; Luo et al. Table 1",
        ),
        Scheme(
            "ntk",
            "NTK",
            sp.sqrt(m),
            sp.Integer(1),
            sp.Integer(1),
            source="Jacot et al. 2018; Luo et al. Table 1",
        ),
        Scheme(
            "mean_field",
            "mean field",
            m,
            sp.Integer(1),
            sp.Integer(1),
            source="Mei et al. 2018; Luo et al. Table 1",
        ),
        Scheme(
            "e_diagonal",
            "E et al. (1, β, 1), β = m^-s",
            sp.Integer(1),
            m**-s_param,
            sp.Integer(1),
            param=s_param,
            source="E, Ma, Wu 2020; Luo et al. Table 1",
        ),
        Scheme(
            "gamma_ffn_fixed",
            "γ-rule FFN, d fixed",
            sp.Integer(1),
            m**-gamma_param,
            d**-gamma_param,
            param=gamma_param,
            source="docs/science.md §5",
        ),
        Scheme(
            "gamma_ffn_proportional",
            "γ-rule FFN, d = m/r",
            sp.Integer(1),
            m**-gamma_param,
            d**-gamma_param,
            scaling="proportional",
            param=gamma_param,
            source="docs/science.md §5",
        ),
    )
}


def scheme(name: str) -> Scheme:
    """The registry entry ``name`` (ValueError listing the names otherwise)."""
    try:
        return SCHEMES[name]
    except KeyError:
        raise ValueError(
            f"scheme={name!r} is not known; choose one of {', '.join(SCHEMES)}"
        ) from None
