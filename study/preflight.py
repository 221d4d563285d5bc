"""``smallinit figs --profile P --preflight``: what would fail in a profile, found on the CPU
before any run starts, with nothing stored.

For every run of the chosen figures (their experiments' runs and the runs those compute
inside themselves) the preflight

1. **checks each run's config** as the run itself would before its directory exists: a
   transformer's init table on a model built on the ``meta`` device and its training step's
   memory estimate against the memory of the device it will train on (a GPU's own; on a
   machine without a GPU, a run meant for one — ``train.device`` ``auto`` or ``cuda`` — is
   held to the H200 the plan assumes, :data:`smallinit.llm.training.cost.H200_MEMORY_GIB`),
   a toy run's memory estimate;
2. **builds the data** of every distinct corpus and anchor task: the synthetic corpora by
   their generator rules (held-out split, tokenizer, token arrays) in a temporary cache,
   at most ``max_items`` training items each when asked (the held-out capacity is still
   checked at the profile's own count, :func:`smallinit.llm.data.synthetic.
   check_held_out_capacity`);
3. **trains one optimizer step of each distinct configuration** at a cut width
   (:func:`smallinit.llm.training.train.cut_config`) through the one trainer on the CPU,
   its evaluation and final saves included (:func:`smallinit.llm.training.train.trial`).
   Configurations are distinct by their switches — every string and boolean of the config
   (norm, positions, MLP, gating, precision, compile, device, ...), the init scheme's family
   and the data they read — not by their numbers (sizes, γ, ε, seeds), which the cut
   changes anyway.

For a profile with runs meant for a GPU it also states **each part of a GPU session**: a
figure's runs (``figs --only N``; a run several figures plan belongs to the first), their
H200 minutes, the longest run and the largest training step's memory against the H200's
(:func:`part_checks`).

Nothing goes to the run store or the corpus cache: the corpora and the trial runs live in
a temporary folder, deleted at the end. Each check is a :class:`Check`; :func:`preflight`
returns them all (a failure is recorded and the rest still run).
"""

from __future__ import annotations

import dataclasses
import math
import re
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

from smallinit.core import profiles
from smallinit.core.config import canonical_json, config_to_dict, override
from smallinit.core.errors import ConfigError, RunFailed, one_line
from smallinit.core.jobs import RunSpec
from smallinit.core.memory import human
from smallinit.llm.data import anchor as anchor_data
from smallinit.llm.data import corpus as corpus_mod
from smallinit.llm.data import synthetic
from smallinit.llm.run_config import RunConfig
from smallinit.llm.training import cost
from smallinit.llm.training.memory import training_bytes
from smallinit.llm.training.train import cut_config
from smallinit.llm.training.train_spec import TrainSpec
from smallinit.study import experiments as registry

#: one device call's limit: each run of a GPU part fits it, or resumes from its
#: checkpoints in the next call (the store's resume)
PART_LIMIT_S = 9 * 60
CUT_WIDTH = 64
CUT_LAYERS = 2
_NUMBER = re.compile(r"[-+]?\d+(\.\d+)?(e[-+]?\d+)?")


