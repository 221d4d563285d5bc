"""smallinit.toy: two-layer and small-model simulations in JAX (docs/science.md §2-§4).

Importing this package is light (no JAX); each public name loads its module on first use.
Every experiment is a config dataclass computed once through the run store (``./runs`` or
``$SMALLINIT_RUNS``; pass ``store=RunStore(path)`` for another) and reused afterwards::

    from smallinit.toy import ScanConfig, run_scan
    result = run_scan(ScanConfig(gammas=(0.5, 1.75), gamma_primes=(0.0,), widths=(20, 40),
                                 seeds=1))
    [(r["gamma"], r["regime"], r["S_w"], r["agree"]) for r in result.records]

The public surface (``__all__``):

* the phase scan (§2) — :func:`run_scan` (RD slope S_w over a (γ, γ′) grid, graded against
  theory point by point; a :class:`ScanResult`), :class:`ScanConfig`, :func:`format_table`;
* condensation (§2, §3) — :func:`run_condense` (score and clusters per grid point),
  :class:`CondenseConfig`; :func:`run_initial_condensation` (orientation counts against the
  activation's multiplicity), :class:`InitialCondensationConfig`;
* lazy vs rich (§4) — :func:`run_diagonal` (diagonal linear nets vs argmin Q_α),
  :class:`DiagonalConfig`; :func:`run_escape` (plateau length from small init),
  :class:`EscapeConfig`;
* the model itself — :func:`luo_family` ((α, β1, β2) of a point at width m),
  :func:`init_asi` (anti-symmetric init), :class:`TrainSettings`, :func:`train_batch`.

The ``run_*`` functions return the run's summary and arrays in one dict (``run_scan`` a
:class:`ScanResult`).
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> (module, attribute)
_EXPORTS = {
    "run_scan": ("scan", "run_scan"),
    "ScanConfig": ("scan", "ScanConfig"),
    "ScanResult": ("scan", "ScanResult"),
    "format_table": ("scan", "format_table"),
    "run_condense": ("condense", "run"),
    "CondenseConfig": ("condense", "CondenseConfig"),
    "run_initial_condensation": ("initial_condensation", "run"),
    "InitialCondensationConfig": ("initial_condensation", "InitialCondensationConfig"),
    "run_diagonal": ("diagonal", "run"),
    "DiagonalConfig": ("diagonal", "DiagonalConfig"),
    "run_escape": ("escape", "run"),
    "EscapeConfig": ("escape", "EscapeConfig"),
    "luo_family": ("twolayer", "luo_family"),
    "init_asi": ("twolayer", "init_asi"),
    "TrainSettings": ("twolayer", "TrainSettings"),
    "train_batch": ("twolayer", "train_batch"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        module, attr = _EXPORTS[name]
        return getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
