"""The LLM experiments of figs 7–11 as lists of runs, and a driver that runs such a list.

Each experiment (:data:`EXPERIMENTS`) turns a profile (``quick``: tiny models, CPU minutes;
``full``: the GPU-scale version of the same sweep) into a list of :class:`Job` — a run
config plus how to train it (``train``: :func:`smallinit.llm.training.train.train`; ``traced``:
:func:`smallinit.llm.training.dynamics.train_traced`, which also records probes over training) and
tags that say what the run stands for (size, γ, scheme, seed, ε setting, gating).
Experiments share runs: identical configs have identical run-store keys, so e.g. the
smallest model's γ = 0.5 and γ = 1 runs serve figs 7, 9 and 11.

:func:`run_jobs` runs a list through the run store: finished runs are reused, stale ones
resumed, so a half-finished sweep picks up where it stopped. It can spread the missing runs
over worker processes (one torch thread each).

Fig 8's ε follows SPEC §5: a width-d model sits on the same side of RMSNorm saturation as a
width-D model with ε_D when both have the same threshold γ_ε = ln(1/ε)/(2 ln d), i.e.
ε_d = d^{−2 γ_ε(D, ε_D)} (``theory.transformer.matching_eps`` at γ = γ_ε(D, ε_D)).
"""

from __future__ import annotations

import logging
import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from smallinit.config import canonical_json, config_from_dict, config_to_dict, load_config
from smallinit.errors import ConfigError, check_choice
from smallinit.llm.config import RunConfig
from smallinit.progress import progress
from smallinit.runs import Run, RunStore

log = logging.getLogger(__name__)
PROFILES = ("quick", "full")

# ----------------------------------------------------------------------------- profiles
_BASE = {
    "quick": [
        "model.vocab_size=512", "model.context=64", "model.n_layers=2", "model.n_heads=4",
        "data.synthetic_items=8000", "data.synthetic_val_items=1000",
        "data.synthetic_facts=100",
        "train.steps=300", "train.batch_size=16", "train.warmup=20", "train.threads=1",
        "train.log_every=10", "train.eval_every=0", "train.checkpoint_every=100",
        "train.device=cpu", "eval.answer_items=200", "eval.token_windows=192",
    ],
    "full": [
        "model.vocab_size=4096", "model.context=256", "model.n_layers=6", "model.n_heads=8",
        "data.synthetic_items=400000", "data.synthetic_val_items=4000",
        "data.synthetic_facts=2000",
        "train.steps=6000", "train.batch_size=64", "train.warmup=300", "train.threads=0",
        "train.log_every=20", "train.eval_every=500", "train.checkpoint_every=500",
        "eval.answer_items=1000", "eval.token_windows=512",
    ],
}


@dataclass(frozen=True)
class Plan:
    """The grids of every experiment for one profile."""

    sizes: tuple[int, ...]
    gammas: tuple[float, ...]
    baselines: tuple[str, ...]
    seeds: tuple[int, ...]  # fig 7
    critical_seeds: tuple[int, ...]  # figs 9 and 11 (smallest size)
    eps_gammas: tuple[float, ...]  # fig 8 (0.5, 1 and one beyond both γ_ε)
    eps_seeds: tuple[int, ...] = (0,)  # figs 8 and 10
    eps_nominal: tuple[float, ...] = (1e-5, 1e-12)  # a large model's ε: standard, relaxed
    d_large: int = 2048  # the large model fig 8's small one imitates
    dynamics_gammas: tuple[float, ...] = (0.5, 1.0)
    dynamics_steps: int | None = None  # fig 10's run length (None: reuse fig 8's runs)
    workers: int = 1


PLANS = {
    "quick": Plan(sizes=(32, 48, 64), gammas=(0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.3),
                  baselines=("nanogpt", "fixed:0.02"), seeds=(0, 1),
                  critical_seeds=(0, 1, 2), eps_gammas=(0.5, 1.0, 2.0), eps_seeds=(0, 1),
                  dynamics_steps=900, workers=2),
    "full": Plan(sizes=(256, 512, 1024), gammas=(0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
                                                 1.1, 1.3),
                 baselines=("nanogpt", "fixed:0.02"), seeds=(0, 1), critical_seeds=(0, 1, 2),
                 eps_gammas=(0.5, 1.0, 2.0), eps_seeds=(0, 1), workers=1),
}


def base_config(profile: str, d_model: int, overrides: list[str] | tuple[str, ...] = ()
                ) -> RunConfig:
    """The profile's run config at width ``d_model`` (d_ff by the model's default rule)."""
    check_choice("profile", profile, PROFILES)
    return load_config(RunConfig, None, [*_BASE[profile], f"model.d_model={d_model}",
                                         *overrides])


