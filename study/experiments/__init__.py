"""The experiments behind the paper figures: one module each, and this registry of them.

An experiment (:class:`~smallinit.study.experiments.experiment.Experiment`, one module of
this package) is a plain function from a profile (:mod:`smallinit.core.profiles`) to the list of
its run specs (:class:`smallinit.core.jobs.RunSpec`); a spec knows how to compute its run. The
figure driver (:mod:`smallinit.study.figs`) computes each figure's runs once through the one job
driver (:func:`smallinit.core.jobs.run_specs`) and hands them to the figure. :func:`plan` lists
every run of a profile without computing anything (``smallinit figs --plan``);
:func:`existing` looks the runs up as the store holds them (``smallinit claims``).
"""

from __future__ import annotations

from typing import Any

from smallinit.core import profiles
from smallinit.core.config import canonical_json, config_to_dict
from smallinit.core.errors import ConfigError
from smallinit.core.jobs import Results, RunSpec, chosen_population
from smallinit.core.store import RunStore
from smallinit.llm.training import cost as cost
from smallinit.study import measured_mfu
from smallinit.study.experiments import (
    anchor_scan,
    compare,
    condense,
    condense_expand,
    critical_init,
    diagonal,
    eps_gating,
    gain_scaling,
    gamma_sweep,
    initial_condensation,
    rd_vs_width,
    token_gains,
    toy_scan,
)
from smallinit.study.experiments.experiment import Experiment

_ALL = [
    m.EXPERIMENT
    for m in (
        toy_scan,
        rd_vs_width,
        condense,
        initial_condensation,
        diagonal,
        compare,
        anchor_scan,
        gamma_sweep,
        eps_gating,
        critical_init,
        condense_expand,
        token_gains,
        gain_scaling,
    )
]
EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in _ALL}


def get(name: str) -> Experiment:
    if name not in EXPERIMENTS:
        raise ConfigError(
            f"experiment {name!r} does not exist; choose from {', '.join(EXPERIMENTS)}"
        )
    return EXPERIMENTS[name]


def of_figure(number: int) -> list[Experiment]:
    """The experiments figure ``number`` draws (none for a theory-only figure)."""
    return [e for e in _ALL if number in e.figures]


def specs(name: str, profile: str) -> list[RunSpec]:
    """Experiment ``name``'s runs at ``profile``, without computing anything."""
    profiles.path(profile)
    return get(name).specs(profile)


def existing(name: str, profile: str, store: RunStore | None = None) -> Results:
    """Experiment ``name``'s runs at ``profile`` as the store holds them now: nothing is
    computed or written (runs that are not done are in ``failed()``)."""
    the_specs = specs(name, profile)
    store = store or RunStore()
    return Results(the_specs, [s.run_of(store) for s in the_specs])


# ----------------------------------------------------------------------------- plan
def summary(spec: RunSpec) -> str:
    """A short description of a run's config for listings."""
    if spec.tags:
        return " ".join(f"{k}={v}" for k, v in spec.tags.items())
    data = config_to_dict(spec.config)
    short = {k: v for k, v in data.items() if not isinstance(v, dict)}
    text = canonical_json(short)
    return text if len(text) <= 100 else text[:97] + "..."


def planned(
    profile: str, figures: list[int] | None = None
) -> list[tuple[int, Experiment, RunSpec, bool]]:
    """Every run of the chosen figures at ``profile`` as (figure, experiment, spec, inner),
    figure by figure: an experiment's own runs, then the runs they compute inside
    themselves (compare's transformers, ``inner`` True) where it has runs of its own at
    ``profile``. Nothing is computed."""
    out = []
    for number in sorted(figures or {n for e in _ALL for n in e.figures}):
        for experiment in of_figure(number):
            listed = [(spec, False) for spec in specs(experiment.name, profile)]
            if listed:  # an experiment the profile cuts computes no inner runs either
                listed += [(spec, True) for spec in experiment.inner(profile)]
            out += [(number, experiment, spec, inner) for spec, inner in listed]
    return out


