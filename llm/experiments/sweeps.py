"""The LLM experiments of figs 7–12 as lists of runs.

Each experiment (:data:`EXPERIMENTS`) turns a profile's ``[llm-sweeps]`` table
(:mod:`smallinit.profiles`; ``quick``: tiny models, CPU minutes; ``full``: the GPU-scale
version of the same sweep) into a list of :class:`smallinit.jobs.Job` — a run config plus
how to train it (``train``: :func:`smallinit.llm.training.train.train`; ``traced``:
:func:`smallinit.llm.training.dynamics.train_traced`, which also records probes over training) and
tags that say what the run stands for (size, γ, scheme, seed, ε setting, gating).
Experiments share runs: identical configs have identical run-store keys, so e.g. the
smallest model's γ = 0.5 and γ = 1 runs serve figs 7, 9 and 11.

:func:`smallinit.jobs.run_jobs` (the one job driver) runs a list through the run store:
finished runs are reused, stale ones resumed, so a half-finished sweep picks up where it
stopped. It can spread the missing runs over worker processes (one torch thread each).

Fig 8's ε follows docs/science.md §5: a width-d model sits on the same side of RMSNorm saturation
as a width-D model with ε_D when both have the same threshold γ_ε = ln(1/ε)/(2 ln d), i.e.
ε_d = d^{−2 γ_ε(D, ε_D)} (``theory.transformer.matching_eps`` at γ = γ_ε(D, ε_D)).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from smallinit import profiles
from smallinit.config import canonical_json, check_fields, config_from_dict, config_to_dict
from smallinit.errors import check_choice
from smallinit.jobs import Job, Results, run_jobs
from smallinit.llm.config import RunConfig
from smallinit.llm.data import corpus as corpus_mod
from smallinit.llm.training import dynamics, train
from smallinit.llm.training.dynamics import train_traced
from smallinit.runs import RunStore
from smallinit.theory.transformer import matching_eps, rmsnorm_gamma_threshold

log = logging.getLogger(__name__)
SECTION = "llm-sweeps"  # the profiles' table of these experiments


# ----------------------------------------------------------------------------- profiles
@dataclass(frozen=True)
class Plan:
    """The grids of every experiment for one profile (``[llm-sweeps.plan]``)."""

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
    workers: int | None = None  # pinned worker count (None: every core, smallinit.jobs)
    #: fig 7's seeds at the γ grid points other than 0.5 and 1 and for the baselines
    #: (None: ``seeds``; the γ = 0.5 / 1 comparison always gets every seed of ``seeds``)
    grid_seeds: tuple[int, ...] | None = None
    #: the size-scaling experiment (fig 12): its sizes (empty: no runs at this profile)
    #: and seeds; ε per size as fig 8's (``eps_nominal`` imitating ``d_large``)
    scaling_sizes: tuple[int, ...] = ()
    scaling_seeds: tuple[int, ...] = (0,)

    def __post_init__(self) -> None:
        check_fields(self, "plan")


def plan(profile: str) -> Plan:
    """The profile's ``[llm-sweeps.plan]``."""
    return config_from_dict(Plan, profiles.section(profile, SECTION).get("plan", {}),
                            where=f"{profile}.{SECTION}.plan")


def base_config(profile: str, d_model: int) -> RunConfig:
    """The profile's ``[llm-sweeps.base]`` run config at width ``d_model`` (d_ff by the
    model's default rule; every other field the RunConfig default)."""
    table = profiles.section(profile, SECTION).get("base", {})
    table.setdefault("model", {})["d_model"] = d_model
    return profiles.merged(RunConfig(), table, where=f"{profile}.{SECTION}.base")


def gamma_init(gamma: float) -> str:
    return f"gamma:{gamma:g}"


def small_eps(d: int, d_large: int, eps_large: float) -> float:
    """ε for width d with the same γ_ε as width ``d_large`` at ``eps_large`` (module doc)."""
    g = rmsnorm_gamma_threshold(d_large, eps_large)
    return float(f"{matching_eps(d, d_large, g, eps_large):.4g}")


# ----------------------------------------------------------------------------- jobs
ENTRIES = {"train": "smallinit.llm.experiments.sweeps:train_job",
           "traced": "smallinit.llm.experiments.sweeps:traced_job"}


def llm_job(how: str, cfg: RunConfig, tags: dict[str, Any]) -> Job:
    """A run of ``cfg`` trained plainly (``train``, kind ``llm-train``) or with probes
    (``traced``, kind ``llm-traced``)."""
    check_choice("how", how, ENTRIES)
    mod = train if how == "train" else dynamics
    return Job(mod.KIND, mod.VERSION, cfg, ENTRIES[how], dict(tags),
               prepare="smallinit.llm.experiments.sweeps:prepare_corpora")


def train_job(cfg: RunConfig, store: RunStore, force: bool):
    return train.train(cfg, runs_dir=store.root, force=force)


def traced_job(cfg: RunConfig, store: RunStore, force: bool):
    return train_traced(cfg, runs_dir=store.root, force=force)


def prepare_corpora(configs: list[RunConfig]) -> None:
    """Build each distinct corpus once, before workers read it."""
    corpora = {canonical_json([config_to_dict(c.data), c.model.vocab_size]):
               (c.data, c.model.vocab_size) for c in configs}
    for data, vocab in corpora.values():
        corpus_mod.prepare(data, vocab)


def _with(cfg: RunConfig, **changes: Any) -> RunConfig:
    data = config_to_dict(cfg)
    for key, value in changes.items():
        node = data
        *parents, leaf = key.split("__")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return config_from_dict(RunConfig, data)


COMPARED = (0.5, 1.0)  # the γ pair every comparison of the study contrasts (fig 7 ... 12)


