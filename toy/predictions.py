"""What theory predicts for a (γ, γ') point, in the form the toy compares against.

Every formula comes from :mod:`smallinit.theory`; this module only adapts names and units.
"""

from __future__ import annotations

from smallinit.theory import phase as _phase


def regime(gamma: float, gamma_prime: float) -> str:
    """Theory's regime: "linear", "critical" or "condensed" (docs/science.md §2)."""
    return _phase.classify(gamma, gamma_prime)


def delta(gamma: float, gamma_prime: float) -> float:
    """Δ(γ, γ') = γ − 1 − max(γ', 0), from theory."""
    return float(_phase.delta(gamma, gamma_prime))


def slope_interval(gamma: float, gamma_prime: float) -> tuple[float, float]:
    """Theory's interval for the RD slope S_w (linear: (−∞, Δ]; condensed: [Δ/2, ∞))."""
    lo, hi = _phase.slope_interval(gamma, gamma_prime)
    return float(lo), float(hi)  # sympy's ±oo become ±inf
