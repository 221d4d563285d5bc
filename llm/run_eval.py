"""Re-evaluating a stored run, and building models for the init table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from smallinit.config import config_from_dict
from smallinit.errors import StoreError
from smallinit.llm import corpus as corpus_mod
from smallinit.llm.config import ModelConfig, RunConfig
from smallinit.llm.evaluate import evaluate
from smallinit.llm.model import Transformer
from smallinit.runs import read_json


def load_trained(run_dir: Path) -> tuple[RunConfig, Transformer]:
    """The config and final weights of a finished ``llm-train`` run."""
    run_dir = Path(run_dir)
    meta = read_json(run_dir / "config.json")
    cfg = config_from_dict(RunConfig, meta["config"])
    weights = run_dir / "model.pt"
    if not weights.exists():
        raise StoreError(f"{weights} is missing: the run has not finished")
    model = Transformer(cfg.model)
    model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    return cfg, model


def evaluate_run(run_dir: Path, *, n_items: int | None = None,
                 n_windows: int | None = None) -> dict[str, Any]:
    """Held-out metrics of a finished run (see :mod:`smallinit.llm.evaluate`)."""
    cfg, model = load_trained(run_dir)
    corpus = corpus_mod.load(cfg.data, cfg.model.vocab_size)
    metrics, _ = evaluate(model, corpus, torch.device("cpu"),
                          n_windows=n_windows or cfg.eval.token_windows,
                          n_items=cfg.eval.answer_items if n_items is None else n_items,
                          context=cfg.model.context)
    return metrics


def build_for_table(cfg: ModelConfig, family: str):
    """This package's model, or a Hugging Face GPT-2 / Llama with the same sizes."""
    if family == "ours":
        return Transformer(cfg)
    from smallinit.llm import hf

    return hf.gpt2_from(cfg) if family == "gpt2" else hf.llama_from(cfg)
