"""The experiment registry: every experiment behind the paper figures, by name.

An :class:`Experiment` turns a profile (:mod:`smallinit.profiles`, one TOML table per
experiment) into its list of :class:`~smallinit.jobs.Job` without running anything;
:func:`results` hands that list to the one job driver (:func:`smallinit.jobs.run_jobs`),
which computes the missing runs through the run store and returns a
:class:`~smallinit.jobs.Results`. Figure scripts ask :func:`results` for their experiments
at ``ctx.profile`` and only draw; :func:`plan` lists every run of a profile
(``smallinit figs --plan``); :func:`existing` looks the runs up without computing any
(``smallinit claims``).

The toy phase scan keeps its own engine (one run computes the whole grid); its grid comes
from the profile like every other experiment's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from smallinit import profiles
from smallinit.compare import config as compare_config
from smallinit.compare import run as compare_run
from smallinit.config import canonical_json, config_to_dict
from smallinit.errors import ConfigError, RunFailed
from smallinit.jobs import Job, Results, run_jobs
from smallinit.llm.experiments import anchor, sweeps
from smallinit.llm.training import compute as cost
from smallinit.runs import Run, RunStore
from smallinit.toy import condense, diagonal, scan
from smallinit.toy import initial_condensation as ic

HERE = "smallinit.experiments"


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One experiment: what it is, which figures draw it, how a profile makes its jobs."""

    name: str
    figures: tuple[int, ...]
    about: str
    jobs: Callable[[str], list[Job]]
    #: worker processes the profile pins (None: every core, :func:`smallinit.jobs.run_jobs`)
    workers: Callable[[str], int | None] = lambda profile: None
    #: runs that its jobs compute inside themselves (listed by :func:`plan` only)
    inner: Callable[[str], list[Job]] = lambda profile: []


# ----------------------------------------------------------------------------- toy
def _toy_job(kind: str, version: str, config: Any, entry: str, **tags: Any) -> Job:
    return Job(kind, version, config, f"{HERE}:{entry}", tags)


def scan_config(profile: str, table: str = "toy-scan"):
    """A :class:`~smallinit.toy.scan.ScanConfig` from a profile table."""
    return scan.profile_config(profile, table)


def _toy_scan_jobs(table: str) -> Callable[[str], list[Job]]:
    def jobs(profile: str) -> list[Job]:
        return [_toy_job(scan.KIND, scan.VERSION, scan_config(profile, table), "run_toy_scan")]

    return jobs


def run_toy_scan(cfg, store: RunStore, force: bool):
    return scan.run_scan(cfg, store, force=force)


def _condense_jobs(profile: str) -> list[Job]:
    cfg = profiles.merged(condense.CondenseConfig(), profiles.section(profile, "condense"),
                          where=f"{profile}.condense")
    return [_toy_job(condense.KIND, condense.VERSION, cfg, "run_condense")]


def run_condense(cfg, store: RunStore, force: bool):
    return condense.run(cfg, store, force=force)


def _initial_condensation_jobs(profile: str) -> list[Job]:
    table = profiles.section(profile, "initial-condensation")
    activations = table.pop("activations", ["tanh"])
    return [_toy_job(ic.KIND, ic.VERSION,
                     profiles.merged(ic.InitialCondensationConfig(), {**table, "activation": a},
                                     where=f"{profile}.initial-condensation"),
                     "run_initial_condensation", activation=a) for a in activations]


def run_initial_condensation(cfg, store: RunStore, force: bool):
    return ic.run(cfg, store, force=force)


def diagonal_alphas(profile: str) -> tuple[float, ...]:
    """The α grid of the diagonal net: ``np.logspace(start, stop, num)[::every]``."""
    import numpy as np

    grid = profiles.section(profile, "diagonal")["alpha_grid"]
    alphas = np.logspace(grid["start"], grid["stop"], int(grid["num"]))[::int(grid.get("every",
                                                                                         1))]
    return tuple(float(a) for a in alphas)


def _diagonal_jobs(profile: str) -> list[Job]:
    table = profiles.section(profile, "diagonal")
    jobs = []
    for depth in table["depths"]:
        cfg = profiles.merged(diagonal.DiagonalConfig(), {
            "alphas": list(diagonal_alphas(profile)), "depth": depth, **table["problem"]},
            where=f"{profile}.diagonal")
        jobs.append(_toy_job(diagonal.KIND, diagonal.VERSION, cfg, "run_diagonal",
                             depth=depth))
    return jobs


