"""The training loop: the one place in llm/ where a transformer takes an optimizer step.

A :class:`Trainer` runs any :class:`Task` — what is trained on and how it is judged — with
the same optimizer, schedule, precision, checkpoints and DDP, and is extended only by
callbacks (:mod:`smallinit.llm.training.callbacks`: probes, checkpoints, log sinks). The
default task, :class:`LMTask`, is next-token pretraining on the run's corpus (store kind
``llm-train``), probed along the way (:mod:`smallinit.llm.training.probes`); the anchor
task (:mod:`smallinit.llm.training.anchor`) is another task.

Step s = 1 … S (``train.steps``):

* learning rate η(s) = η·(w₀ + (1 − w₀)·s/warmup) for s ≤ warmup (w₀ = ``warmup_from``,
  0 by default), then
  η_min + ½(η − η_min)(1 + cos(π·(s − warmup)/(S − warmup))) with η_min = min_lr_ratio·η;
* the task's *global* batch of step s, a function of (seed, s) only; under ``torchrun``
  each of the R ranks takes its contiguous 1/R slice, so a multi-process run sees the same
  data as one process and the data position is just the step;
* forward through the task's objective (bf16 autocast on GPU, ``precision``), backward,
  clipping to global norm ``grad_clip`` (0: off), then one AdamW step (Loshchilov &
  Hutter 2019) with decoupled weight decay λ on matrices and embeddings only (norm gains
  and biases are not decayed).

Every ``log_every`` steps and at the last one the mean training loss of the steps since
the previous record (averaged over ranks) is logged with η(s) and the task's own fields;
a non-finite mean stops the run and records it as failed. The task may log a held-out
evaluation after any step; then each callback's ``on_step`` sees the step and its log
record (None when it logged nothing). Every ``checkpoint_every`` steps (not the last) rank 0
writes a checkpoint (:mod:`smallinit.llm.training.checkpoint`: model, optimizer, step, RNG
states, and beside it its size and SHA-256);
a run asked for again after a kill resumes from its newest intact checkpoint (one that
differs from its SHA-256 is set aside, never read), cuts its
metrics back to it and reproduces the uninterrupted run's numbers exactly on CPU. At the
end the task evaluates and saves what it keeps (pretraining: also the run's tokenizer,
``tokenizer.json``), the trainer writes the final weights atomically as ``model.pt`` and
``model.safetensors`` and deletes the checkpoints. Under ``torchrun`` only rank 0 writes.

Every record written goes to metrics.jsonl and then to the callbacks, among them the run's
log sinks (:mod:`smallinit.llm.training.sinks`): a plain log line per record when progress
bars are hidden (output not a terminal), TensorBoard when asked for. Callbacks are not
config: the run key does not change.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from smallinit.core.atomic import atomic_write_text
from smallinit.core.config import check_instance, override
from smallinit.core.errors import ConfigError, RunFailed, StoreError
from smallinit.core.progress import bars_shown, progress
from smallinit.core.runs import Run
from smallinit.core.store import RunStore
from smallinit.llm.data import corpus as corpus_mod
from smallinit.llm.data.tokenizer import TOKENIZER
from smallinit.llm.model.init import init_table
from smallinit.llm.model.transformer import Transformer, meta_transformer
from smallinit.llm.run_config import RunConfig
from smallinit.llm.training.batches import batch_starts, get_batch
from smallinit.llm.training.callbacks import Callback, Checkpoints, Recorder
from smallinit.llm.training.checkpoint import (
    WEIGHTS,
    atomic_save_safetensors,
    atomic_torch_save,
    check_disk,
    checkpoints,
    disk_bytes,
    latest_loadable,
    load_checkpoint,
    remove_checkpoint,
    restore,
)
from smallinit.llm.training.evaluate import evaluate
from smallinit.llm.training.memory import check_training_memory, param_count
from smallinit.llm.training.probes import Probes
from smallinit.llm.training.replay import retry_failed_starts
from smallinit.llm.training.sinks import LogLines, sinks_from_env

log = logging.getLogger(__name__)
KIND = "llm-train"
VERSION = "2"  # raised whenever the numbers a run of this kind holds would change


# ----------------------------------------------------------------------------- environment
@dataclass(frozen=True)
class Dist:
    """This process's place in a ``torchrun`` job (rank 0 of 1 without one)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> Dist:
        return cls(
            int(os.environ.get("RANK", 0)),
            int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", 0)),
        )

    @property
    def main(self) -> bool:
        return self.rank == 0

    def share(self, items):
        """This rank's contiguous slice of a global batch (its length divides evenly)."""
        n = len(items) // self.world
        return items[self.rank * n : (self.rank + 1) * n]


