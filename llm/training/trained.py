"""Re-evaluating a stored run, and building models for the init table.

A trained run is named by a RUN reference (:func:`resolve_run`): ``llm-train/<key>``, a key
or a unique prefix of one (hex digits only, looked up below the run store), or the path of
a run directory. A directory must hold a valid ``llm-train`` run: its ``config.json`` names
that kind and the directory's key, and the key is the hash of the config it holds (so a
config edited after the run was keyed is refused). Whatever is computed from a RUN is
stored in the run store, never next to a directory outside it.

A run directory outside the store came from someone else: its ``config.json`` is their
data. Its ``data.cache_dir`` is ignored (the default cache is used) and a ``text:`` or
``hf:`` corpus, which would make this process read a file or dataset the config names, is
refused unless the caller trusts the run (``trust_data``; ``--trust-run-data`` on the
command line). Runs inside the store are the user's own and used as they are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from smallinit.core.atomic import read_json
from smallinit.core.config import config_from_dict, override
from smallinit.core.errors import ConfigError, StoreError, one_line
from smallinit.core.runs import Run, config_key
from smallinit.core.store import RunStore
from smallinit.llm.data import corpus as corpus_mod
from smallinit.llm.data.tokenizer import TOKENIZER, load_tokenizer
from smallinit.llm.model import hf
from smallinit.llm.model.transformer import Transformer, meta_transformer
from smallinit.llm.run_config import DataConfig, ModelConfig, RunConfig
from smallinit.llm.training.checkpoint import WEIGHTS, load_safetensors, safe_load
from smallinit.llm.training.evaluate import evaluate
from smallinit.llm.training.memory import check_model_memory

TRAIN_KIND = "llm-train"  # smallinit.llm.training.train.KIND, without importing the trainer
KEY_PREFIX = re.compile(r"[0-9a-f]{1,16}")  # run keys are 16 hex digits (smallinit.core.store)
MAX_TABLE_LAYERS = 4096  # deepest model build_for_table builds


@dataclass
class TrainedRun:
    """A stored ``llm-train`` run, the store its results go to and whether it lives there."""

    path: Path
    key: str
    store_root: Path
    in_store: bool = True

    @property
    def name(self) -> str:
        return f"{TRAIN_KIND}/{self.key}"


def resolve_run(ref: str, runs_dir: str | Path | None = None) -> TrainedRun:
    """A trained run from a directory, ``llm-train/<key>``, a key or a unique key prefix.

    Results computed from it belong in the store ``runs_dir`` (default: ``$SMALLINIT_RUNS``
    or ``./runs``) wherever the run itself lies."""
    root = RunStore(runs_dir).root
    path = Path(ref)
    if (path / "config.json").is_file():
        key = _check_run_dir(path)
        base = (root / TRAIN_KIND).resolve()
        return TrainedRun(path, key, root, in_store=path.resolve().parent == base)
    key = ref.split("/", 1)[1] if ref.startswith(TRAIN_KIND + "/") else ref
    if not KEY_PREFIX.fullmatch(key):
        raise ConfigError(
            f"RUN {ref!r} matches no run: it is neither a run directory (with "
            "a config.json) nor a run key (1 to 16 lowercase hex digits, "
            "optionally after llm-train/)"
        )
    base = root / TRAIN_KIND
    matches = (
        sorted(
            p
            for p in base.iterdir()
            if p.name.startswith(key) and p.is_dir() and KEY_PREFIX.fullmatch(p.name)
        )
        if base.is_dir()
        else []
    )
    if len(matches) != 1:
        what = "no run directory, and as a key it matches no" if not matches else f"{len(matches)}"
        raise ConfigError(
            f"RUN {ref!r} matches {what} trained runs under {base}; give a run "
            "directory, llm-train/<key> or a unique key prefix (see --runs-dir)"
        )
    return TrainedRun(matches[0], matches[0].name, root)


def _check_run_dir(path: Path) -> str:
    """The key of the ``llm-train`` run directory ``path``, after checking it is one."""
    meta = read_json(path / "config.json")
    if not isinstance(meta, dict) or meta.get("kind") != TRAIN_KIND:
        kind = meta.get("kind") if isinstance(meta, dict) else None
        raise ConfigError(
            f"{path} is a run of kind {kind!r}, not {TRAIN_KIND!r}; give a trained model's run"
        )
    key = meta.get("key")
    if key != path.resolve().name or not isinstance(meta.get("config"), dict):
        raise ConfigError(
            f"{path} is not a valid run directory: its config.json names key "
            f"{key!r}; the directory is {path.resolve().name!r}"
        )
    if config_key(TRAIN_KIND, meta["config"], str(meta.get("version", "1"))) != key:
        raise ConfigError(
            f"{path}/config.json does not hash to its key {key}: the config was "
            "edited after the run was keyed; refusing it"
        )
    return key


def data_config(run: TrainedRun, cfg: RunConfig, *, trust_data: bool = False) -> DataConfig:
    """The corpus config to evaluate ``run`` on (see the module doc for the trust rule)."""
    if run.in_store or trust_data:
        return cfg.data
    if cfg.data.corpus.startswith(("text:", "hf:")):
        raise ConfigError(
            f"run {run.path} is outside the run store {run.store_root} and its "
            f"config names data.corpus={cfg.data.corpus!r}; pass "
            "--trust-run-data to read it (only for a run you trust)"
        )
    return override(cfg.data, {"cache_dir": None})


def run_config(run_dir: str | Path) -> RunConfig:
    """The :class:`RunConfig` stored in a run directory's ``config.json``."""
    return config_from_dict(
        RunConfig, read_json(Path(run_dir) / "config.json")["config"], where="config"
    )