def run_diagonal(cfg, store: RunStore, force: bool):
    return diagonal.run(cfg, store, force=force)


# ----------------------------------------------------------------------------- compare
def _compare_jobs(profile: str) -> list[Job]:
    return [_toy_job(compare_run.KIND, compare_run.VERSION,
                     compare_config.profile_config(profile), "run_compare")]


def _compare_inner(profile: str) -> list[Job]:
    return compare_run.llm_jobs(compare_config.profile_config(profile))


def run_compare(cfg, store: RunStore, force: bool):
    return compare_run.run_compare(cfg, store, force=force)


# ----------------------------------------------------------------------------- llm
def _anchor_jobs(profile: str) -> list[Job]:
    base, scan = anchor.load_profile(profile)
    return anchor.scan_jobs(base, scan) + anchor.mechanism_jobs(base, scan)


def _sweep_jobs(name: str) -> Callable[[str], list[Job]]:
    def jobs(profile: str) -> list[Job]:
        return sweeps.experiment_jobs(name, profile)

    return jobs


def _sweep_workers(profile: str) -> int | None:
    return sweeps.plan(profile).workers


_LIST = [
    Experiment("toy-scan", (1,), "two-layer ReLU net: S_w over the (γ, γ') grid",
               _toy_scan_jobs("toy-scan")),
    Experiment("rd-vs-width", (2,), "two-layer ReLU net: RD against width at γ' = 0",
               _toy_scan_jobs("rd-vs-width")),
    Experiment("condense", (3,), "two-layer ReLU net: condensation maps over (γ, γ')",
               _condense_jobs),
    Experiment("initial-condensation", (3,), "initial condensation per activation",
               _initial_condensation_jobs),
    Experiment("diagonal", (4,), "diagonal linear net trained from init scale α",
               _diagonal_jobs),
    Experiment("compare", (5,), "toy-to-transformer comparison (smallinit compare)",
               _compare_jobs, inner=_compare_inner),
    Experiment("anchor-scan", (6,), "anchor task: (γ, depth) and (γ, λ) grids and the two "
               "mechanism models", _anchor_jobs),
    Experiment("gamma-sweep", (7,), "LLM: γ grid × sizes + baselines",
               _sweep_jobs("gamma-sweep"), _sweep_workers),
    Experiment("eps-gating", (8,), "LLM: RMSNorm ε × gated attention, traced",
               _sweep_jobs("eps-gating"), _sweep_workers),
    Experiment("critical-init", (9,), "LLM: γ grid × seeds at the smallest size",
               _sweep_jobs("critical-init"), _sweep_workers),
    Experiment("condense-expand", (10,), "LLM: traced γ = 0.5 and 1 runs over training",
               _sweep_jobs("condense-expand"), _sweep_workers),
    Experiment("token-gains", (11,), "LLM: matched γ = 0.5 / γ = 1 models per seed",
               _sweep_jobs("token-gains"), _sweep_workers),
    Experiment("gain-scaling", (12,), "LLM: γ = 0.5 / 1 gain against size under ε × gating",
               _sweep_jobs("gain-scaling"), _sweep_workers),
]
EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in _LIST}