def gamma_init(gamma: float) -> str:
    return f"gamma:{gamma:g}"


def small_eps(d: int, d_large: int, eps_large: float) -> float:
    """ε for width d with the same γ_ε as width ``d_large`` at ``eps_large`` (module doc)."""
    from smallinit.theory.transformer import matching_eps, rmsnorm_gamma_threshold

    g = rmsnorm_gamma_threshold(d_large, eps_large)
    return float(f"{matching_eps(d, d_large, g, eps_large):.4g}")


# ----------------------------------------------------------------------------- jobs
@dataclass
class Job:
    """One run of an experiment: how to train it, its config, what it stands for."""

    how: str  # "train" or "traced"
    cfg: RunConfig
    tags: dict[str, Any] = field(default_factory=dict)

    @property
    def ident(self) -> tuple[str, str]:
        from smallinit.llm.training import dynamics, train
        from smallinit.runs import config_key

        kind, version = ((train.KIND, train.VERSION) if self.how == "train"
                         else (dynamics.KIND, dynamics.VERSION))
        return kind, config_key(kind, self.cfg, version)


def _with(cfg: RunConfig, **changes: Any) -> RunConfig:
    data = config_to_dict(cfg)
    for key, value in changes.items():
        node = data
        *parents, leaf = key.split("__")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return config_from_dict(RunConfig, data)


def gamma_sweep(profile: str, plan: Plan) -> list[Job]:
    """Fig 7: every size × (γ grid + baselines) × seeds, same steps and batch per size."""
    jobs = []
    for d in plan.sizes:
        base = base_config(profile, d)
        schemes = [(gamma_init(g), g) for g in plan.gammas] + [(b, None) for b in plan.baselines]
        for init, g in schemes:
            for seed in plan.seeds:
                jobs.append(Job("train", _with(base, init=init, seed=seed),
                                {"size": d, "init": init, "gamma": g, "seed": seed}))
    return jobs


def critical_init(profile: str, plan: Plan) -> list[Job]:
    """Fig 9: the smallest size, γ grid × ``critical_seeds``."""
    d = plan.sizes[0]
    base = base_config(profile, d)
    return [Job("train", _with(base, init=gamma_init(g), seed=s),
                {"size": d, "init": gamma_init(g), "gamma": g, "seed": s})
            for g in plan.gammas for s in plan.critical_seeds]


def token_gains(profile: str, plan: Plan) -> list[Job]:
    """Fig 11: matched γ = 0.5 and γ = 1 models (smallest size) for each critical seed."""
    return [j for j in critical_init(profile, plan) if j.tags["gamma"] in (0.5, 1.0)]


def eps_gating(profile: str, plan: Plan) -> list[Job]:
    """Fig 8: (ε standard, relaxed) × (gate off, on) × ``eps_gammas`` × ``eps_seeds``, traced,
    smallest size."""
    d = plan.sizes[0]
    base = base_config(profile, d)
    jobs = []
    for eps_name, nominal in zip(("standard", "relaxed"), plan.eps_nominal, strict=True):
        eps = small_eps(d, plan.d_large, nominal)
        for gated in (False, True):
            for g in plan.eps_gammas:
                for seed in plan.eps_seeds:
                    cfg = _with(base, init=gamma_init(g), seed=seed, model__norm_eps=eps,
                                model__gated_attention=gated)
                    jobs.append(Job("traced", cfg, {
                        "size": d, "gamma": g, "init": gamma_init(g), "seed": seed,
                        "eps_setting": eps_name, "eps_nominal": nominal, "eps": eps,
                        "gated": gated, "d_large": plan.d_large}))
    return jobs


def condense_expand(profile: str, plan: Plan) -> list[Job]:
    """Fig 10: fig 8's standard-ε, ungated traced runs at ``dynamics_gammas`` — trained for
    ``dynamics_steps`` instead when the plan sets it (to see past the condensation)."""
    jobs = [j for j in eps_gating(profile, plan)
            if j.tags["eps_setting"] == "standard" and not j.tags["gated"]
            and j.tags["gamma"] in plan.dynamics_gammas]
    if plan.dynamics_steps is None:
        return jobs
    return [Job("traced", _with(j.cfg, train__steps=plan.dynamics_steps), dict(j.tags))
            for j in jobs]


EXPERIMENTS: dict[str, Callable[[str, Plan], list[Job]]] = {
    "gamma-sweep": gamma_sweep,
    "eps-gating": eps_gating,
    "critical-init": critical_init,
    "condense-expand": condense_expand,
    "token-gains": token_gains,
}
FIGURE_OF = {"gamma-sweep": 7, "eps-gating": 8, "critical-init": 9, "condense-expand": 10,
             "token-gains": 11}