@dataclasses.dataclass
class Check:
    """One line of the preflight: what was checked, whether it passed, what was found."""

    stage: str  # "runs", "corpus", "anchor data", "step"
    name: str
    ok: bool
    detail: str
    seconds: float = 0.0

    def line(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        return f"{mark}  {self.stage:<11} {self.name}: {self.detail} ({self.seconds:.1f} s)"


def _failure(err: BaseException) -> str:
    """A finding in one line: a config error's own message, else the exception's type and
    message with the last frames where it was raised."""
    if isinstance(err, ConfigError):
        return one_line(err)
    frames = traceback.format_exception(type(err), err, err.__traceback__, limit=-2)
    where = " | ".join(line.strip() for line in "".join(frames[:-1]).splitlines()[1:])
    return f"{type(err).__name__}: {one_line(err)}"[:600] + (f" [{where[-400:]}]" if where else "")


def _timed(stage: str, name: str, fn: Callable[[], str]) -> Check:
    t0 = time.perf_counter()
    try:
        detail, ok = fn(), True
    except Exception as err:  # every failure is a finding; the preflight goes on
        detail, ok = _failure(err), False
    return Check(stage, name, ok, detail, time.perf_counter() - t0)


# ----------------------------------------------------------------------------- the runs
def profile_specs(
    profile: str, figures: list[int] | None = None
) -> tuple[list[RunSpec], list[Check]]:
    """The distinct runs of the chosen figures (experiments' runs and inner runs; for all
    figures also the profile's ``[llm-train]`` run), and a failed :class:`Check` for each
    experiment whose runs cannot even be listed."""
    chosen = (
        list(registry.EXPERIMENTS.values())
        if figures is None
        else list({e.name: e for n in figures for e in registry.of_figure(n)}.values())
    )
    unique: dict[tuple[str, str], RunSpec] = {}
    checks = []
    for experiment in chosen:
        try:
            for spec in experiment.specs(profile) + experiment.inner(profile):
                unique.setdefault(spec.ident, spec)
        except Exception as err:
            checks.append(Check("runs", experiment.name, False, _failure(err)))
    if figures is None:  # and the profile's single run, `smallinit llm train --profile P`
        try:
            cfg = override(
                RunConfig(), profiles.section(profile, "llm-train"), where=f"{profile}.llm-train"
            )
            spec = TrainSpec(cfg, {"table": "llm-train"})
            unique.setdefault(spec.ident, spec)
        except Exception as err:
            checks.append(Check("runs", "llm-train table", False, _failure(err)))
    return list(unique.values()), checks


def trainable(spec: RunSpec) -> RunSpec | None:
    """The spec as one the preflight can check and trial, when its run trains a transformer:
    itself when its type can (``check`` and ``trial``: pretraining, the anchor task), a
    pretraining spec of its config when that is a plain run config (a run whose learning
    rate is chosen first, say), else None (the toy runs, compare itself)."""
    if hasattr(spec, "trial") and hasattr(getattr(spec.config, "train", None), "device"):
        return spec
    if isinstance(spec.config, RunConfig):
        return TrainSpec(spec.config, dict(spec.tags))
    return None


def as_planned(spec: RunSpec) -> RunSpec:
    """``spec`` as this machine can check and trial it: a run meant for CUDA
    (``train.device = "cuda"``) on a machine without it reads its device as ``auto`` (this
    machine's CPU for the trial step; :func:`planned_memory` still holds it to the H200);
    any other run as it is."""
    if spec.config.train.device != "cuda" or torch.cuda.is_available():
        return spec
    return spec.with_config(override(spec.config, {"train.device": "auto"}))


def planned_memory(cfg) -> tuple[int, str] | None:
    """The memory pool a run is checked against: None (the device's own, as the run itself
    does) unless it is meant for a GPU (``train.device`` auto or cuda) and this machine has
    none; then the H200 the plan assumes."""
    if cfg.train.device == "cpu" or torch.cuda.is_available():
        return None
    return (
        cost.H200_MEMORY_GIB * 1024**3,
        f"memory of the planned H200 ({cost.H200_MEMORY_GIB} GiB; no GPU here)",
    )


def check_runs(specs: list[RunSpec]) -> list[Check]:
    """Each run's own checks (module docstring, 1): one failed Check per failing run, one
    passed Check per kind for the rest."""
    by_kind: dict[str, list[float]] = {}
    seconds: dict[str, float] = {}
    checks = []
    for spec in specs:
        t1 = time.perf_counter()
        try:
            trained = trainable(spec)
            if trained is not None:
                as_planned(trained).check(memory=planned_memory(spec.config))
                estimate = float(training_bytes(spec.config.model, spec.config.train.batch_size))
            else:
                check = getattr(spec.config, "check_memory", None)
                if check is not None:
                    check()
                estimate = 0.0
        except Exception as err:
            checks.append(
                Check(
                    "runs",
                    f"{spec.kind} {spec.key}",
                    False,
                    f"{registry.summary(spec)}: {_failure(err)}",
                    time.perf_counter() - t1,
                )
            )
            continue
        by_kind.setdefault(spec.kind, []).append(estimate)
        seconds[spec.kind] = seconds.get(spec.kind, 0.0) + time.perf_counter() - t1
    for kind, estimates in by_kind.items():
        detail = f"{len(estimates)} runs checked"
        if max(estimates) > 0:
            detail += (
                f" (init tables on the meta device; largest training step {human(max(estimates))})"
            )
        checks.append(Check("runs", kind, True, detail, seconds[kind]))
    return checks


def meant_for_gpu(cfg) -> bool:
    """Whether a run config trains on a GPU where there is one (``train.device`` cuda or
    auto)."""
    return getattr(getattr(cfg, "train", None), "device", "cpu") in ("cuda", "auto")


def resumable(train) -> bool:
    """Whether a run keeps checkpoints to resume from before its end."""
    return 0 < train.checkpoint_every < train.steps


def part_checks(profile: str, figures: list[int] | None = None) -> list[Check]:
    """One Check per figure with runs meant for a GPU (module docstring): the runs, their
    H200 minutes at a small model's published MFU from their training FLOPs
    (:func:`smallinit.llm.training.cost.run_cost`; a lower bound, since a model this small
    is bound by kernel launches more than by FLOPs, which no GPU has measured here), the
    longest run (steps, minutes) and the largest training step's memory against the H200's.
    It fails where a run longer than :data:`PART_LIMIT_S` keeps no checkpoints to resume
    from, or a step does not fit the H200's memory."""
    charged: dict[int, dict[tuple[str, str], RunSpec]] = {}
    seen: set[tuple[str, str]] = set()
    try:
        planned = registry.planned(profile, figures)
    except Exception as err:  # the runs' own listing check names the experiment
        return [Check("part", "parts", False, _failure(err))]
    for number, _, spec, _ in planned:
        if spec.ident in seen or not meant_for_gpu(spec.config):
            continue
        seen.add(spec.ident)
        charged.setdefault(number, {})[spec.ident] = spec
    limit, memory = PART_LIMIT_S / 60, cost.H200_MEMORY_GIB * 1024**3
    checks = []
    for number, runs in sorted(charged.items()):
        t0 = time.perf_counter()
        costs = [(spec, cost.run_cost(spec.config)) for spec in runs.values()]
        costs = [(spec, c) for spec, c in costs if c is not None]
        if not costs:
            continue
        minutes = [c.h200_hours_small_mfu * 60 for _, c in costs]
        longest, c_long = max(costs, key=lambda sc: sc[1].flops)
        train = longest.config.train
        over = [
            spec
            for (spec, _), m in zip(costs, minutes, strict=True)
            if m > limit and not resumable(spec.config.train)
        ]
        step = max(c.memory_bytes for _, c in costs)
        calls = max(1, math.ceil(sum(minutes) / limit))
        resume = (
            f", checkpoints every {train.checkpoint_every:,} steps"
            if train.checkpoint_every
            else ", no checkpoints"
        )
        detail = (
            f"`figs --only {number}`, {len(costs)} GPU runs: "
            f"{sum(minutes):.1f} H200-min at {cost.SMALL_MODEL_MFU:.0%} MFU from their "
            f"FLOPs (a lower bound for small models, whose steps kernel launches bound), "
            f"{calls} call(s) "
            f"of {limit:g} min; longest run {train.steps:,} steps, "
            f"{c_long.h200_hours_small_mfu * 60:.2f} min{resume}; largest step "
            f"{human(step)} of {human(memory)}"
        )
        ok = not over and step <= memory
        if over:
            detail += (
                f"; {len(over)} run(s) over {limit:g} min keep no checkpoints "
                f"(train.checkpoint_every), e.g. {registry.summary(over[0])}"
            )
        if step > memory:
            detail += "; a training step does not fit the H200's memory"
        checks.append(Check("part", f"fig {number}", ok, detail, time.perf_counter() - t0))
    return checks


# ----------------------------------------------------------------------------- the data
def reduced(data, max_items: int | None, cache: str):
    """``data`` built in the scratch ``cache``, a synthetic corpus at most ``max_items``
    training items (None: its own count)."""
    changes: dict[str, Any] = {"cache_dir": cache}
    if data.corpus == "synthetic" and max_items is not None:
        changes["synthetic_items"] = min(data.synthetic_items, max_items)
    return override(data, changes)


def build_corpus(data, vocab: int, max_items: int | None, cache: str) -> str:
    """The corpus of ``data`` built by its generator rules (module docstring, 2); the
    held-out capacity checked at the profile's own count first."""
    if data.corpus == "synthetic":
        synthetic.check_held_out_capacity(
            data.synthetic_items,
            data.synthetic_val_items,
            data.synthetic_mix,
            data.synthetic_held_out,
        )
    small = reduced(data, max_items, cache)
    built = corpus_mod.load(small, vocab)
    items = len(built.val_items["start"])
    scale = (
        ""
        if data.corpus != "synthetic"
        else f"{small.synthetic_items:,} of {data.synthetic_items:,} training items, "
        if small.synthetic_items < data.synthetic_items
        else f"{data.synthetic_items:,} training items, "
    )
    return (
        f"{scale}{items:,} held-out items, {len(built.train):,} training and "
        f"{len(built.val):,} held-out tokens, vocabulary {built.vocab_size}"
    )


def build_anchor(task) -> str:
    data = anchor_data.generate(task)
    return (
        f"{len(data.train.labels):,} training, {len(data.test_seen.labels):,} seen-pair and "
        f"{len(data.test_held_out.labels):,} held-out-pair test samples"
    )


def corpora(specs: list[RunSpec]) -> dict[str, tuple[Any, int]]:
    """The distinct corpora the training runs of ``specs`` read: corpus key → (data config,
    vocabulary size)."""
    found: dict[str, tuple[Any, int]] = {}
    for spec in specs:
        cfg = spec.config
        if trainable(spec) is not None and hasattr(cfg, "data"):
            key = corpus_mod.corpus_key(cfg.data, cfg.model.vocab_size)
            found.setdefault(key, (cfg.data, cfg.model.vocab_size))
    return found


def data_checks(specs: list[RunSpec], max_items: int | None, cache: str) -> list[Check]:
    """Every distinct corpus and anchor task of the training runs, built once."""
    tasks: dict[str, Any] = {}
    for spec in specs:
        cfg = spec.config
        if trainable(spec) is not None and hasattr(cfg, "task"):
            tasks.setdefault(canonical_json(config_to_dict(cfg.task)), cfg.task)
    checks = []
    for key, (data, vocab) in corpora(specs).items():
        name = f"{data.corpus} {key} (vocab {vocab})"
        checks.append(
            _timed("corpus", name, lambda d=data, v=vocab: build_corpus(d, v, max_items, cache))
        )
    for task in tasks.values():
        name = f"anchor task seed {task.seed}, {task.n_train:,} + {task.n_test:,} samples"
        checks.append(_timed("anchor data", name, lambda t=task: build_anchor(t)))
    return checks


# ----------------------------------------------------------------------------- the steps
def _switches(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _switches(v) for k, v in data.items() if isinstance(v, dict | str | bool)}
    return data


def signature(spec: RunSpec) -> str:
    """What makes a configuration distinct for a trial step (module docstring, 3)."""
    data = config_to_dict(spec.config)
    switches = _switches({k: v for k, v in data.items() if k not in ("init", "data", "task")})
    init = _NUMBER.sub("", str(data.get("init", "")))
    reads = {k: data[k] for k in ("data", "task") if k in data}
    return canonical_json([spec.kind, init, switches, reads])


def trial_config(spec: RunSpec, max_items: int | None, cache: str, compile: bool):
    cfg = cut_config(spec.config, width=CUT_WIDTH, layers=CUT_LAYERS)
    if hasattr(cfg, "data"):
        cfg = override(cfg, {"data": config_to_dict(reduced(cfg.data, max_items, cache))})
    if not compile:
        cfg = override(cfg, {"train.compile": False})
    return cfg


def step_checks(
    specs: list[RunSpec], max_items: int | None, cache: str, compile: bool = True
) -> list[Check]:
    """One trial step of each distinct configuration (module docstring, 3)."""
    distinct: dict[str, list[RunSpec]] = {}
    for spec in specs:
        trained = trainable(spec)
        if trained is not None:
            distinct.setdefault(signature(trained), []).append(as_planned(trained))
    checks = []
    for group in distinct.values():
        spec = group[0]
        m = spec.config.model

        def step(spec=spec):
            cfg = trial_config(spec, max_items, cache, compile)
            out = spec.trial(cfg)
            loss = out["loss"]
            if loss is None:
                raise RunFailed("the trial step logged no training loss")
            return (
                f"loss {loss:.3f} after one step at d_model {cfg.model.d_model}, "
                f"{cfg.model.n_layers} layers, batch {cfg.train.batch_size}"
                f"{', compiled' if cfg.train.compile else ''}; final evaluation and "
                f"weights written to a scratch folder"
            )

        name = (
            f"{spec.kind} {m.norm}/{m.positions}/{m.mlp}"
            f"{'/gated' if m.gated_attention else ''}"
            f"{'/post-norm' if m.norm_position == 'post' else ''} "
            f"{_NUMBER.sub('', spec.config.init).rstrip(':')} ({len(group)} runs, "
            f"d_model {sorted({s.config.model.d_model for s in group})})"
            f"{'' if compile or not spec.config.train.compile else ' [compile skipped]'}"
        )
        checks.append(_timed("step", name, step))
    return checks


# ----------------------------------------------------------------------------- all of it
def preflight(
    profile: str,
    figures: list[int] | None = None,
    *,
    max_items: int | None = None,
    compile: bool = True,
    on_check: Callable[[Check], None] | None = None,
) -> list[Check]:
    """Every check of the module docstring for ``profile`` (the chosen ``figures``, default
    all), in order: the runs' configs, the data, one step per distinct configuration.
    ``max_items``: build synthetic corpora at this many training items at most;
    ``compile=False`` trains the steps eagerly (for a quick look; the profile's own compile
    setting is then not exercised). ``on_check`` sees each check as it is made."""
    checks: list[Check] = []

    def add(found: list[Check]) -> None:
        for check in found:
            checks.append(check)
            if on_check is not None:
                on_check(check)

    specs, listing = profile_specs(profile, figures)
    add(listing)
    add(check_runs(specs))
    add(part_checks(profile, figures))
    with tempfile.TemporaryDirectory(prefix="smallinit-preflight-") as cache:
        add(data_checks(specs, max_items, cache))
        add(step_checks(specs, max_items, cache, compile))
    return checks


def summary(checks: list[Check], profile: str, seconds: float) -> str:
    failed = sum(not c.ok for c in checks)
    verdict = "nothing would fail" if not failed else f"{failed} would fail"
    return (
        f"preflight of profile {profile}: {len(checks)} checks, {verdict} "
        f"({seconds:.0f} s; nothing stored)"
    )