def plan(
    profile: str, figures: list[int] | None = None, *, population: str | None = None
) -> list[dict[str, Any]]:
    """Every run of the chosen figures at ``profile`` (:func:`planned`): one row per (figure,
    experiment, run) with kind, key, a config summary and ``inner``. A transformer run also
    gets its ``cost`` (:func:`smallinit.llm.training.cost.run_cost`: parameters, tokens,
    training FLOPs, peak memory, H200 hours); other runs ``cost: None``. ``population``:
    the job driver's population key of each run (None: trains alone), for ``population``
    mode (:func:`smallinit.core.jobs.chosen_population`; a key one run alone has is
    dropped). Nothing is computed."""
    mode = chosen_population(population)
    rows = []
    for number, experiment, spec, inner in planned(profile, figures):
        the_cost = cost.run_cost(spec.config)
        rows.append(
            {
                "figure": number,
                "experiment": experiment.name,
                "kind": spec.kind,
                "key": spec.key,
                "summary": summary(spec),
                "inner": inner,
                "cost": the_cost.as_dict() if the_cost else None,
                "population": _population(spec, mode),
            }
        )
    members: dict[str, set[str]] = {}
    for r in rows:
        if r["population"]:
            members.setdefault(r["population"], set()).add(r["key"])
    for r in rows:
        if r["population"] and len(members[r["population"]]) < 2:
            r["population"] = None
    return rows


def _population(spec: RunSpec, mode: str) -> str | None:
    """The population a run of the plan joins, as ``<spec type>:<population key>`` (the job
    driver groups runs by both), or None. A run whose config names the CUDA device
    (``train.device = "cuda"``) is planned as it trains there: in ``auto`` mode it joins
    its population on a machine without a GPU too."""
    train = getattr(spec.config, "train", None)
    if mode == "auto" and getattr(train, "device", None) == "cuda":
        mode = "on"
    key = spec.population_key(mode) if mode != "off" else None
    return f"{type(spec).__name__}:{key}" if key else None


def plan_totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals over the distinct runs of :func:`plan` rows (a run shared by figures counts
    once): runs, transformer runs, their FLOPs and H200 hours at the stated MFU, at a
    small model's published MFU and at the MFU the newest committed GPU check measured
    (``measured``: :mod:`smallinit.study.measured_mfu`, with its file; None where none
    did), and the largest peak-memory estimate; with the formula and the figures it
    assumes."""
    distinct: dict[tuple[str, str], dict[str, Any] | None] = {}
    for r in rows:
        distinct.setdefault((r["kind"], r["key"]), r["cost"])
    costs = [c for c in distinct.values() if c is not None]
    groups: dict[str, set[str]] = {}
    for r in rows:
        if r.get("population"):
            groups.setdefault(r["population"], set()).add(r["key"])
    return {
        "runs": len(distinct),
        "transformer_runs": len(costs),
        "populations": len(groups),
        "in_populations": sum(map(len, groups.values())),
        "flops": sum(c["flops"] for c in costs),
        "h200_hours": sum(c["h200_hours"] for c in costs),
        "h200_hours_small_mfu": sum(c["h200_hours_small_mfu"] for c in costs),
        "small_mfu": cost.SMALL_MODEL_MFU,
        "small_mfu_source": cost.SMALL_MFU_SOURCE,
        "measured": measured_mfu.hours(
            sum(c["flops"] for c in costs), measured_mfu.newest(specs("gamma-sweep", "full")[0])
        ),
        "max_memory_bytes": max((c["memory_bytes"] for c in costs), default=0),
        "mfu": cost.MFU,
        "peak_flops": cost.H200_PEAK_BF16_DENSE,
        "gpu_memory_gib": cost.H200_MEMORY_GIB,
        "formula": cost.FORMULA,
        "sources": cost.SOURCES,
        "peak_source": cost.PEAK_SOURCE,
    }