def experiment_jobs(name: str, profile: str) -> list[Job]:
    """The jobs of experiment ``name`` (or ``all``, deduplicated) at ``profile``."""
    check_choice("profile", profile, PROFILES)
    if name == "all":
        jobs, seen = [], set()
        for fn in EXPERIMENTS.values():
            for job in fn(profile, PLANS[profile]):
                if job.ident not in seen:
                    seen.add(job.ident)
                    jobs.append(job)
        return jobs
    check_choice("experiment", name, [*EXPERIMENTS, "all"])
    return EXPERIMENTS[name](profile, PLANS[profile])


# ----------------------------------------------------------------------------- driver
_FORCED_HERE: set[tuple[str, tuple[str, str]]] = set()


def _execute(how: str, cfg_data: dict, runs_dir: str, force: bool) -> str:
    """Worker body: train one job; returns its run directory."""
    cfg = config_from_dict(RunConfig, cfg_data)
    if how == "train":
        from smallinit.llm.training.train import train

        return str(train(cfg, runs_dir=runs_dir, force=force).path)
    from smallinit.llm.training.dynamics import train_traced

    return str(train_traced(cfg, runs_dir=runs_dir, force=force).path)


def _run_of(store: RunStore, job: Job) -> Run:
    from smallinit.llm.training import dynamics, train

    kind, version = ((train.KIND, train.VERSION) if job.how == "train"
                     else (dynamics.KIND, dynamics.VERSION))
    return store.run(kind, job.cfg, version=version)


def run_jobs(jobs: list[Job], store: RunStore | None = None, *, force: bool = False,
             workers: int = 1) -> list[tuple[Job, Run]]:
    """Run every job that is not finished yet (all of them with ``force``, but each run at
    most once per process, so figures sharing runs do not recompute them in turn) and
    return (job, run) pairs in the given order. Jobs with equal configs run once. A job whose
    training raises is recorded in its run (state ``failed``) and the others go on."""
    if workers < 1:
        raise ConfigError(f"workers={workers} is not allowed; it must be >= 1")
    store = store or RunStore()
    unique: dict[tuple[str, str], Job] = {}
    for job in jobs:
        unique.setdefault(job.ident, job)
    todo = [j for j in unique.values()
            if not _finished(_run_of(store, j))
            or force and (str(store.root), j.ident) not in _FORCED_HERE]
    if force:  # figures share runs: one forced recomputation per run and process
        _FORCED_HERE.update((str(store.root), j.ident) for j in todo)
    log.info("%d runs, %d to compute", len(unique), len(todo))
    if todo:
        from smallinit.llm.data import corpus as corpus_mod

        corpora = {canonical_json([config_to_dict(j.cfg.data), j.cfg.model.vocab_size]):
                   (j.cfg.data, j.cfg.model.vocab_size) for j in todo}
        for data, vocab in corpora.values():
            corpus_mod.prepare(data, vocab)  # once, before workers read it
        root = str(store.root)
        bar = progress(total=len(todo), desc="sweep", unit="run")
        with bar:
            if workers == 1 or len(todo) == 1:
                for job in todo:
                    _guarded(job, lambda j=job: _execute(j.how, config_to_dict(j.cfg), root,
                                                         force))
                    bar.update(1)
            else:
                ctx = multiprocessing.get_context("spawn")
                with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
                    futures = {pool.submit(_execute, j.how, config_to_dict(j.cfg), root,
                                           force): j for j in todo}
                    for fut in as_completed(futures):
                        _guarded(futures[fut], fut.result)
                        bar.update(1)
    return [(job, _run_of(store, job)) for job in jobs]


def _finished(run: Run) -> bool:
    """Done, or failed for good (the store reuses both)."""
    state = run.state
    return state == "done" or (state == "failed" and bool(run.status().get("final")))


def _guarded(job: Job, call: Callable[[], Any]) -> None:
    try:
        call()
    except (ConfigError, BrokenProcessPool):
        raise
    except Exception as err:  # recorded in the run's status by the store
        log.error("run %s failed: %s: %s", job.tags, type(err).__name__, err)


def run_experiment(name: str, profile: str, store: RunStore | None = None, *,
                   force: bool = False, workers: int | None = None) -> list[tuple[Job, Run]]:
    """:func:`experiment_jobs` then :func:`run_jobs` (workers: the profile's default)."""
    jobs = experiment_jobs(name, profile)
    return run_jobs(jobs, store, force=force, workers=workers or PLANS[profile].workers)


def done_runs(pairs: list[tuple[Job, Run]]) -> list[tuple[Job, Run]]:
    """The pairs whose run finished (failed runs are left out and logged)."""
    out = []
    for job, run in pairs:
        if run.done:
            out.append((job, run))
        else:
            log.warning("leaving out %s: run %s is %s", job.tags, run.path, run.state)
    return out