def resolve_device(cfg, dist: Dist) -> torch.device:
    want = cfg.train.device
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    if want == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("train.device='cuda' but no CUDA device is available; use cpu")
        return torch.device("cuda", dist.local_rank)
    return torch.device("cpu")


def autocast(cfg, device: torch.device):
    """bf16 autocast on GPU (``precision=auto``) or when asked; fp32 otherwise."""
    use_bf16 = cfg.train.precision == "bf16" or (
        cfg.train.precision == "auto" and device.type == "cuda"
    )
    if not use_bf16:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def lr_at(step: int, cfg) -> float:
    """Warmup then cosine (module docstring); ``step`` is 1-based."""
    t = cfg.train
    if t.warmup and step <= t.warmup:
        ramp = t.lr * step / t.warmup
        return ramp if not t.warmup_from else t.lr * t.warmup_from + (1 - t.warmup_from) * ramp
    span = max(1, t.steps - t.warmup)
    frac = min(1.0, (step - t.warmup) / span)
    low = t.min_lr_ratio * t.lr
    return low + 0.5 * (t.lr - low) * (1 + math.cos(math.pi * frac))


def make_optimizer(model: torch.nn.Module, cfg, device) -> torch.optim.AdamW:
    """AdamW with weight decay on the ≥ 2-d parameters (matrices, embeddings) only, or on
    every parameter (``train.decay_all``)."""
    t = cfg.train
    decay = [p for p in model.parameters() if p.dim() >= 2 or t.decay_all]
    rest = [p for p in model.parameters() if p.dim() < 2 and not t.decay_all]
    groups = [
        {"params": decay, "weight_decay": t.weight_decay},
        {"params": rest, "weight_decay": 0.0},
    ]
    # the fused kernel (CPU and CUDA) is the fastest update; same numbers every run
    return torch.optim.AdamW(
        groups,
        lr=t.lr,
        betas=(t.beta1, t.beta2),
        eps=t.adam_eps,
        fused=device.type in ("cpu", "cuda"),
    )