def get(name: str) -> Experiment:
    if name not in EXPERIMENTS:
        raise ConfigError(f"experiment {name!r} does not exist; choose from "
                          f"{', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[name]


def of_figure(number: int) -> list[Experiment]:
    """The experiments figure ``number`` draws (none for a theory-only figure)."""
    return [e for e in _LIST if number in e.figures]


def jobs(name: str, profile: str) -> list[Job]:
    """Experiment ``name``'s jobs at ``profile``, without running anything."""
    profiles.path(profile)
    return get(name).jobs(profile)


def results(name: str, profile: str, store: RunStore | None = None, *, force: bool = False,
            workers: int | None = None, executor: str | None = None) -> Results:
    """Experiment ``name`` at ``profile``: missing runs computed by the job driver
    (``workers``: given, else the profile's pin, else every core; ``executor``: local or
    ray, :func:`smallinit.jobs.run_jobs`)."""
    experiment = get(name)
    the_jobs = jobs(name, profile)
    return run_jobs(the_jobs, store, force=force,
                    workers=workers or experiment.workers(profile), executor=executor,
                    desc=name)


def compute(names: list[str], profile: str, store: RunStore | None = None, *,
            force: bool = False, workers: int | None = None,
            executor: str | None = None) -> Results:
    """Every run the experiments ``names`` need at ``profile`` in one call of the job
    driver, so independent runs of different figures run side by side: the runs their
    jobs compute inside themselves (compare's transformers) and the jobs of the
    experiments that have none. Experiments with inner runs are left to :func:`results`,
    which then finds those runs done. ``workers``: given, else the smallest pin among the
    experiments (a profile that pins one worker keeps it), else every core."""
    chosen = [get(n) for n in dict.fromkeys(names)]
    the_jobs: list[Job] = []
    for experiment in chosen:
        inner = experiment.inner(profile)
        the_jobs += inner if inner else jobs(experiment.name, profile)
    pins = [p for p in (e.workers(profile) for e in chosen) if p is not None]
    return run_jobs(the_jobs, store, force=force, workers=workers or min(pins, default=None),
                    executor=executor, desc="runs of the figures")


def existing(name: str, profile: str, store: RunStore | None = None) -> Results:
    """Experiment ``name``'s jobs at ``profile`` with their runs as the store holds them
    now: nothing is computed or written (runs that are not done are in ``failed()``)."""
    the_jobs = jobs(name, profile)
    store = store or RunStore()
    return Results(the_jobs, [job.run_of(store) for job in the_jobs])


def single(results: Results) -> Run:
    """The one run of a one-run experiment; a run that did not finish raises RunFailed
    with its recorded reason."""
    if len(results.runs) != 1:
        raise ValueError(f"expected one run, got {len(results.runs)}")
    run = results.runs[0]
    if not run.done:
        raise RunFailed(f"{run.kind} run {run.path} is {run.state}: "
                        f"{run.status().get('reason')}")
    return run


def outputs(run: Run) -> dict[str, Any]:
    """A finished toy run's summary and arrays in one dict (what its module returns)."""
    return {**run.summary, **run.arrays()}


# ----------------------------------------------------------------------------- plan
def summary(job: Job) -> str:
    """A short description of a job's config for listings."""
    if job.tags:
        return " ".join(f"{k}={v}" for k, v in job.tags.items())
    data = config_to_dict(job.config)
    short = {k: v for k, v in data.items() if not isinstance(v, dict)}
    text = canonical_json(short)
    return text if len(text) <= 100 else text[:97] + "..."


def plan(profile: str, figures: list[int] | None = None) -> list[dict[str, Any]]:
    """Every run of the chosen figures at ``profile``: one row per (figure, experiment,
    job) with kind, key and a config summary; runs that a job computes inside itself
    (compare's transformers) follow it with ``inner`` set. A transformer run also gets its
    ``cost`` (:func:`smallinit.llm.training.compute.run_cost`: parameters, tokens,
    training FLOPs, peak memory, H200 hours); other runs ``cost: None``. Nothing is
    computed."""
    rows = []
    for number in sorted(figures or {n for e in _LIST for n in e.figures}):
        for experiment in of_figure(number):
            listed = [(job, False) for job in jobs(experiment.name, profile)]
            listed += [(job, True) for job in experiment.inner(profile)]
            for job, inner in listed:
                the_cost = cost.run_cost(job.config)
                rows.append({"figure": number, "experiment": experiment.name,
                             "kind": job.kind, "key": job.key, "summary": summary(job),
                             "inner": inner,
                             "cost": the_cost.as_dict() if the_cost else None})
    return rows


def plan_totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals over the distinct runs of :func:`plan` rows (a run shared by figures counts
    once): runs, transformer runs, their FLOPs and H200 hours at the stated MFU, and the
    largest peak-memory estimate; with the formula and the figures it assumes."""
    distinct: dict[tuple[str, str], dict[str, Any] | None] = {}
    for r in rows:
        distinct.setdefault((r["kind"], r["key"]), r["cost"])
    costs = [c for c in distinct.values() if c is not None]
    return {"runs": len(distinct), "transformer_runs": len(costs),
            "flops": sum(c["flops"] for c in costs),
            "h200_hours": sum(c["h200_hours"] for c in costs),
            "max_memory_bytes": max((c["memory_bytes"] for c in costs), default=0),
            "mfu": cost.MFU, "peak_flops": cost.H200_PEAK_BF16_DENSE,
            "gpu_memory_gib": cost.H200_MEMORY_GIB,
            "formula": cost.FORMULA, "sources": cost.SOURCES, "peak_source": cost.PEAK_SOURCE}
