"""smallinit.llm: transformer, γ-initialization, training and analysis (docs/science.md §1, §5, §6).

Importing this package is light (no torch); each public name loads its module on first use::

    from smallinit.llm import apply_init, Transformer, ModelConfig, RunConfig, train

The public surface (``__all__``):

* init schemes on any transformer — :func:`apply_init` (``apply_init(model, "gamma:1.0")``:
  every matrix from N(0, d_in^(−2γ)); torch's global generator unless ``seed=``; this
  package's model, GPT-2, Llama-named models and registered families; compiled and
  data-parallel wrappers looked through), :func:`init_table` (σ and γ_eff per matrix),
  :func:`matrix_table` (what each matrix is), :func:`recorded_scheme`, :func:`unwrap`,
  :class:`UnusedOverrideWarning` (an override of a part the model has no matrix of);
* model families — :func:`register_family` (parameter-name patterns → matrix roles, and
  what the one-dimensional parameters are), :func:`families`;
* the model — :class:`Transformer`, :class:`ModelConfig`;
* training — :func:`train` (the function: ``train(RunConfig(...))`` → the finished run in
  the store; the module of the same name is ``smallinit.llm.training.train``),
  :class:`RunConfig`, :class:`DataConfig`, :class:`TrainConfig`, :class:`EvalConfig`,
  :func:`load_trained` (config and weights of a finished run);
* Hugging Face interop — :func:`export_run` (a run as a ``from_pretrained`` folder),
  :func:`load_lm` (a run or a local HF folder, ready for the benchmark scorer).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "apply_init": "smallinit.llm.model.init",
    "init_table": "smallinit.llm.model.init",
    "matrix_table": "smallinit.llm.model.init",
    "recorded_scheme": "smallinit.llm.model.init",
    "unwrap": "smallinit.llm.model.init",
    "UnusedOverrideWarning": "smallinit.llm.model.init",
    "register_family": "smallinit.llm.model.families",
    "families": "smallinit.llm.model.families",
    "Transformer": "smallinit.llm.model.transformer",
    "ModelConfig": "smallinit.llm.run_config",
    "DataConfig": "smallinit.llm.run_config",
    "TrainConfig": "smallinit.llm.run_config",
    "EvalConfig": "smallinit.llm.run_config",
    "RunConfig": "smallinit.llm.run_config",
    "train": "smallinit.llm.training.train",
    "export_run": "smallinit.llm.model.export",
    "load_lm": "smallinit.llm.downstream.hf_model",
    "load_trained": "smallinit.llm.training.trained",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'smallinit.llm' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
