"""Populations: many runs of one kind and shape trained at once, in one process, each
stored as the run its own config names. A :class:`RunKind` says which: pretraining
(``llm-train``, :data:`PRETRAINING`, the default) or the anchor task (``llm-anchor``,
:data:`smallinit.llm.training.anchor.ANCHOR`); the trainer is the kind's single-run
``Trainer`` with its task, so what follows holds for both.

Members share a *shape* (:func:`shape_of`: the model's dimensions and switches, the corpus,
context, batch, steps, log and checkpoint schedules, precision and device) and may differ
in everything else (:data:`FREE`): the seed (init draw and data order), the init scheme (γ,
per-part overrides), the learning rate and its schedule, weight decay, betas, Adam's ε,
the clip norm, the norm's ε and the evaluation schedule (for the anchor task, the task
table is part of the shape: every member reads the same samples, in its seed's order).

The math is each member's single run (:class:`~smallinit.llm.training.train.Trainer`):

* every member is built as its single run builds it (a ``Trainer``: the same init code and
  seed, the same task and callbacks), then its parameters are laid out in one tensor
  θ (M, P), row m holding member m's P parameters, and its model's parameters become views
  of its row, so evaluation, probes and saved weights read the member's current weights
  with no copy; the forward takes each parameter as a (M, …) view of θ, so every gradient
  lands in one (M, P) tensor and the update is a few whole-tensor operations;
* the forward is the one model's code, ``torch.func.functional_call`` under ``torch.vmap``
  over (θ, buffers, x, y), with the model's plain layers (:data:`.layers.PLAIN_PARTS`, the
  same numbers as the CPU fast path's, whose autograd functions have no vmap rule). The
  population's loss is Σ_m L_m(θ_m; x_m, y_m); since ∂/∂θ_m of it is ∂L_m/∂θ_m, one
  backward gives every member its own gradient. Where members' norm ε differ, the norms
  read ε from a per-member buffer (:class:`MemberEpsNorm`, the same formula);
* member m's batch of step s is its own task's (:func:`member_batches`: for pretraining the
  windows ``LMTask.starts(s)`` of seed m's stream, for the anchor task the rows
  ``AnchorTask.rows(s)``, gathered for all members at once: one copy to the device);
* the update is :class:`~.population_optim.PopulationAdamW`: each member's own clip,
  AdamW and learning rate η_m(s) = :func:`~smallinit.llm.training.train.lr_at`\\ (s, cfg_m),
  through the trainer's one :func:`~smallinit.llm.training.train.train_step`.

Each member writes through its own run (:meth:`RunStore.get_or_run`, one thread per member
waiting for its outcome): the same log records, held-out evaluations, probes, checkpoints
(the single run's format, so either path resumes them), final evaluation and weights; its
final status adds ``population`` (the population's id, size and the member's place). A
member whose window loss is not finite is recorded as failed, with the single run's reason,
and the others go on (its row keeps being computed and is ignored). A killed population
resumes every member from the newest checkpoint step that all of them hold.

On CUDA the member axis turns each matrix product into one batched GEMM (cuBLAS's strided
batched kernel), under the run's autocast (bf16 with ``precision=auto``); the population's
step runs as :func:`chosen_execution` says: eager (the default), through ``torch.compile``,
or compiled and replayed as CUDA graphs (``train.compile`` itself compiles nothing here).
On the CPU, attention has no vmap rule (PyTorch loops over members there) and a population
is not faster than its runs one after another; it exists there for the equivalence tests.
In float64 a member equals its single run to ~1e-10; in float32 to batched-GEMM reduction
order (tests/llm/test_llm_population.py, tests/llm/test_llm_anchor_population.py).
"""

from __future__ import annotations

import hashlib
import logging
import math
import queue
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from smallinit.core.config import canonical_json, check_instance, config_to_dict, dotted_items
from smallinit.core.errors import ConfigError, RunFailed
from smallinit.core.jobs import chosen_population_exec
from smallinit.core.lease import RunLock
from smallinit.core.progress import progress
from smallinit.core.runs import Run, RunWriter
from smallinit.core.store import RunStore
from smallinit.llm.data import corpus as corpus_mod
from smallinit.llm.model.layers import PLAIN_PARTS
from smallinit.llm.model.transformer import Transformer
from smallinit.llm.run_config import RunConfig
from smallinit.llm.training.callbacks import Callback, Checkpoints, Recorder
from smallinit.llm.training.checkpoint import (
    WEIGHTS,
    atomic_save_safetensors,
    atomic_torch_save,
    checkpoints,
    latest_loadable,
    restore,
    safe_load,
    save_checkpoint,
)
from smallinit.llm.training.memory import device_memory, model_bytes, training_bytes
from smallinit.llm.training.population_optim import PopulationAdamW
from smallinit.llm.training.train import (
    KIND,
    VERSION,
    Dist,
    LMTask,
    Trainer,
    autocast,
    lr_at,
    preflight,
    resolve_device,
    train,
    train_step,
    window_dtype,
)

