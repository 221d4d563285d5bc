"""smallinit.theory: exact results, derived with sympy (docs/science.md §2-§5).

This package imports nothing else of smallinit: every number the toy and LLM modules
compare against comes from here. Importing it is light; each public name loads its module
on first use::

    from smallinit import theory
    theory.classify(1.75, 0)                      # 'condensed' (Δ = γ − 1 − max(γ', 0))
    theory.PhasePoint.at(1.75, 0).slope_text()    # '≥ 3/8'
    theory.matrix_std(theory.parse_scheme("gamma:1.0"), "mlp_out", 1024, 256,
                      n_layers=4)                  # σ = d_in^-γ = 1/1024

The public surface (``__all__``):

* the two-layer phase diagram (:mod:`.phase`, §2) — :func:`classify` (regime of (γ, γ′),
  |Δ| <= ``tol`` counts as critical, :data:`DEFAULT_TOL`), :class:`PhasePoint` (Δ, regime,
  predicted S_w interval), :func:`delta`, :func:`slope_interval`, :func:`coordinates`
  ((γ, γ′) of an init (α, β1, β2)), :func:`scheme` (the named inits on the diagram);
* init scales (:mod:`.init_rules`, §1) — :func:`parse_scheme`, :func:`canonical_scheme`,
  :class:`InitScheme`, :func:`matrix_std` (σ of one matrix), :func:`effective_gamma`;
* the transformer mapping (:mod:`.transformer`, §5) — :class:`TransformerShape`,
  :func:`matrices` (σ and γ_eff per matrix), :func:`report` (FFN points, γ_ε, Luo's
  assumptions), :func:`rmsnorm_gamma_threshold`;
* closed forms — :func:`escape_time` (§4), :func:`solve_q_alpha` and :func:`q` (Woodworth's
  Q_α, §4), :func:`multiplicity` (initial condensation, §3).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "classify": "phase",
    "PhasePoint": "phase",
    "delta": "phase",
    "slope_interval": "phase",
    "coordinates": "phase",
    "scheme": "phase",
    "DEFAULT_TOL": "phase",
    "parse_scheme": "init_rules",
    "canonical_scheme": "init_rules",
    "InitScheme": "init_rules",
    "matrix_std": "init_rules",
    "effective_gamma": "init_rules",
    "TransformerShape": "transformer",
    "matrices": "transformer",
    "report": "transformer",
    "rmsnorm_gamma_threshold": "transformer",
    "escape_time": "escape",
    "solve_q_alpha": "lazy_rich",
    "q": "lazy_rich",
    "multiplicity": "activations",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
