"""Pretraining loop: AdamW, warmup + cosine, clipping, checkpoints, resume, DDP.

Optimizer: AdamW (Loshchilov & Hutter 2019) with decoupled weight decay λ on matrices and
embeddings only (norm gains and biases are not decayed). Learning rate
η(s) = η·s/warmup for s ≤ warmup, then η_min + ½(η − η_min)(1 + cos(π·(s − warmup)/(S − warmup)))
with η_min = min_lr_ratio·η. Gradients are clipped to global norm ``grad_clip``.

Data: step s (1-based) trains on ``batch_size`` windows whose starts are drawn from a
generator seeded with (seed, s); under DDP every rank takes its slice of that global batch,
so a multi-process run sees the same data as a single process and the data position is just
the step. A checkpoint stores model, optimizer, step and RNG states; a killed run asked for
again (the store reports it stale) resumes from its last checkpoint and reproduces the
uninterrupted run's numbers exactly on CPU. A non-finite loss stops the run and records it
as failed. Under ``torchrun`` only rank 0 writes (metrics, checkpoints, results).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from smallinit.errors import RunFailed
from smallinit.llm.config import RunConfig
from smallinit.llm.data import corpus as corpus_mod
from smallinit.llm.model.transformer import Transformer
from smallinit.llm.training.evaluate import evaluate
from smallinit.progress import progress
from smallinit.runs import Run, RunStore, temp_path

log = logging.getLogger(__name__)
KIND = "llm-train"
VERSION = "1"
KEEP_CHECKPOINTS = 2


# ----------------------------------------------------------------------------- environment
@dataclass(frozen=True)
class Dist:
    """This process's place in a ``torchrun`` job (rank 0 of 1 without one)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> Dist:
        return cls(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
                   int(os.environ.get("LOCAL_RANK", 0)))

    @property
    def main(self) -> bool:
        return self.rank == 0


def resolve_device(cfg: RunConfig, dist: Dist) -> torch.device:
    want = cfg.train.device
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    if want == "cuda":
        if not torch.cuda.is_available():
            from smallinit.errors import ConfigError

            raise ConfigError("train.device='cuda' but no CUDA device is available; use cpu")
        return torch.device("cuda", dist.local_rank)
    return torch.device("cpu")


def autocast(cfg: RunConfig, device: torch.device):
    """bf16 autocast on GPU (``precision=auto``) or when asked; fp32 otherwise."""
    use_bf16 = cfg.train.precision == "bf16" or (
        cfg.train.precision == "auto" and device.type == "cuda")
    if not use_bf16:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def lr_at(step: int, cfg: RunConfig) -> float:
    """Warmup then cosine (module docstring); ``step`` is 1-based."""
    t = cfg.train
    if t.warmup and step <= t.warmup:
        return t.lr * step / t.warmup
    span = max(1, t.steps - t.warmup)
    frac = min(1.0, (step - t.warmup) / span)
    low = t.min_lr_ratio * t.lr
    return low + 0.5 * (t.lr - low) * (1 + math.cos(math.pi * frac))


def batch_starts(step: int, seed: int, n_tokens: int, context: int, batch: int) -> np.ndarray:
    """Window starts of the global batch of ``step`` (deterministic in seed and step)."""
    high = n_tokens - context - 1
    if high < 1:
        raise ValueError(f"training split has {n_tokens} tokens, too few for context {context}")
    rng = np.random.default_rng([seed, step])
    return rng.integers(0, high, size=batch)


def get_batch(tokens: np.ndarray, starts: np.ndarray, context: int, device):
    idx = starts[:, None] + np.arange(context + 1)
    chunk = torch.from_numpy(np.asarray(tokens[idx], dtype=np.int64))
    if device.type == "cuda":
        chunk = chunk.pin_memory().to(device, non_blocking=True)
    return chunk[:, :-1], chunk[:, 1:]


def make_optimizer(model: torch.nn.Module, cfg: RunConfig, device) -> torch.optim.AdamW:
    t = cfg.train
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": t.weight_decay},
              {"params": rest, "weight_decay": 0.0}]
    # the fused kernel (CPU and CUDA) is the fastest update; same numbers every run
    return torch.optim.AdamW(groups, lr=t.lr, betas=(t.beta1, t.beta2), eps=t.adam_eps,
                             fused=device.type in ("cpu", "cuda"))