log = logging.getLogger(__name__)

#: config fields (dotted) in which members may differ; every other field is the shape
FREE = frozenset(
    {
        "seed",
        "init",
        "model.norm_eps",
        "train.lr",
        "train.min_lr_ratio",
        "train.warmup",
        "train.warmup_from",
        "train.weight_decay",
        "train.decay_all",
        "train.beta1",
        "train.beta2",
        "train.adam_eps",
        "train.grad_clip",
        "train.eval_every",
        "train.eval_batches",
        "eval.answer_items",
        "eval.token_windows",
        "eval.held_out",
        "eval.at_steps",
    }
)


@dataclass(frozen=True)
class RunKind:
    """What a population needs to know of a run kind: its store ``kind`` and ``version``,
    its ``config`` class, the Trainer's task (``make_task(cfg, device)``), whether its
    memory check counts the explicit attention (:func:`~.train.preflight`), ``prepare(cfg)``
    (run once before the members are built: the corpus they share) and ``alone(cfg, root,
    force, callbacks)`` (the run's single path, for a run another process is writing)."""

    kind: str
    version: str
    config: type
    make_task: Callable[..., Any]
    alone: Callable[..., Run]
    explicit_attention: bool = False
    prepare: Callable[[Any], None] | None = None


def _prepare_corpus(cfg: RunConfig) -> None:
    corpus_mod.check_source(cfg.data)
    corpus_mod.prepare(cfg.data, cfg.model.vocab_size)


def _train_alone(cfg: RunConfig, root, force: bool, callbacks) -> Run:
    return train(cfg, runs_dir=root, force=force, callbacks=callbacks)


#: pretraining runs (``llm-train``), the default kind of a population
PRETRAINING = RunKind(KIND, VERSION, RunConfig, LMTask, _train_alone, prepare=_prepare_corpus)


def shape_of(cfg) -> dict[str, Any]:
    """The fields a population's members share: every config field but :data:`FREE`."""
    return {k: v for k, v in dotted_items(config_to_dict(cfg)) if k not in FREE}


def shape_key(cfg) -> str:
    """16 hex digits naming the shape of ``cfg`` (runs with equal keys can share a
    population)."""
    return hashlib.sha256(canonical_json(shape_of(cfg)).encode()).hexdigest()[:16]


def check_population(cfgs: Sequence[Any], config: type = RunConfig) -> None:
    """Refuse (:class:`ConfigError`) an empty population, a config that is not a
    ``config`` (the kind's class), two equal members, members of different shapes (naming
    the field), or members with ``train.loss_chunk`` (the chunked loss is the single run's)."""
    if not cfgs:
        raise ConfigError("a population needs at least one member config; got none")
    for cfg in cfgs:
        check_instance(cfg, config, "train_population")
    chunked = [c.train.loss_chunk for c in cfgs if getattr(c.train, "loss_chunk", 0)]
    if chunked:
        raise ConfigError(
            f"train.loss_chunk={chunked[0]} is not allowed in a population, "
            "which computes its loss whole; train these runs alone or with "
            "train.loss_chunk=0"
        )
    first = shape_of(cfgs[0])
    for i, cfg in enumerate(cfgs[1:], 1):
        for name, value in shape_of(cfg).items():
            if first.get(name) != value:
                raise ConfigError(
                    f"member {i} has {name}={value!r} but member 0 has "
                    f"{first.get(name)!r}; a population's members share every "
                    f"field but {', '.join(sorted(FREE))}"
                )
    keys = [canonical_json(config_to_dict(c)) for c in cfgs]
    if len(set(keys)) != len(keys):
        raise ConfigError("two members of the population have the same config; give each run once")