def train_step(
    objective, optimizer, x, y, *, lr: float | None, clip: float, ctx=None, clip_params=None
) -> torch.Tensor:
    """One optimizer step on (x, y): forward (``objective(x, y)`` returns ``(logits,
    loss)``), backward, clip to global norm ``clip`` (0: off), AdamW update at learning
    rate ``lr`` (None: the rates the optimizer holds, as a population's optimizer holds one
    per member, :mod:`smallinit.llm.training.population`); ``ctx`` is the autocast context
    (None: fp32). The global norm sums over ``clip_params`` in that order (default: the
    optimizer's parameters in its order; the order moves only the last bit). Returns the
    detached loss."""
    ctx = ctx if ctx is not None else contextlib.nullcontext()
    for group in optimizer.param_groups if lr is not None else ():
        group["lr"] = lr
    with ctx:
        _, loss = objective(x, y)
    loss.backward()
    if clip > 0:
        if clip_params is None:
            clip_params = [p for group in optimizer.param_groups for p in group["params"]]
        torch.nn.utils.clip_grad_norm_(clip_params, clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def window_dtype(task, model: torch.nn.Module) -> torch.dtype:
    """The dtype of a log window's running loss sum: the task's
    (:attr:`Rounding.loss_sum_dtype`), or the model's where that is wider (float64)."""
    return torch.promote_types(task.rounding.loss_sum_dtype, next(model.parameters()).dtype)


# ----------------------------------------------------------------------------- tasks
@dataclass(frozen=True)
class Rounding:
    """How a task's sums are ordered and held: choices that move a run's numbers in the last
    bits only. Each task keeps the choice its stored runs were computed with (a new choice is
    a new version of the task's run kind), so they are reproduced bit for bit."""

    loss_sum_dtype: torch.dtype = torch.float32  # the running loss sum of a log window
    clip_in_model_order: bool = False  # the global gradient norm summed in model.parameters()
    # order (else the optimizer's: decayed matrices, then the rest)


class Task(Protocol):
    """What a run trains on and how it is judged; built as ``Task(cfg, device)``.

    ``model`` below is the bare :class:`Transformer` (not the DDP or compiled wrapper)
    and ``ctx`` the run's autocast context."""

    name: str  # progress-bar label
    tokens_per_step: int  # > 0: log records carry ``tokens`` and ``tok_per_s``
    rounding: Rounding

    def callbacks(self) -> list[Callback]:
        """The task's own callbacks (pretraining: its probes), run before the trainer's."""

    def batch(self, step: int, dist: Dist) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's share of the global batch of ``step`` (a function of seed and step)."""

    def objective(self, model: Transformer) -> torch.nn.Module:
        """The module the trainer steps: ``objective(x, y)`` returns ``(logits, loss)``
        and its parameters are the model's."""

    def log_fields(self, step: int, model: Transformer, ctx) -> dict[str, Any]:
        """Extra fields of the log record of ``step``."""

    def evaluate(self, step: int, model: Transformer, ctx) -> dict[str, Any] | None:
        """A held-out evaluation logged as its own record after ``step``, or None."""

    def finish(self, run: Run, model: Transformer, ctx, train_loss: float) -> dict[str, Any]:
        """Final evaluation and saved results (rank 0); returns the run's summary."""


class LMTask:
    """Next-token pretraining (the default task). Step s trains on ``batch_size`` windows
    of ``context + 1`` tokens of the training split whose starts are drawn uniformly by a
    generator seeded with (seed, s); the loss is the mean next-token cross-entropy.

    Held-out loss (``eval.held_out``): ``windows``, the mean loss on ``eval_batches`` fixed
    batches of windows drawn from the validation split; ``halves``, the loss over every
    window of the validation split's second half (the report split), and at the end also of
    its first half (``tune_loss``). It is logged at the steps ``eval.at_steps`` (else every
    ``eval_every`` steps, not the last) and at the end, where
    :func:`~smallinit.llm.training.evaluate.evaluate` also runs (per-token losses, answer
    accuracy) on the report split."""

    name = "train"
    rounding = Rounding()

    def __init__(self, cfg: RunConfig, device: torch.device):
        self.cfg = cfg
        self.device = device
        self.corpus = corpus_mod.load(cfg.data, cfg.model.vocab_size)
        self.tune: corpus_mod.Corpus | None = None
        self.report = self.corpus
        if cfg.eval.held_out == "halves":
            self.tune, self.report = corpus_mod.halves(self.corpus)
        self.tokens_per_step = cfg.train.batch_size * cfg.model.context

    def callbacks(self) -> list[Callback]:
        return [Probes(self.cfg.train.steps, self.corpus.val, self.cfg.model.context)]

    def starts(self, step: int, dist: Dist) -> np.ndarray:
        """Where this rank's training windows of ``step`` start in the training split."""
        cfg = self.cfg
        return dist.share(
            batch_starts(
                step, cfg.seed, len(self.corpus.train), cfg.model.context, cfg.train.batch_size
            )
        )

    def batch(self, step: int, dist: Dist):
        return get_batch(
            self.corpus.train, self.starts(step, dist), self.cfg.model.context, self.device
        )

    @staticmethod
    def population_batch(tasks: list[LMTask], step: int):
        """The batches of ``step`` of ``tasks`` (a population's members: one corpus, each
        its own seed), stacked (M, B, context), gathered from the corpus at once."""
        starts = np.stack([task.starts(step, Dist()) for task in tasks])
        first = tasks[0]
        context = first.cfg.model.context
        x, y = get_batch(first.corpus.train, starts.reshape(-1), context, first.device)
        return tuple(t.reshape(*starts.shape, context) for t in (x, y))

    def objective(self, model: Transformer) -> torch.nn.Module:
        return model  # Transformer(x, y) is (logits, mean next-token loss)

    def log_fields(self, step: int, model, ctx) -> dict[str, Any]:
        return {}

    def evaluate(self, step: int, model, ctx) -> dict[str, Any] | None:
        t, at = self.cfg.train, self.cfg.eval.at_steps
        due = step in at if at else bool(t.eval_every) and step % t.eval_every == 0
        if due and step != t.steps:
            return {"val_loss": self.val_loss(model, ctx)}
        return None

    @torch.no_grad()
    def val_loss(self, model, ctx, split: corpus_mod.Corpus | None = None) -> float:
        """The held-out loss: over every window of ``split`` (default: the report split)
        with ``held_out = halves``, else on ``eval_batches`` fixed held-out batches (the same
        every time)."""
        cfg = self.cfg
        if cfg.eval.held_out == "halves":
            return self.whole_split_loss(model, ctx, split or self.report)
        model.eval()
        total = 0.0
        for i in range(cfg.train.eval_batches):
            starts = batch_starts(
                i,
                cfg.seed + 1_000_003,
                len(self.corpus.val),
                cfg.model.context,
                cfg.train.batch_size,
            )
            x, y = get_batch(self.corpus.val, starts, cfg.model.context, self.device)
            with ctx:
                total += float(model(x, y)[1])
        model.train()
        return total / cfg.train.eval_batches

    @torch.no_grad()
    def whole_split_loss(self, model, ctx, split: corpus_mod.Corpus) -> float:
        """Mean next-token loss over every non-overlapping window of ``context + 1`` tokens
        of ``split``'s held-out stream (each window weighs its ``context`` targets alike)."""
        context, batch = self.cfg.model.context, self.cfg.train.batch_size
        starts = np.arange((len(split.val) - 1) // context) * context
        if len(starts) == 0:
            raise ConfigError(
                f"the held-out half has {len(split.val)} tokens, fewer than one "
                f"window of model.context={context} + 1"
            )
        model.eval()
        total = 0.0
        for i in range(0, len(starts), batch):
            x, y = get_batch(split.val, starts[i : i + batch], context, self.device)
            with ctx:
                total += float(model(x, y)[1]) * len(x)
        model.train()
        return total / len(starts)

    def finish(self, run: Run, model, ctx, train_loss: float) -> dict[str, Any]:
        """Final held-out loss (and the tune split's), per-token losses and answer
        accuracies on the report split."""
        cfg = self.cfg
        val = self.val_loss(model, ctx)
        record = {"step": cfg.train.steps, "val_loss": val}
        if self.tune is not None:
            record["tune_loss"] = self.val_loss(model, ctx, self.tune)
        run.log(record)
        with ctx:
            metrics, tokens = evaluate(
                model,
                self.report,
                self.device,
                n_windows=cfg.eval.token_windows,
                n_items=cfg.eval.answer_items,
                context=cfg.model.context,
            )
        run.save_arrays(**tokens)
        run.write_json("eval.json", metrics)
        atomic_write_text(run.path / TOKENIZER, self.corpus.tokenizer.to_str())
        held = {k: v for k, v in record.items() if k != "step"}
        return {
            "train_loss": train_loss,
            **held,
            "steps": cfg.train.steps,
            "tokens": cfg.train.steps * self.tokens_per_step,
            "params": model.num_params(),
            **metrics,
            "corpus": corpus_mod.corpus_summary(self.corpus),
        }


# ----------------------------------------------------------------------------- the loop
class Trainer:
    """One training run of ``task`` (module docstring); :meth:`fit` is the run store's body.

    ``cfg`` needs ``seed``, ``model`` (a ModelConfig), ``scheme`` (the init) and ``train``
    (a TrainConfig); ``make_task(cfg, device)`` builds the task (default: pretraining).
    ``callbacks`` (:mod:`smallinit.llm.training.callbacks`) run on rank 0 after the task's
    own and the checkpoints (:meth:`callbacks`); None: the log sinks the environment asks for
    (:func:`~smallinit.llm.training.sinks.sinks_from_env`). Callbacks never change what is
    trained, so they are not part of the run's config or key. ``dtype``: the model's
    parameters are cast to it after the init (None: float32 as built); float64 serves the
    tests that compare two paths to ~1e-10, and a run's key does not record it."""

    def __init__(
        self,
        cfg,
        dist: Dist,
        make_task: Callable[..., Task] = LMTask,
        *,
        callbacks: list[Callback] | None = None,
        dtype: torch.dtype | None = None,
    ):
        self.cfg = cfg
        self.dist = dist
        self.extra = list(sinks_from_env() if callbacks is None else callbacks)
        if cfg.train.threads:
            torch.set_num_threads(cfg.train.threads)
        self.device = resolve_device(cfg, dist)
        self.task = make_task(cfg, self.device)
        torch.manual_seed(cfg.seed)
        self.model = Transformer(cfg.model, cfg.scheme, seed=cfg.seed).to(self.device)
        self.model.head.loss_chunk = cfg.train.loss_chunk
        if dtype is not None:
            self.model.to(dtype)
        self.optimizer = make_optimizer(self.model, cfg, self.device)
        self.objective = self.task.objective(self.model)
        if dist.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.objective = DistributedDataParallel(self.objective, device_ids=ids)
        if cfg.train.compile:
            self.objective = torch.compile(self.objective)

    def callbacks(self) -> list[Callback]:
        """What runs at the points of a run on rank 0, in this order: a log line per record
        when no progress bar shows and :attr:`extra` (the sinks, first so that they see every
        record), the task's callbacks, then the checkpoints (after the probes of a step, so
        a resumed run keeps the probe of the step it resumes from)."""
        t = self.cfg.train
        lines = [] if bars_shown() else [LogLines(self.task.name)]
        return [
            *lines,
            *self.extra,
            *self.task.callbacks(),
            Checkpoints(t.checkpoint_every, t.steps),
        ]

    # -- resume
    def _resume(self, run) -> int:
        """Restore the newest intact checkpoint (rank 0 decides which) and cut the metrics
        back to it; returns its step (0: a fresh start)."""
        step, state = 0, None
        if self.dist.main:
            step, state = latest_loadable(run.path)
        if self.dist.world > 1:
            import torch.distributed as tdist

            box = [step]
            tdist.broadcast_object_list(box, src=0)
            step = box[0]
            if step and state is None:
                state = load_checkpoint(run.path / "checkpoints" / f"step-{step:08d}.pt")
        if state is not None:
            restore(state, self.model, self.optimizer)
        if self.dist.main:
            kept = [r for r in run.metrics() if r.get("step", 0) <= step] if step else []
            run.rewrite_metrics(kept)
            if step:
                log.info("resuming %s from step %d", run.path, step)
        return step

    def _mean_over_ranks(self, value: torch.Tensor) -> float:
        if self.dist.world > 1:
            import torch.distributed as tdist

            value = value.clone()
            tdist.all_reduce(value, op=tdist.ReduceOp.SUM)
            value = value / self.dist.world
        return float(value)

    def fit(self, run) -> dict[str, Any]:
        """Train ``run`` to its last step (resuming it if it can) and finish it; rank 0
        returns the summary. On rank 0 every record goes through the callbacks."""
        run = Recorder(run, self.callbacks() if self.dist.main else [])
        start = self._resume(run)
        run.call("on_start", self, run, start)
        try:
            return self._fit(run, start)
        finally:
            run.call("on_end", self, run)

    def _fit(self, run: Recorder, start: int) -> dict[str, Any]:
        cfg, t, dist, task = self.cfg, self.cfg.train, self.dist, self.task
        ctx = autocast(cfg, self.device)
        self.model.train()
        window_sum = torch.zeros((), dtype=window_dtype(task, self.model), device=self.device)
        clip_params = list(self.model.parameters()) if task.rounding.clip_in_model_order else None
        window_n = 0
        clock, clock_step = time.perf_counter(), start
        last_loss = float("nan")
        with progress(
            total=t.steps,
            initial=start,
            desc=task.name,
            unit="step",
            **({} if dist.main else {"disable": True}),
        ) as bar:
            for step in range(start + 1, t.steps + 1):
                x, y = task.batch(step, dist)
                window_sum += train_step(
                    self.objective,
                    self.optimizer,
                    x,
                    y,
                    lr=lr_at(step, cfg),
                    clip=t.grad_clip,
                    ctx=ctx,
                    clip_params=clip_params,
                )
                window_n += 1
                bar.update(1)
                record = None
                if step % t.log_every == 0 or step == t.steps:
                    last_loss = self._mean_over_ranks(window_sum / window_n)
                    window_sum.zero_()
                    window_n = 0
                    record = {"step": step, "loss": last_loss, "lr": lr_at(step, cfg)}
                    if task.tokens_per_step:
                        now = time.perf_counter()
                        record["tokens"] = step * task.tokens_per_step
                        record["tok_per_s"] = (
                            (step - clock_step) * task.tokens_per_step / max(now - clock, 1e-9)
                        )
                        clock, clock_step = now, step
                    if not math.isfinite(last_loss):
                        run.log(record)
                        raise RunFailed(f"non-finite training loss ({last_loss}) at step {step}")
                    record.update(task.log_fields(step, self.model, ctx))
                    run.log(record)
                    bar.set_postfix(loss=f"{last_loss:.3f}")
                held_out = task.evaluate(step, self.model, ctx)
                if held_out:
                    run.log({"step": step, **held_out})
                run.call("on_step", self, run, step, record)
        if not dist.main:
            return {}
        return self.finish(run, ctx, last_loss)

    #: the run's summary once :meth:`finish` made it (what the log sinks' ``on_end`` reads
    #: as the final evaluation); None before, and for a run that failed
    summary: dict[str, Any] | None = None

    def finish(self, run: Run, ctx, last_loss: float) -> dict[str, Any]:
        """The task's final evaluation and results, then the final weights (rank 0)."""
        summary = self.task.finish(run, self.model, ctx, last_loss)
        atomic_torch_save(self.model.state_dict(), run.path / "model.pt")
        atomic_save_safetensors(self.model.state_dict(), run.path / WEIGHTS)
        for old in checkpoints(run.path):  # the final weights supersede them
            remove_checkpoint(old)
        self.summary = summary
        return summary


# ----------------------------------------------------------------------------- entry points
def preflight(
    cfg,
    dist: Dist | None = None,
    *,
    explicit_attention: bool = False,
    computing: bool = True,
    memory: tuple[int, str] | None = None,
) -> None:
    """Every check of a run's config that needs no training, made before its run directory
    exists (so a bad config leaves nothing behind). For a run that will be trained
    (``computing``): the device is there and the training step fits the memory of that
    device (:func:`smallinit.llm.training.memory.check_training_memory`: a GPU's own memory
    for a CUDA run, before anything is built; ``memory``: (bytes, name) of another pool, a
    planned GPU on a machine without one); for every run, also one reused: the init scheme
    gives every matrix a usable σ (checked on a model without storage, the ``meta``
    device)."""
    if computing:
        device = resolve_device(cfg, dist or Dist.from_env())
        if memory is None:
            check_training_memory(cfg, explicit_attention=explicit_attention, device=device)
        else:
            check_training_memory(
                cfg, explicit_attention=explicit_attention, available=memory[0], pool=memory[1]
            )
        sinks_from_env()  # a bad $SMALLINIT_TENSORBOARD is refused before the run exists
    init_table(meta_transformer(cfg.model), cfg.scheme)


def fit_run(
    store: RunStore,
    kind: str,
    version: str,
    cfg,
    build: Callable[[Dist], Trainer],
    *,
    force: bool = False,
    prepare: Callable[[], None] | None = None,
    check: Callable[[], None] | None = None,
    explicit_attention: bool = False,
) -> Run:
    """Train (or resume, or reuse) the run (kind, cfg, version) with the trainer
    ``build(dist)``, alone or under ``torchrun``; ``prepare`` runs once on rank 0 before
    the others start (e.g. building a corpus they then read). The config is first checked
    (:func:`preflight`; for a run that will be trained also ``check``, e.g. that the corpus
    source exists), so a config error leaves no run directory; ``explicit_attention``: the
    task also runs the explicit attention path (its scores count in the memory estimate).

    Returns the run (on ranks other than 0 a handle to the same directory)."""
    dist = Dist.from_env()
    if cfg.train.batch_size % dist.world:
        raise ConfigError(
            f"train.batch_size={cfg.train.batch_size} is not divisible by the "
            f"{dist.world} processes"
        )
    computing = force or not store.run(kind, cfg, version=version).reusable()
    preflight(cfg, dist, explicit_attention=explicit_attention, computing=computing)
    if computing and check is not None:
        check()
    if computing and dist.main:
        need = disk_bytes(param_count(cfg.model), cfg.train.checkpoint_every)
        check_disk(store.root, need, "weights and checkpoints")
    if dist.world == 1:
        return store.get_or_run(
            kind, cfg, lambda run: build(dist).fit(run), version=version, force=force
        )
    import torch.distributed as tdist

    on_gpu = cfg.train.device != "cpu" and torch.cuda.is_available()
    if on_gpu:  # before the group exists: NCCL binds each rank to the current device, and
        torch.cuda.set_device(dist.local_rank)  # without this every rank would use GPU 0
    own_group = not tdist.is_initialized()
    if own_group:
        tdist.init_process_group("nccl" if on_gpu else "gloo")
    try:
        run = store.run(kind, cfg, version=version)
        if dist.main:
            if prepare is not None:
                prepare()
            box = [force or not (run.reusable() or _being_written(run))]
        else:
            box = [None]
        tdist.broadcast_object_list(box, src=0)
        if dist.main:
            return store.get_or_run(
                kind, cfg, lambda r: build(dist).fit(r), version=version, force=force
            )
        if box[0]:
            try:
                build(dist).fit(ScratchRun(run.path))  # rank 0 alone writes the run
            except RunFailed:
                pass  # rank 0 records it
        return run
    finally:
        if own_group:
            tdist.destroy_process_group()


# ----------------------------------------------------------------------------- trials
class ScratchRun:
    """A run that is never stored: its records, arrays and JSON files stay in memory. For
    :func:`trial`, where the files a task writes by path (tokenizer, final weights) go to
    ``path``, a temporary folder that :func:`trial` deletes; and for the ranks other than 0
    under ``torchrun`` (:func:`fit_run`), which write nothing by path."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.records: list[dict[str, Any]] = []
        self.arrays: dict[str, Any] = {}
        self.files: dict[str, Any] = {}

    def log(self, record: dict[str, Any]) -> None:
        self.records.append(dict(record))

    def metrics(self) -> list[dict[str, Any]]:
        return list(self.records)

    def rewrite_metrics(self, records: list[dict[str, Any]]) -> None:
        self.records = list(records)

    def save_arrays(self, **arrays: Any) -> None:
        self.arrays.update(arrays)

    def write_json(self, name: str, data: Any) -> None:
        self.files[name] = data


def cut_config(
    cfg, *, width: int = 64, layers: int = 2, context: int = 64, batch: int = 4, items: int = 16
):
    """``cfg`` at a size the CPU trains in seconds, every switch kept (norms, positions,
    MLP, gating, init scheme, precision, compile, data and vocabulary): d_model cut to
    ``n_heads`` heads of an even head dimension near ``width / n_heads`` (never above the
    original), at most ``layers`` layers, ``context`` tokens and ``batch`` sequences, one
    step with no warmup, no checkpoints and no mid-run evaluation (``eval.at_steps`` too),
    at most ``items`` answer
    items per cell and 4 token windows."""
    m, t = cfg.model, cfg.train
    head_dim = min(m.head_dim, max(2, (width // m.n_heads) // 2 * 2))
    d = m.n_heads * head_dim
    changes: dict[str, Any] = {
        "model.d_model": d,
        "model.n_layers": min(m.n_layers, layers),
        "model.context": min(m.context, context),
        "model.d_ff": None if m.d_ff is None else max(1, round(m.d_ff * d / m.d_model)),
        "train.steps": 1,
        "train.warmup": 0,
        "train.batch_size": min(t.batch_size, batch),
        "train.log_every": 1,
        "train.eval_every": 0,
        "train.checkpoint_every": 0,
        "train.eval_batches": min(t.eval_batches, 2),
    }
    if hasattr(cfg, "eval"):
        changes["eval.answer_items"] = min(cfg.eval.answer_items, items)
        changes["eval.token_windows"] = min(cfg.eval.token_windows, 4)
        if getattr(cfg.eval, "at_steps", ()):
            changes["eval.at_steps"] = []  # one step: no evaluation along the way
    return override(cfg, changes)


def trial(cfg, make_task: Callable[..., Task] = LMTask) -> dict[str, Any]:
    """Train ``cfg`` (best a :func:`cut_config`) on this machine through the one trainer:
    the task (its data), the model with its init, the optimizer, the compiled or DDP
    wrapper as configured, every step with its callbacks (probes), the task's final
    evaluation and the final weights, into a :class:`ScratchRun` whose folder is deleted
    after: nothing is stored. Returns the final loss, the summary's numbers, the records
    logged and the wall time; any error of the path propagates (a non-finite loss as
    :class:`~smallinit.core.errors.RunFailed`)."""
    with tempfile.TemporaryDirectory(prefix="smallinit-trial-") as tmp:
        t0 = time.perf_counter()
        run = ScratchRun(tmp)
        summary = Trainer(cfg, Dist(), make_task, callbacks=[]).fit(run)
        wall = time.perf_counter() - t0
    numbers = {k: v for k, v in summary.items() if isinstance(v, int | float)}
    losses = [r["loss"] for r in run.records if "loss" in r]
    return {
        "loss": losses[-1] if losses else None,
        "summary": numbers,
        "records": len(run.records),
        "arrays": sorted(run.arrays),
        "wall_s": wall,
    }


def _being_written(run: Run) -> bool:
    """Whether another process is computing ``run`` now (rank 0 then waits for its result)."""
    try:
        return run.state == "running"
    except StoreError:
        return False


def train(
    cfg: RunConfig,
    *,
    runs_dir: str | Path | None = None,
    force: bool = False,
    callbacks: list[Callback] | None = None,
) -> Run:
    """Train (or resume, or reuse) the pretraining run for ``cfg``; works alone or under
    ``torchrun``. ``callbacks``: more callbacks while it trains, e.g. the log sink
    ``[TensorBoard("tb")]`` (:mod:`smallinit.llm.training.sinks`; None: the sinks the
    environment asks for); they are not part of the run's config and never change its key."""
    check_instance(cfg, RunConfig, "train")
    sinks = sinks_from_env() if callbacks is None else list(callbacks)
    run = fit_run(
        RunStore(runs_dir),
        KIND,
        VERSION,
        cfg,
        lambda dist: Trainer(cfg, dist, callbacks=sinks),
        force=force,
        prepare=lambda: corpus_mod.prepare(cfg.data, cfg.model.vocab_size),
        check=lambda: corpus_mod.check_source(cfg.data),
    )
    if Dist.from_env().main and run.state == "done":
        retry_failed_starts(run.path, sinks)  # a sink that failed to start the last time
    return run
