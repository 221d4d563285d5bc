"""smallinit: how the scale of initialization decides what a network learns.

Core package: the run store (:mod:`smallinit.core.store`), configs (:mod:`smallinit.core.config`),
errors (:mod:`smallinit.core.errors`), progress bars (:mod:`smallinit.core.progress`) and the shared
figure style (:mod:`smallinit.core.plotting`). The components are installed beneath it and
load on first use (``import smallinit`` itself imports none of them)::

    from smallinit import theory, toy, llm

* :mod:`smallinit.theory` — exact results (sympy): ``classify``, ``PhasePoint``,
  ``coordinates``, ``matrix_std``, ``report``, ... (docs/science.md §2–§5);
* :mod:`smallinit.toy` — two-layer simulations (JAX): ``run_scan``, ``ScanConfig``, ...;
* :mod:`smallinit.llm` — transformers: ``apply_init``, ``register_family``, ``Transformer``,
  ``train``, ... (docs/science.md §1, §5, §6);
* :mod:`smallinit.kernels` — the shared measurements (RD, cosine Gram, condensation).

Runs as objects: :func:`load_run` opens a stored run by key (``.config``, ``.summary``,
``.metrics()``, ``.metrics_frame()``, ``.arrays()``), :func:`list_runs` lists the store and
:func:`verify_runs` checks that runs are what their keys say (:mod:`smallinit.core.results`).
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("smallinit")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0+unknown"

_COMPONENTS = ("theory", "toy", "llm", "kernels")
_EXPORTS = {
    "load_run": "smallinit.core.results",
    "list_runs": "smallinit.core.results",
    "verify_runs": "smallinit.core.results",
}

__all__ = ["__version__", *_COMPONENTS, *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _COMPONENTS:
        return importlib.import_module(f"smallinit.{name}")
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'smallinit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