# ----------------------------------------------------------------------------- the model
class MemberEpsNorm(nn.Module):
    """An RMSNorm or LayerNorm whose ε is the buffer ``eps`` (a per-member value under
    vmap): g ⊙ x/√(mean(x²) + ε), or g ⊙ (x − μ)/√(var(x) + ε) + b; parameters named as the
    norm's."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.centred = isinstance(norm, nn.LayerNorm)
        self.weight = norm.weight
        self.bias = getattr(norm, "bias", None)
        self.register_buffer("eps", torch.tensor(float(norm.eps)), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.centred:
            x = x - x.mean(-1, keepdim=True)
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.weight is not None:
            y = y * self.weight
        return y if self.bias is None else y + self.bias


def _norms(model: nn.Module) -> list[tuple[str, nn.Module, str, nn.Module]]:
    """(qualified name, parent, attribute, norm) of every RMSNorm and LayerNorm of
    ``model``."""
    out = []
    for prefix, parent in model.named_modules():
        for name, child in parent.named_children():
            if isinstance(child, nn.RMSNorm | nn.LayerNorm):
                out.append((f"{prefix}.{name}" if prefix else name, parent, name, child))
    return out


def chosen_execution(execution: str | None) -> str:
    """How a population's step runs (:data:`smallinit.core.jobs.POPULATION_EXECS`):
    ``eager`` (PyTorch op by op), ``compile`` (``torch.compile`` of the members' batched
    forward and its backward) or ``cudagraphs`` (the same, replayed as CUDA graphs:
    ``mode="reduce-overhead"``, CUDA only); ``execution`` checked, None:
    ``$SMALLINIT_POPULATION_EXEC``, else ``eager``. It is no part of a run's config or key:
    the math is the same (compiled kernels fuse and reorder sums, so they agree with eager
    to rounding)."""
    return chosen_population_exec(execution)


def check_execution(execution: str, device: torch.device) -> None:
    """Refuse CUDA graphs on a device that is not a GPU."""
    if execution == "cudagraphs" and device.type != "cuda":
        raise ConfigError(
            f"population execution 'cudagraphs' needs a CUDA device, but the "
            f"runs train on {device.type}; use eager or compile"
        )


class PopulationObjective:
    """``objective(x, y)`` for :func:`~smallinit.llm.training.train.train_step`: x, y of
    shape (M, B, T); returns (None, Σ_m L_m) and keeps the members' losses (M,) as
    :attr:`losses`. ``base``: the objective whose code runs (the model, or the task's loss
    around it; its own weights unused); ``params()``: the stacked parameters (M, …) by
    name (views of the population's one tensor, taken anew each step so that autograd sees
    them), ``buffers``: likewise. ``execution`` (:func:`chosen_execution`): the batched
    forward as it is, or through ``torch.compile``."""

    def __init__(
        self,
        base: nn.Module,
        params: Callable[[], dict[str, torch.Tensor]],
        buffers: dict[str, torch.Tensor],
        execution: str = "eager",
    ):
        self.base = base
        self.params = params
        self.buffers = buffers
        self.losses: torch.Tensor | None = None
        self.execution = execution
        self._batched = torch.vmap(self._loss)
        if execution != "eager":
            mode = "reduce-overhead" if execution == "cudagraphs" else None
            self._batched = torch.compile(self._batched, mode=mode, dynamic=False)

    def _loss(self, params, buffers, x, y):
        return torch.func.functional_call(self.base, (params, buffers), (x, y))[1]

    def __call__(self, x: torch.Tensor, y: torch.Tensor):
        if self.execution == "cudagraphs":  # a new training step: earlier outputs are free
            torch.compiler.cudagraph_mark_step_begin()
        with warnings.catch_warnings():
            if x.device.type == "cpu":  # attention's per-member loop there, known and said
                warnings.filterwarnings("ignore", message=".*performance drop.*")
            losses = self._batched(self.params(), self.buffers, x, y)
        self.losses = losses.detach().clone()  # a graph's output is reused by its next replay
        return None, losses.sum()


def _prefix(objective: nn.Module, model: nn.Module) -> str:
    """The qualified name of ``model`` inside ``objective`` with a trailing dot ("" when
    the objective is the model), so the model's parameter names become the objective's."""
    for name, module in objective.named_modules():
        if module is model:
            return f"{name}." if name else ""
    raise ValueError("the task's objective does not hold the model it was given")


def member_batches(tasks: Sequence[Any], step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every member's batch of ``step`` stacked on a leading member axis, (M, B, …): each
    the batch its single run reads (``task.batch(step)``); a task class with a
    ``population_batch(tasks, step)`` gathers them at once (one corpus or one sample table
    shared by every member, one copy to the device)."""
    gather = getattr(type(tasks[0]), "population_batch", None)
    if gather is not None:
        return gather(tasks, step)
    xs, ys = zip(*(task.batch(step, Dist()) for task in tasks), strict=True)
    return torch.stack(xs), torch.stack(ys)


