"""Escape from small initialization: the plateau of an L-homogeneous model (docs/science.md §4).

For a model that is L-homogeneous in its parameters θ started at scale ‖θ(0)‖ = ε, the
gradient near θ = 0 is (L−1)-homogeneous, so early on the norm obeys
d‖θ‖/dt = c ‖θ‖^{L−1} (c > 0 the growth rate of the best direction). Separating variables,
∫_ε^ρ r^{1−L} dr = c t, gives the time to reach norm ρ (:func:`escape_time`):

    L = 2:  T = ln(ρ/ε) / c                     ~ ln(1/ε)           (a two-layer net)
    L ≠ 2:  T = (ε^{2−L} − ρ^{2−L}) / ((L−2) c)  ~ ε^{2−L}/((L−2)c) for L > 2,
                                                  → ρ^{2−L}/((2−L)c), finite, for L < 2.

With ε = d^{−γ} (the γ rule, docs/science.md §1) the plateau grows like γ ln d for L = 2 and like
d^{γ(L−2)} for L > 2: the training cost of small initialization (:func:`escape_time_gamma`).
"""

from __future__ import annotations

from typing import Any

import sympy as sp

from .exact import ORDER_LIMIT, positive_float, rate_value, to_exact

eps, rho, c, t = sp.symbols("epsilon rho c t", positive=True)
L_s = sp.Symbol("L", positive=True)


def _order(L: Any) -> sp.Expr:
    value = to_exact(L, "L")
    if value.is_number and not (value.is_positive and value <= ORDER_LIMIT):
        raise ValueError(
            f"L={L!r} is not allowed; the homogeneity order must be in (0, {ORDER_LIMIT}]"
        )
    return value


def norm_trajectory(L: Any) -> sp.Expr:
    """r(t) with r(0) = ε, from ∫_ε^r s^{1−L} ds = c t (explicit before blow-up)."""
    L = _order(L)
    if L == 2:
        return eps * sp.exp(c * t)
    return (eps ** (2 - L) - (L - 2) * c * t) ** (1 / (2 - L))


def escape_time(L: Any, epsilon: Any = eps, rate: Any = c, target: Any = rho) -> sp.Expr:
    """Exact time for the norm to grow from ε to ρ under d r/dt = c r^{L−1}."""
    L = _order(L)
    s = sp.Symbol("s", positive=True)
    # conds="none" keeps the generic (L ≠ 2) branch for a symbolic L; a numeric L = 2 still
    # integrates to the logarithm.
    T = sp.integrate(s ** (1 - L), (s, eps, rho), conds="none") / c
    subs = {
        eps: to_exact(epsilon, "epsilon"),
        c: to_exact(rate, "rate"),
        rho: to_exact(target, "target"),
    }
    return sp.simplify(T.subs(subs))


def escape_time_leading(L: Any) -> sp.Expr:
    """Leading behaviour of the time to reach ρ = 1 as ε → 0: ln(1/ε)/c for L = 2,
    ε^{2−L}/((L−2)c) for L > 2, the finite 1/((2−L)c) for L < 2."""
    L = _order(L)
    T = escape_time(L, target=1)
    if L == 2:
        return sp.log(1 / eps) / c
    if L.is_number and L < 2:
        return sp.limit(T, eps, 0, "+")
    return sp.simplify(eps ** (2 - L) * sp.limit(T / eps ** (2 - L), eps, 0, "+"))


def escape_time_gamma(L: Any, gamma: Any, d: Any, rate: Any = 1) -> float:
    """Numeric escape time to ρ = 1 from ε = d^{−γ} (γ rule) at growth rate c."""
    d_value = positive_float(d, "d")
    if d_value <= 1:
        raise ValueError(f"d={d!r} is not allowed; the width must be > 1")
    positive_float(rate, "rate")
    g = rate_value(gamma, "gamma")
    epsilon = sp.Float(d_value) ** (-g)
    if not epsilon < 1:
        raise ValueError(f"gamma={gamma!r} gives ε = d^-γ ≥ 1; escape needs γ > 0")
    return float(escape_time(L, epsilon, to_exact(rate, "rate"), 1))
