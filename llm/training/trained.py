"""Re-evaluating a stored run, and building models for the init table."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from smallinit.config import config_from_dict
from smallinit.errors import ConfigError, StoreError
from smallinit.llm.config import ModelConfig, RunConfig
from smallinit.llm.data import corpus as corpus_mod
from smallinit.llm.model.transformer import Transformer
from smallinit.llm.training.checkpoint import safe_load
from smallinit.llm.training.evaluate import evaluate
from smallinit.runs import Run, RunStore, read_json

TRAIN_KIND = "llm-train"  # smallinit.llm.training.train.KIND, without importing the trainer


@dataclass
class TrainedRun:
    """A stored ``llm-train`` run and the store root it was found under."""

    path: Path
    key: str
    store_root: Path

    @property
    def name(self) -> str:
        return f"{TRAIN_KIND}/{self.key}"


def resolve_run(ref: str, runs_dir: str | Path | None = None) -> TrainedRun:
    """A trained run from a directory, ``llm-train/<key>``, a key or a unique key prefix."""
    path = Path(ref)
    if (path / "config.json").is_file():
        meta = read_json(path / "config.json")
        if meta.get("kind") != TRAIN_KIND:
            raise ConfigError(f"{path} is a run of kind {meta.get('kind')!r}, not "
                              f"{TRAIN_KIND!r}; give a trained model's run")
        root = Path(runs_dir) if runs_dir else (
            path.resolve().parent.parent if path.resolve().parent.name == TRAIN_KIND
            else RunStore().root)
        return TrainedRun(path, str(meta.get("key", path.name)), root)
    root = RunStore(runs_dir).root
    key = ref.split("/", 1)[1] if ref.startswith(TRAIN_KIND + "/") else ref
    base = root / TRAIN_KIND
    matches = sorted(p for p in base.glob(f"{key}*") if p.is_dir()) if base.is_dir() else []
    if len(matches) != 1:
        what = ("no run directory, and as a key it matches no" if not matches
                else f"{len(matches)}")
        raise ConfigError(f"RUN {ref!r} matches {what} trained runs under {base}; give a run "
                          "directory, llm-train/<key> or a unique key prefix (see --runs-dir)")
    return TrainedRun(matches[0], matches[0].name, root)


def load_trained(run_dir: str | Path) -> tuple[RunConfig, Transformer]:
    """The config and final weights (``model.pt``, CPU) of a finished ``llm-train`` run."""
    run_dir = Path(run_dir)
    state = Run(run_dir, TRAIN_KIND, run_dir.name, None, "").state
    if state != "done":
        raise ConfigError(f"trained run {run_dir} is {state}, not done; train it first "
                          "(smallinit llm train)")
    weights = run_dir / "model.pt"
    if not weights.is_file():
        raise StoreError(f"{weights} is missing; the run finished without saving weights")
    cfg = config_from_dict(RunConfig, read_json(run_dir / "config.json")["config"],
                           where="config")
    model = Transformer(cfg.model)
    model.load_state_dict(safe_load(weights))  # tensors only: no pickled code runs
    return cfg, model


def evaluate_run(run_dir: Path, *, n_items: int | None = None,
                 n_windows: int | None = None) -> dict[str, Any]:
    """Held-out metrics of a finished run (see :mod:`smallinit.llm.training.evaluate`)."""
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
    from smallinit.llm.model import hf

    return hf.gpt2_from(cfg) if family == "gpt2" else hf.llama_from(cfg)
