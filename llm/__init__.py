"""smallinit.llm: transformer, γ-initialization, training and analysis (docs/science.md §1, §5, §6).

Importing this package is light (no torch); the names below load their module on first use::

    from smallinit.llm import apply_init, Transformer, ModelConfig, RunConfig, train
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "apply_init": "smallinit.llm.model.init",
    "init_table": "smallinit.llm.model.init",
    "matrix_table": "smallinit.llm.model.init",
    "Transformer": "smallinit.llm.model.transformer",
    "ModelConfig": "smallinit.llm.config",
    "DataConfig": "smallinit.llm.config",
    "TrainConfig": "smallinit.llm.config",
    "EvalConfig": "smallinit.llm.config",
    "RunConfig": "smallinit.llm.config",
    "train": "smallinit.llm.training.train",
    "export_run": "smallinit.llm.model.export",
    "load_lm": "smallinit.llm.bench.hf_model",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'smallinit.llm' has no attribute {name!r}")