# ----------------------------------------------------------------------------- members
@dataclass
class Member:
    """One run of the population: its trainer (device, task, model, callbacks), its run and
    the callbacks' view of it, its row ``index``; ``failed``: why it stopped, if it did."""

    index: int
    trainer: Trainer
    run: Any
    recorder: Recorder
    opt_params: list[nn.Parameter] = field(default_factory=list)  # its AdamW's, in order
    opt_names: list[str] = field(default_factory=list)
    failed: str | None = None

    @property
    def cfg(self) -> RunConfig:
        return self.trainer.cfg


def _decays(names: list[str], member: Member) -> dict[str, float]:
    """The weight decay of each parameter (by name) for ``member``, as ``make_optimizer``."""
    rates = [g["weight_decay"] for g in member.trainer.optimizer.param_groups for _ in g["params"]]
    return dict(zip(member.opt_names, rates, strict=True))


def _identity(t: torch.Tensor) -> tuple:
    return (t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride()))


def own_copy(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with every tensor copied out of the population's stacks (so a saved file
    holds the member's tensors only), tensors that shared storage (a tied head) still
    shared."""
    seen: dict[tuple, torch.Tensor] = {}
    out = {}
    for name, t in state.items():
        key = _identity(t)
        if key not in seen:
            seen[key] = t.detach().clone()
        out[name] = seen[key]
    return out


class _Saved:
    """What :func:`save_checkpoint` reads of a member: ``state_dict()`` of its model (copied
    out of the stacks, :func:`own_copy`) or of its optimizer (already a copy)."""

    def __init__(self, state):
        self._state = state

    def state_dict(self) -> dict:
        return self._state() if callable(self._state) else self._state


class Population:
    """The members' stacked weights, their optimizer and the training loop (module
    docstring). Built from :class:`Member` s whose trainers are fresh (init weights);
    ``execution``: how its step runs (:func:`chosen_execution`)."""

    def __init__(self, members: list[Member], execution: str = "eager"):
        self.members = members
        first = members[0].trainer
        self.device = first.device
        self.cfg = first.cfg
        shapes = {n: tuple(p.shape) for n, p in first.model.named_parameters()}
        self.names = list(shapes)
        self.spans: dict[str, tuple[int, int, tuple[int, ...]]] = {}
        at = 0
        for name, shape in shapes.items():
            size = math.prod(shape)
            self.spans[name] = (at, at + size, shape)
            at += size
        for member in members:
            by_id = {id(p): n for n, p in member.trainer.model.named_parameters()}
            member.opt_params = [
                p for g in member.trainer.optimizer.param_groups for p in g["params"]
            ]
            member.opt_names = [by_id[id(p)] for p in member.opt_params]
        # every member's parameters, one row each: θ[m] = (θ_m,p flattened, p in model order)
        rows = [
            torch.cat([p.detach().flatten() for p in m.trainer.model.parameters()]) for m in members
        ]
        self.flat = torch.stack(rows).requires_grad_(True)
        dtype = self.flat.dtype
        decay = torch.zeros(len(members), at, dtype=dtype, device=self.device)
        for member in members:
            rates = _decays(self.names, member)
            for name, (a, b, _) in self.spans.items():
                decay[member.index, a:b] = rates[name]
            self._point_at_rows(member)
        buffers = {
            n: torch.stack([dict(m.trainer.model.named_buffers())[n] for m in members])
            for n, _ in first.model.named_buffers()
        }
        with torch.device("meta"):
            base = Transformer(self.cfg.model, parts=PLAIN_PARTS)
        eps = [m.cfg.model.norm_eps for m in members]
        if len(set(eps)) > 1:
            for qualified, parent, name, norm in _norms(base):
                setattr(parent, name, MemberEpsNorm(norm))
                buffers[f"{qualified}.eps"] = torch.tensor(eps, device=self.device, dtype=dtype)
        objective = first.task.objective(base)  # the model itself, or a loss wrapping it
        prefix = _prefix(objective, base)
        self.objective = PopulationObjective(
            objective,
            lambda: {prefix + n: t for n, t in self.stacked().items()},
            {prefix + n: b for n, b in buffers.items()},
            chosen_execution(execution),
        )
        t = [m.cfg.train for m in members]
        self.optimizer = PopulationAdamW(
            [self.flat],
            decays=[decay],
            betas=[(x.beta1, x.beta2) for x in t],
            eps=[x.adam_eps for x in t],
            clip=[x.grad_clip for x in t],
        )

    def stacked(self) -> dict[str, torch.Tensor]:
        """Every parameter stacked over members, (M, …) by name: views of :attr:`flat`."""
        n = self.flat.shape[0]
        return {
            name: self.flat[:, a:b].view(n, *shape) for name, (a, b, shape) in self.spans.items()
        }

    def row(self, tensor: torch.Tensor, m: int, name: str) -> torch.Tensor:
        """Member m's part ``name`` of a tensor laid out as :attr:`flat` (a view)."""
        a, b, shape = self.spans[name]
        return tensor[m, a:b].view(shape)

    def _point_at_rows(self, member: Member) -> None:
        """Make the member's model parameters views of its row of :attr:`flat` (tied
        parameters stay one parameter)."""
        model, m = member.trainer.model, member.index
        fresh: dict[int, nn.Parameter] = {}
        for name, p in model.named_parameters():
            fresh[id(p)] = nn.Parameter(self.row(self.flat.detach(), m, name), requires_grad=False)
        for module in model.modules():
            for key, p in list(module._parameters.items()):
                if p is not None:
                    module._parameters[key] = fresh[id(p)]

    # -- checkpoints
    def optimizer_state(self, member: Member, step: int) -> dict:
        """The member's optimizer state as its own ``torch.optim.AdamW`` state dict (the
        single run's checkpoint format), copied out of the stacks."""
        opt = member.trainer.optimizer
        state = self.optimizer.state[self.flat]
        opt.state.clear()
        for p, name in zip(member.opt_params, member.opt_names, strict=True):
            opt.state[p] = {
                "step": torch.tensor(float(step), dtype=torch.float32, device=p.device),
                "exp_avg": self.row(state["exp_avg"], member.index, name).clone(),
                "exp_avg_sq": self.row(state["exp_avg_sq"], member.index, name).clone(),
            }
        for group in opt.param_groups:
            group["lr"] = lr_at(step, member.cfg) if step else group["lr"]
        state = opt.state_dict()
        opt.state.clear()
        return state

    def save(self, member: Member, step: int) -> None:
        model = member.trainer.model
        save_checkpoint(
            member.run,
            step,
            _Saved(lambda: own_copy(model.state_dict())),
            _Saved(self.optimizer_state(member, step)),
        )

    def load(self, member: Member, state: dict) -> None:
        """Restore a member from a checkpoint's ``state`` (either path's)."""
        opt = member.trainer.optimizer
        restore(state, member.trainer.model, opt)
        ours = self.optimizer.state[self.flat]
        with torch.no_grad():
            for p, name in zip(member.opt_params, member.opt_names, strict=True):
                for key in ("exp_avg", "exp_avg_sq"):
                    self.row(ours[key], member.index, name).copy_(opt.state[p][key])
        opt.state.clear()

    def resume(self) -> int:
        """Restore every member from the newest checkpoint step all of them hold (each
        writes its own), cut their metrics back to it; 0 (and no metrics) when there is
        none. Returns the step."""
        found = [latest_loadable(m.run.path) for m in self.members]
        step = min(s for s, _ in found)
        states = []
        for member, (s, state) in zip(self.members, found, strict=True):
            if step and s != step:
                try:
                    state = safe_load(member.run.path / "checkpoints" / f"step-{step:08d}.pt")
                except Exception as err:  # gone or damaged: every member starts afresh
                    log.warning(
                        "member %s has no intact checkpoint at step %d (%s); the "
                        "population starts from step 0",
                        member.run.path,
                        step,
                        err,
                    )
                    step = 0
            states.append(state)
        for member, state in zip(self.members, states, strict=True):
            if step:
                self.load(member, state)
            kept = [r for r in member.run.metrics() if r.get("step", 0) <= step] if step else []
            member.run.rewrite_metrics(kept)
        self.optimizer.steps = step
        if step:
            log.info("resuming a population of %d from step %d", len(self.members), step)
        return step

    # -- the loop
    def alive(self) -> list[Member]:
        return [m for m in self.members if m.failed is None]

    def fit(self, settle) -> None:
        """Train every member to the last step; ``settle(member, outcome)`` hands each
        member's outcome (its summary, or the exception that ends it) to its run as soon
        as it is known."""
        cfg, t = self.cfg, self.cfg.train
        start = self.resume()
        for member in self.members:
            member.recorder.call("on_start", member.trainer, member.recorder, start)
        ctx = autocast(cfg, self.device)
        first = self.members[0]
        window = torch.zeros(
            len(self.members),
            device=self.device,
            dtype=window_dtype(first.trainer.task, first.trainer.model),
        )
        n = 0
        tokens = first.trainer.task.tokens_per_step
        clock, clock_step = time.perf_counter(), start
        last = [math.nan] * len(self.members)
        with progress(
            total=t.steps, initial=start, desc=f"population of {len(self.members)}", unit="step"
        ) as bar:
            for step in range(start + 1, t.steps + 1):
                window += self.train_step(step, ctx).to(window.dtype)
                n += 1
                bar.update(1)
                records: dict[int, dict | None] = {}
                if step % t.log_every == 0 or step == t.steps:
                    means = (window / n).tolist()
                    window.zero_()
                    n = 0
                    now = time.perf_counter()
                    rate = (step - clock_step) * tokens / max(now - clock, 1e-9)
                    clock, clock_step = now, step
                    for member in self.alive():
                        last[member.index] = means[member.index]
                        record = {
                            "step": step,
                            "loss": means[member.index],
                            "lr": lr_at(step, member.cfg),
                        }
                        if tokens:
                            record["tokens"] = step * tokens
                            record["tok_per_s"] = rate
                        records[member.index] = record
                for member in self.alive():
                    self._after_step(member, step, records.get(member.index), ctx, settle)
                if t.checkpoint_every and step % t.checkpoint_every == 0 and step != t.steps:
                    for member in self.alive():
                        self.save(member, step)
                if not self.alive():
                    return
        for member in self.alive():
            try:
                summary = self._finish(member, ctx, last[member.index])
            except Exception as err:
                self._end(member, err, settle)
                continue
            self._end(member, summary, settle)

    def train_step(self, step: int, ctx) -> torch.Tensor:
        """Step ``step`` of every member (each on its own batch, at its own learning rate)
        through the trainer's :func:`~smallinit.llm.training.train.train_step`; returns the
        members' losses (M,)."""
        x, y = member_batches([m.trainer.task for m in self.members], step)
        self.optimizer.set_rates([lr_at(step, m.cfg) for m in self.members])
        train_step(self.objective, self.optimizer, x, y, lr=None, clip=0, ctx=ctx)
        return self.objective.losses

    def _after_step(self, member: Member, step: int, record: dict | None, ctx, settle) -> None:
        """The member's log record, held-out evaluation and callbacks of ``step``, as its
        single run's loop has them; a non-finite loss fails the member."""
        trainer, run = member.trainer, member.recorder
        try:
            if record is not None:
                if not math.isfinite(record["loss"]):
                    run.log(record)
                    raise RunFailed(f"non-finite training loss ({record['loss']}) at step {step}")
                record.update(trainer.task.log_fields(step, trainer.model, ctx))
                run.log(record)
            held_out = trainer.task.evaluate(step, trainer.model, ctx)
            if held_out:
                run.log({"step": step, **held_out})
            run.call("on_step", trainer, run, step, record)
        except Exception as err:
            self._end(member, err, settle)

    def _finish(self, member: Member, ctx, last_loss: float) -> dict[str, Any]:
        """The task's final evaluation and results, then the final weights (as
        :meth:`Trainer.finish`, with the weights copied out of the stacks)."""
        trainer, run = member.trainer, member.recorder
        summary = trainer.task.finish(run, trainer.model, ctx, last_loss)
        weights = own_copy(trainer.model.state_dict())
        atomic_torch_save(weights, run.path / "model.pt")
        atomic_save_safetensors(weights, run.path / WEIGHTS)
        for old in checkpoints(run.path):
            old.unlink(missing_ok=True)
        trainer.summary = summary
        return summary

    def _end(self, member: Member, outcome, settle) -> None:
        """Stop the member: its callbacks' ``on_end``, then its outcome to its run."""
        member.failed = "done" if isinstance(outcome, dict) else str(outcome)
        try:
            member.recorder.call("on_end", member.trainer, member.recorder)
        except Exception as err:
            outcome = err if isinstance(outcome, dict) else outcome
        settle(member, outcome)