def train_step(model, optimizer, x, y, *, lr: float, clip: float,
               ctx=None) -> torch.Tensor:
    """One optimizer step on (x, y): forward, backward, clip to global norm ``clip`` (0:
    off), AdamW update at learning rate ``lr``; ``ctx`` is the autocast context (None:
    fp32). Returns the (detached) batch loss."""
    ctx = ctx if ctx is not None else contextlib.nullcontext()
    for group in optimizer.param_groups:
        group["lr"] = lr
    with ctx:
        _, loss = model(x, y)
    loss.backward()
    if clip > 0:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        torch.nn.utils.clip_grad_norm_(params, clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


# ----------------------------------------------------------------------------- checkpoints
def _checkpoints(run_dir: Path) -> list[Path]:
    return sorted((run_dir / "checkpoints").glob("step-*.pt"))


def save_checkpoint(run: Run, step: int, model, optimizer) -> Path:
    state = {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "torch_rng": torch.get_rng_state(),
             "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}
    path = run.checkpoint_dir / f"step-{step:08d}.pt"
    tmp = temp_path(path)
    torch.save(state, tmp)
    os.replace(tmp, path)
    for old in _checkpoints(run.path)[:-KEEP_CHECKPOINTS]:
        old.unlink(missing_ok=True)
    return path


def load_checkpoint(path: Path, model, optimizer) -> int:
    state = torch.load(path, map_location="cpu", weights_only=False)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    if state.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return int(state["step"])


class _RankView:
    """What a rank other than 0 sees of the run: its paths, and writes that do nothing."""

    def __init__(self, run: Run):
        self.path = run.path

    def log(self, record: dict[str, Any]) -> None:
        pass


# ----------------------------------------------------------------------------- the loop
class Trainer:
    """One training run's state; :meth:`fit` is the run store's body."""

    def __init__(self, cfg: RunConfig, dist: Dist):
        self.cfg = cfg
        self.dist = dist
        self.device = resolve_device(cfg, dist)
        self.corpus = corpus_mod.load(cfg.data, cfg.model.vocab_size)
        torch.manual_seed(cfg.seed)
        self.model = Transformer(cfg.model, cfg.scheme, seed=cfg.seed).to(self.device)
        self.optimizer = make_optimizer(self.model, cfg, self.device)
        self.step_model = self.model
        if dist.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.step_model = DistributedDataParallel(self.model, device_ids=ids)
        if cfg.train.compile:
            self.step_model = torch.compile(self.step_model)

    # -- resume
    def _resume(self, run) -> int:
        """Load the last checkpoint (rank 0 decides which) and cut metrics back to it."""
        step = 0
        if self.dist.main:
            found = _checkpoints(run.path)
            step = int(found[-1].stem.split("-")[1]) if found else 0
        if self.dist.world > 1:
            import torch.distributed as tdist

            box = [step]
            tdist.broadcast_object_list(box, src=0)
            step = box[0]
        if step == 0:
            if self.dist.main:
                run.rewrite_metrics([])
            return 0
        path = run.path / "checkpoints" / f"step-{step:08d}.pt"
        loaded = load_checkpoint(path, self.model, self.optimizer)
        if self.dist.main:
            kept = [r for r in run.metrics() if r.get("step", 0) <= loaded]
            run.rewrite_metrics(kept)
            log.info("resuming %s from step %d", run.path, loaded)
        return loaded

    # -- one optimizer step
    def _train_step(self, step: int, ctx) -> torch.Tensor:
        cfg, dist = self.cfg, self.dist
        starts = batch_starts(step, cfg.seed, len(self.corpus.train), cfg.model.context,
                              cfg.train.batch_size)
        per_rank = len(starts) // dist.world
        mine = starts[dist.rank * per_rank:(dist.rank + 1) * per_rank]
        x, y = get_batch(self.corpus.train, mine, cfg.model.context, self.device)
        return train_step(self.step_model, self.optimizer, x, y, lr=lr_at(step, cfg),
                          clip=cfg.train.grad_clip, ctx=ctx)

    # -- extension points (subclasses override these, e.g. llm.dynamics.TracedTrainer)
    def on_start(self, run, step: int) -> None:
        """Called once before the first step of this process, with the step it resumes from
        (0 for a fresh run)."""

    def on_step(self, run, step: int) -> None:
        """Called after every optimizer step (on every rank)."""

    def _mean_over_ranks(self, value: torch.Tensor) -> float:
        if self.dist.world > 1:
            import torch.distributed as tdist

            value = value.clone()
            tdist.all_reduce(value, op=tdist.ReduceOp.SUM)
            value = value / self.dist.world
        return float(value)

    @torch.no_grad()
    def val_loss(self, ctx) -> float:
        """Mean loss on ``eval_batches`` fixed held-out batches (same every time)."""
        cfg = self.cfg
        model = self.model
        model.eval()
        total = 0.0
        for i in range(cfg.train.eval_batches):
            starts = batch_starts(i, cfg.seed + 1_000_003, len(self.corpus.val),
                                  cfg.model.context, cfg.train.batch_size)
            x, y = get_batch(self.corpus.val, starts, cfg.model.context, self.device)
            with ctx:
                total += float(model(x, y)[1])
        model.train()
        return total / cfg.train.eval_batches

    def fit(self, run) -> dict[str, Any]:
        cfg, t, dist = self.cfg, self.cfg.train, self.dist
        start = self._resume(run)
        self.on_start(run, start)
        ctx = autocast(cfg, self.device)
        tokens_per_step = t.batch_size * cfg.model.context
        self.model.train()
        window_sum = torch.zeros((), device=self.device)
        window_n = 0
        bar = progress(total=t.steps, initial=start, desc="train", unit="step",
                       disable=True if not dist.main else None)
        clock, clock_step = time.perf_counter(), start
        last_loss = float("nan")
        with bar:
            for step in range(start + 1, t.steps + 1):
                window_sum += self._train_step(step, ctx)
                self.on_step(run, step)
                window_n += 1
                bar.update(1)
                if step % t.log_every == 0 or step == t.steps:
                    last_loss = self._mean_over_ranks(window_sum / window_n)
                    now = time.perf_counter()
                    tok_s = (step - clock_step) * tokens_per_step / max(now - clock, 1e-9)
                    clock, clock_step = now, step
                    window_sum.zero_()
                    window_n = 0
                    record = {"step": step, "loss": last_loss, "lr": lr_at(step, cfg),
                              "tokens": step * tokens_per_step, "tok_per_s": tok_s}
                    run.log(record)
                    bar.set_postfix(loss=f"{last_loss:.3f}", tok_s=f"{tok_s:,.0f}")
                    if not math.isfinite(last_loss):
                        raise RunFailed(f"non-finite training loss ({last_loss}) at step {step}")
                if t.eval_every and step % t.eval_every == 0 and step != t.steps:
                    run.log({"step": step, "val_loss": self.val_loss(ctx)})
                if dist.main and t.checkpoint_every and step % t.checkpoint_every == 0 \
                        and step != t.steps:
                    save_checkpoint(run, step, self.model, self.optimizer)
        if not dist.main:
            return {}
        return self.finish(run, ctx, last_loss)

    def finish(self, run: Run, ctx, last_loss: float) -> dict[str, Any]:
        """Final held-out evaluation, weights and per-token losses (rank 0)."""
        cfg = self.cfg
        val = self.val_loss(ctx)
        run.log({"step": cfg.train.steps, "val_loss": val})
        with ctx:
            metrics, tokens = evaluate(self.model, self.corpus, self.device,
                                       n_windows=cfg.eval.token_windows,
                                       n_items=cfg.eval.answer_items, context=cfg.model.context)
        weights = run.path / "model.pt"
        tmp = temp_path(weights)
        torch.save(self.model.state_dict(), tmp)
        os.replace(tmp, weights)
        for old in _checkpoints(run.path):  # the final weights supersede them
            old.unlink(missing_ok=True)
        run.save_arrays(**tokens)
        run.write_json("eval.json", metrics)
        return {"train_loss": last_loss, "val_loss": val, "steps": cfg.train.steps,
                "tokens": cfg.train.steps * cfg.train.batch_size * cfg.model.context,
                "params": self.model.num_params(), **metrics,
                "corpus": corpus_mod.corpus_summary(self.corpus)}


# ----------------------------------------------------------------------------- entry point
def train(cfg: RunConfig, *, runs_dir: str | Path | None = None, force: bool = False) -> Run:
    """Train (or resume, or reuse) the run for ``cfg``; works alone or under ``torchrun``.

    Returns the run (on ranks other than 0 a handle to the same directory)."""
    dist = Dist.from_env()
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    if cfg.train.batch_size % dist.world:
        from smallinit.errors import ConfigError

        raise ConfigError(f"train.batch_size={cfg.train.batch_size} is not divisible by the "
                          f"{dist.world} processes")
    store = RunStore(runs_dir)
    if dist.world == 1:
        return store.get_or_run(KIND, cfg, lambda run: Trainer(cfg, dist).fit(run),
                                version=VERSION, force=force)
    return _train_distributed(cfg, dist, store, force)


def _train_distributed(cfg: RunConfig, dist: Dist, store: RunStore, force: bool) -> Run:
    import torch.distributed as tdist

    own_group = not tdist.is_initialized()
    if own_group:
        backend = "nccl" if cfg.train.device != "cpu" and torch.cuda.is_available() else "gloo"
        tdist.init_process_group(backend)
    try:
        run = store.run(KIND, cfg, version=VERSION)
        if dist.main:
            corpus_mod.prepare(cfg.data, cfg.model.vocab_size)  # once, before the others read
            state = run.state
            final = state == "failed" and run.status().get("final")
            box = [force or state not in ("done", "running") and not final]
        else:
            box = [None]
        tdist.broadcast_object_list(box, src=0)
        will_run = box[0]
        if dist.main:
            return store.get_or_run(KIND, cfg, lambda r: Trainer(cfg, dist).fit(r),
                                    version=VERSION, force=force)
        if will_run:
            try:
                Trainer(cfg, dist).fit(_RankView(run))
            except RunFailed:
                pass  # rank 0 records it
        return run
    finally:
        if own_group:
            tdist.destroy_process_group()