def load_trained(run_dir: str | Path) -> tuple[RunConfig, Transformer]:
    """The config and final weights (CPU) of a finished ``llm-train`` run: its
    ``model.safetensors``, or for a run trained before those were written, ``model.pt``
    (loaded weights-only)."""
    run_dir = Path(run_dir)
    run = Run(run_dir, TRAIN_KIND, run_dir.name, None, "")
    state = run.state
    if state != "done":
        raise ConfigError(
            f"trained run {run_dir} is {state}, not done; train it first (smallinit llm train)"
        )
    name = WEIGHTS if (run_dir / WEIGHTS).is_file() else "model.pt"
    if not (run_dir / name).is_file():
        raise StoreError(f"{run_dir / WEIGHTS} is missing; the run finished without saving weights")
    weights = run.file(name)  # the config hashes to the key, the bytes to the manifest
    cfg = run_config(run_dir)
    check_model_memory(cfg.model, f"loading {weights}")
    try:  # tensors only: no pickled code runs
        state = load_safetensors(weights) if weights.name == WEIGHTS else safe_load(weights)
    except Exception as err:  # torch: RuntimeError, OSError, EOFError, pickle errors;
        # safetensors: SafetensorError
        raise StoreError(
            f"{weights} cannot be read ({type(err).__name__}: "
            f"{one_line(err)[:200]}); the file is damaged: train the run again "
            "(smallinit llm train with its config and --force)"
        ) from None
    model = Transformer(cfg.model)
    mismatch = first_mismatch(model.state_dict(), state)
    if mismatch:
        raise StoreError(f"{weights} does not match its config.json: {mismatch}")
    model.load_state_dict(state)
    return cfg, model


def run_tokenizer(run: TrainedRun, cfg: RunConfig, *, trust_data: bool = False) -> Tokenizer:
    """The tokenizer ``run`` was trained with: its ``tokenizer.json``, or for a run trained
    before that was stored, the one of its corpus, rebuilt deterministically from the run's
    data config if it is not cached (BPE trained on the same training split; the trust
    rule of :func:`data_config` applies)."""
    path = run.path / TOKENIZER
    if path.is_file():
        return load_tokenizer(Run(run.path, TRAIN_KIND, run.key, None, "").file(TOKENIZER))
    return corpus_mod.load(
        data_config(run, cfg, trust_data=trust_data), cfg.model.vocab_size
    ).tokenizer


def first_mismatch(expected: dict[str, Any], loaded: Any) -> str | None:
    """The first difference between a model's state dict and loaded weights (a missing or
    unexpected tensor, or a shape that differs), or None when they match."""
    if not isinstance(loaded, dict):
        return f"it holds a {type(loaded).__name__}, not a dict of tensors"
    for name, tensor in expected.items():
        if name not in loaded:
            return f"tensor {name} is missing"
        got = loaded[name]
        if not isinstance(got, torch.Tensor):
            return f"{name} is a {type(got).__name__}, not a tensor"
        if tuple(got.shape) != tuple(tensor.shape):
            return f"{name} has shape {tuple(got.shape)}, the config gives {tuple(tensor.shape)}"
    extra = sorted(set(loaded) - set(expected))
    if extra:
        return f"tensor {extra[0]} is not in the model the config describes"
    return None


def evaluate_run(
    run: TrainedRun,
    *,
    n_items: int | None = None,
    n_windows: int | None = None,
    trust_data: bool = False,
) -> dict[str, Any]:
    """Held-out metrics of a finished run (see :mod:`smallinit.llm.training.evaluate`)."""
    cfg, model = load_trained(run.path)
    corpus = corpus_mod.load(data_config(run, cfg, trust_data=trust_data), cfg.model.vocab_size)
    metrics, _ = evaluate(
        model,
        corpus,
        torch.device("cpu"),
        n_windows=n_windows or cfg.eval.token_windows,
        n_items=cfg.eval.answer_items if n_items is None else n_items,
        context=cfg.model.context,
    )
    return metrics


def build_for_table(cfg: ModelConfig, family: str):
    """This package's model, or a Hugging Face GPT-2 / Llama / Phi-3 with the same sizes, on the
    ``meta`` device (parameters with shapes and no storage). Deeper than
    :data:`MAX_TABLE_LAYERS` is refused: the table has a row per matrix, and building
    millions of modules takes minutes even without storage."""
    if cfg.n_layers > MAX_TABLE_LAYERS:
        raise ConfigError(
            f"model.n_layers={cfg.n_layers} is too deep for an init table (one "
            f"row per matrix, about 7 per layer); use at most {MAX_TABLE_LAYERS}"
        )
    if family == "ours":
        return meta_transformer(cfg)
    with torch.device("meta"):  # shapes only: a table of any size needs no memory
        return {"gpt2": hf.gpt2_from, "llama": hf.llama_from, "phi3": hf.phi3_from}[family](cfg)