# ----------------------------------------------------------------------------- entry point
def population_id(keys: Sequence[str]) -> str:
    """16 hex digits naming a population by its members' run keys."""
    return hashlib.sha256(" ".join(sorted(keys)).encode()).hexdigest()[:16]


class _Claims:
    """Each member's run through :meth:`RunStore.get_or_run` in a thread of its own, whose
    body hands the run over (``claimed``) and waits for its outcome; a run that is reused
    never reaches a body (``settled``)."""

    def __init__(
        self, store: RunStore, cfgs: Sequence[Any], force: bool, kind: RunKind = PRETRAINING
    ):
        self.kind = kind
        self.events: queue.Queue = queue.Queue()
        self.outcomes = [queue.Queue(maxsize=1) for _ in cfgs]
        self.runs: list[Run | None] = [None] * len(cfgs)
        self.errors: list[BaseException | None] = [None] * len(cfgs)
        self.threads = [
            threading.Thread(
                target=self._work,
                args=(store, i, cfg, force),
                name=f"population-member-{i}",
                daemon=True,
            )
            for i, cfg in enumerate(cfgs)
        ]
        for thread in self.threads:
            thread.start()

    def _work(self, store: RunStore, i: int, cfg: RunConfig, force: bool) -> None:
        def body(run: RunWriter):
            self.events.put(("claimed", i, run))
            outcome = self.outcomes[i].get()
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome

        try:
            self.runs[i] = store.get_or_run(
                self.kind.kind, cfg, body, version=self.kind.version, force=force
            )
        except BaseException as err:  # recorded by the store; reported by join()
            self.errors[i] = err
        finally:
            self.events.put(("settled", i, None))

    def claimed(self) -> dict[int, RunWriter]:
        """Wait until each member is either handed over or settled; the handed-over runs."""
        seen: set[int] = set()
        out: dict[int, RunWriter] = {}
        while len(seen) < len(self.threads):
            what, i, run = self.events.get()
            if i in seen:
                continue
            seen.add(i)
            if what == "claimed":
                out[i] = run
        return out

    def settle(self, i: int, outcome) -> None:
        if self.outcomes[i].empty():
            self.outcomes[i].put(outcome)

    def join(self) -> list[Run]:
        for thread in self.threads:
            thread.join()
        for err in self.errors:
            if err is not None:
                raise err
        return list(self.runs)