def gamma_sweep(profile: str, plan: Plan) -> list[Job]:
    """Fig 7: every size × (γ grid + baselines) × seeds, same steps and batch per size (the
    grid points other than γ = 0.5 and 1, and the baselines, at ``grid_seeds`` if set)."""
    jobs = []
    others = plan.seeds if plan.grid_seeds is None else plan.grid_seeds
    for d in plan.sizes:
        base = base_config(profile, d)
        schemes = [(gamma_init(g), g) for g in plan.gammas] + [(b, None) for b in plan.baselines]
        for init, g in schemes:
            for seed in (plan.seeds if g in COMPARED else others):
                jobs.append(llm_job("train", _with(base, init=init, seed=seed),
                                {"size": d, "init": init, "gamma": g, "seed": seed}))
    return jobs


def critical_init(profile: str, plan: Plan) -> list[Job]:
    """Fig 9: the smallest size, γ grid × ``critical_seeds``."""
    d = plan.sizes[0]
    base = base_config(profile, d)
    return [llm_job("train", _with(base, init=gamma_init(g), seed=s),
                {"size": d, "init": gamma_init(g), "gamma": g, "seed": s})
            for g in plan.gammas for s in plan.critical_seeds]


def token_gains(profile: str, plan: Plan) -> list[Job]:
    """Fig 11: matched γ = 0.5 and γ = 1 models (smallest size) for each critical seed."""
    return [j for j in critical_init(profile, plan) if j.tags["gamma"] in (0.5, 1.0)]


def _eps_gating_grid(how: str, profile: str, plan: Plan, d: int, gammas, seeds) -> list[Job]:
    """(ε standard, relaxed) × (gate off, on) × ``gammas`` × ``seeds`` at width ``d``, ε
    imitating ``plan.d_large`` (module doc)."""
    base = base_config(profile, d)
    jobs = []
    for eps_name, nominal in zip(("standard", "relaxed"), plan.eps_nominal, strict=True):
        eps = small_eps(d, plan.d_large, nominal)
        for gated in (False, True):
            for g in gammas:
                for seed in seeds:
                    cfg = _with(base, init=gamma_init(g), seed=seed, model__norm_eps=eps,
                                model__gated_attention=gated)
                    jobs.append(llm_job(how, cfg, {
                        "size": d, "gamma": g, "init": gamma_init(g), "seed": seed,
                        "eps_setting": eps_name, "eps_nominal": nominal, "eps": eps,
                        "gated": gated, "d_large": plan.d_large}))
    return jobs


def eps_gating(profile: str, plan: Plan) -> list[Job]:
    """Fig 8: (ε standard, relaxed) × (gate off, on) × ``eps_gammas`` × ``eps_seeds``, traced,
    smallest size."""
    return _eps_gating_grid("traced", profile, plan, plan.sizes[0], plan.eps_gammas,
                            plan.eps_seeds)


def gain_scaling(profile: str, plan: Plan) -> list[Job]:
    """Fig 12: the gain of small init against size — γ ∈ {0.5, 1} × (ε standard, relaxed)
    × (gate off, on) × ``scaling_seeds`` at each of ``scaling_sizes``, plain runs, ε per
    size chosen as fig 8's (a width-d model with the saturation threshold of ``d_large``).
    At fig 8's size the runs are traced, so that the runs both experiments need train once
    (same config, same kind; a traced run's summary is its plain run's); plain elsewhere.
    No runs when the profile sets no ``scaling_sizes``."""
    jobs = []
    for d in plan.scaling_sizes:
        how = "traced" if d == plan.sizes[0] else "train"
        jobs += _eps_gating_grid(how, profile, plan, d, COMPARED, plan.scaling_seeds)
    return jobs


def condense_expand(profile: str, plan: Plan) -> list[Job]:
    """Fig 10: fig 8's standard-ε, ungated traced runs at ``dynamics_gammas`` — trained for
    ``dynamics_steps`` instead when the plan sets it (to see past the condensation)."""
    jobs = [j for j in eps_gating(profile, plan)
            if j.tags["eps_setting"] == "standard" and not j.tags["gated"]
            and j.tags["gamma"] in plan.dynamics_gammas]
    if plan.dynamics_steps is None:
        return jobs
    return [llm_job("traced", _with(j.cfg, train__steps=plan.dynamics_steps), j.tags)
            for j in jobs]


EXPERIMENTS: dict[str, Callable[[str, Plan], list[Job]]] = {
    "gamma-sweep": gamma_sweep,
    "eps-gating": eps_gating,
    "critical-init": critical_init,
    "condense-expand": condense_expand,
    "token-gains": token_gains,
    "gain-scaling": gain_scaling,
}


def experiment_jobs(name: str, profile: str) -> list[Job]:
    """The jobs of experiment ``name`` (or ``all``, deduplicated) at ``profile``."""
    profiles.path(profile)
    check_choice("experiment", name, [*EXPERIMENTS, "all"])
    the_plan = plan(profile)
    if name != "all":
        return EXPERIMENTS[name](profile, the_plan)
    jobs, seen = [], set()
    for fn in EXPERIMENTS.values():
        for job in fn(profile, the_plan):
            if job.ident not in seen:
                seen.add(job.ident)
                jobs.append(job)
    return jobs


def run_experiment(name: str, profile: str, store: RunStore | None = None, *,
                   force: bool = False, workers: int | None = None,
                   executor: str | None = None) -> Results:
    """:func:`experiment_jobs` through the job driver (workers: given, else the profile's
    pin, else every core; executor: local or ray)."""
    jobs = experiment_jobs(name, profile)
    return run_jobs(jobs, store, force=force, workers=workers or plan(profile).workers,
                    executor=executor, desc=name)