def population_key(cfg: RunConfig, mode: str) -> str | None:
    """The job driver's population key of the run ``cfg`` (:meth:`RunSpec.population_key`):
    its :func:`shape_key` where a population pays (``mode`` ``auto``: the run trains on a
    CUDA device; on the CPU a population is not faster) or may run (``on``); else None,
    and None for a run with ``train.loss_chunk`` (a population computes its loss whole)."""
    if mode == "off" or cfg.train.loss_chunk:
        return None
    if mode == "auto":
        try:
            if resolve_device(cfg, Dist()).type != "cuda":
                return None
        except ConfigError:  # no CUDA for a cuda run: it fails alone, with its own message
            return None
    return shape_key(cfg)


class Populated:
    """For a run spec (:class:`smallinit.core.jobs.RunSpec`) whose runs, of the
    :class:`RunKind` ``population_kind``, can train together: its population key
    (:func:`population_key`) and how the driver computes a group of them
    (:func:`train_populations`)."""

    population_kind: RunKind = PRETRAINING

    def population_key(self, mode: str) -> str | None:
        return population_key(self.config, mode)

    @classmethod
    def compute_population(
        cls, specs: list, store: RunStore, force: bool, execution: str = "eager"
    ) -> None:
        train_populations(
            [s.config for s in specs],
            runs_dir=store.root,
            force=force,
            kind=cls.population_kind,
            execution=execution,
        )


def capacity(cfg) -> int | None:
    """How many members of ``cfg``'s shape fit its device's memory (None: no limit known):
    the device's bytes over one member's training step and two more copies of its weights
    (the weights its trainer built, and its row of weight-decay rates;
    :func:`~smallinit.llm.training.memory.training_bytes`, :func:`~.memory.model_bytes`)."""
    available, _ = device_memory(resolve_device(cfg, Dist()))
    if available is None:
        return None
    each = training_bytes(cfg.model, cfg.train.batch_size) + 2 * model_bytes(cfg.model)
    return max(1, int(available // each))


def train_populations(
    cfgs: Sequence[Any],
    *,
    runs_dir=None,
    force: bool = False,
    kind: RunKind = PRETRAINING,
    execution: str | None = None,
) -> list[Run]:
    """:func:`train_population` of ``cfgs`` (one shape) in as many populations as their
    device's memory needs (:func:`capacity`), one after another."""
    cfgs = list(cfgs)
    check_population(cfgs, kind.config)
    size = capacity(cfgs[0]) or len(cfgs)
    runs: list[Run] = []
    for i in range(0, len(cfgs), size):
        runs += train_population(
            cfgs[i : i + size], runs_dir=runs_dir, force=force, kind=kind, execution=execution
        )
    return runs


def build_members(
    cfgs: Sequence[Any],
    runs: Sequence[Any],
    *,
    callbacks: list[Callback] | None = None,
    dtype: torch.dtype | None = None,
    kind: RunKind = PRETRAINING,
) -> list[Member]:
    """Each config's member as its single run builds it (a :class:`Trainer`: task, model
    with its init, callbacks), writing to ``runs`` (store runs, or
    :class:`~smallinit.llm.training.train.ScratchRun` s); the trainer's own checkpoints are
    left out (the population writes them, :meth:`Population.save`)."""
    members = []
    for i, (cfg, run) in enumerate(zip(cfgs, runs, strict=True)):
        trainer = Trainer(cfg, Dist(), kind.make_task, callbacks=callbacks, dtype=dtype)
        kept = [c for c in trainer.callbacks() if not isinstance(c, Checkpoints)]
        members.append(Member(i, trainer, run, Recorder(run, kept)))
    return members


def train_population(
    cfgs: Sequence[Any],
    *,
    runs_dir=None,
    force: bool = False,
    callbacks: list[Callback] | None = None,
    dtype: torch.dtype | None = None,
    kind: RunKind = PRETRAINING,
    execution: str | None = None,
) -> list[Run]:
    """Train (or resume, or reuse) the runs ``cfgs`` of ``kind`` (default pretraining; the
    anchor task's is :data:`smallinit.llm.training.anchor.ANCHOR`) as one population on
    their shared ``train.device`` (module docstring); returns each config's run, in order,
    as the kind's single path (:func:`smallinit.llm.training.train.train`) would have
    stored it. ``execution``: how the population's step runs (:func:`chosen_execution`).

    Runs already finished (or failed for good) are reused and take no part; ``force``
    recomputes them. ``callbacks``: more callbacks for every member (None: the log sinks the
    environment asks for); ``dtype``: the members' parameter dtype (None: float32; float64
    for the equivalence tests). Members must share a shape (:func:`check_population`)."""
    cfgs = list(cfgs)
    check_population(cfgs, kind.config)
    execution = chosen_execution(execution)
    store = RunStore(runs_dir)
    for cfg in cfgs:
        preflight(cfg, Dist(), explicit_attention=kind.explicit_attention)
    check_execution(execution, resolve_device(cfgs[0], Dist()))
    if kind.prepare is not None:
        kind.prepare(cfgs[0])
    # a run another process is computing now stays out (a population waiting for it while
    # that process's population waits for one of ours would wait forever); it is asked for
    # alone afterwards, which waits for that writer and reuses its result
    busy = [
        i
        for i, cfg in enumerate(cfgs)
        if RunLock.is_free(store.run(kind.kind, cfg, version=kind.version).lock_path) is False
    ]
    free = [i for i in range(len(cfgs)) if i not in busy]
    pool = [cfgs[i] for i in free]
    claims = _Claims(store, pool, force, kind)
    claimed = claims.claimed()
    if claimed:
        order = sorted(claimed)
        try:
            members = build_members(
                [pool[i] for i in order],
                [claimed[i] for i in order],
                callbacks=callbacks,
                dtype=dtype,
                kind=kind,
            )
            ident = population_id([claimed[i].key for i in order])
            for member in members:
                member.run.status_fields["population"] = {
                    "id": ident,
                    "size": len(members),
                    "member": member.index,
                }
            population = Population(members, execution)
            population.fit(lambda m, outcome: claims.settle(order[m.index], outcome))
        except BaseException as err:
            for index in order:
                claims.settle(index, err)
            claims.join()
            raise
    runs: list[Run | None] = [None] * len(cfgs)
    for i, run in zip(free, claims.join(), strict=True):
        runs[i] = run
    for i in busy:
        runs[i] = kind.alone(cfgs[i], store.root, force, callbacks)
    return runs
