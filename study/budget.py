"""How long a profile's figures take: each figure's estimated minutes on the cores of the
profile's budget, from the cost model of the job driver's ETA, beside the budget.

**The estimate.** Every distinct run of the plan (:func:`smallinit.study.experiments.planned`)
counts once: a run that several figures plan is charged to the first of them (the lowest
number), and the others list it as shared. A run is expected to take
:func:`smallinit.core.progress.expected_seconds` of its kind and its training FLOPs
(:func:`smallinit.llm.training.cost.training_flops_of`; none for the toy runs), the model
the ETA fits: a + b·FLOPs per kind, or the mean time of a kind without a cost. It is fitted
to the plan's runs that the store holds done on a machine like this one
(:func:`smallinit.core.host.same_machine`; the seconds from a run's start to its finish in
its status), else to the stated reference runs of its kind (:data:`REFERENCE`), else to
every finished run of its class. A run occupies one of ``max(1, cores // threads)`` slots
of the budget's cores (the job driver's rule, :func:`smallinit.core.jobs.default_workers`;
at most the profile's pinned worker count), so a figure's minutes are Σ seconds / slots / 60
over the runs charged to it, and the total is the sum over the figures. What is not a run
is left out: starting the command, drawing the figures and the report page (seconds each),
and slots left idle at the end.

**The budget.** A profile's ``[budget]`` table states ``cores``, ``minutes`` (the whole)
and ``figures`` (each figure's share in minutes, keyed by its number). The table belongs
to the profile that states it (:func:`smallinit.core.profiles.stated`): a profile that
extends another does not take over the base's shares, which would not fit it.
:func:`estimate` marks each figure over its share and a total over the whole.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from smallinit.core import host, profiles
from smallinit.core.errors import ConfigError
from smallinit.core.jobs import RunSpec, default_workers, local_cores
from smallinit.core.progress import expected_seconds
from smallinit.core.store import RunStore
from smallinit.llm.training.cost import training_flops_of
from smallinit.study import experiments

#: Reference runs (kind, training FLOPs or None, seconds) for a kind that this machine has
#: not finished yet: quick's runs at commit d212d91 on a 2-core AMD EPYC (AVX-512), one at
#: a time and one torch thread each, while other jobs shared the two cores (load 2-4). The
#: first run of a corpus includes building it (7.4 and 14.2 s).
REFERENCE: tuple[tuple[str, float | None, float], ...] = (
    ("llm-train", 7.07e9, 2.0),  # d_model 32, 20 steps
    ("llm-train", 1.06e11, 14.2),  # d_model 32, 300 steps (builds the sweeps' corpus)
    ("llm-train", 1.06e11, 7.3),  # d_model 32, 300 steps, probed (fig 8)
    ("llm-train", 2.87e11, 12.2),  # d_model 64, 300 steps
    ("llm-train", 7.27e10, 7.4),  # compare, d_model 32, 240 steps (builds its corpus)
    ("llm-train", 7.26e11, 27.1),  # compare, d_model 128, 240 steps
    ("llm-anchor", 1.13e12, 28.0),  # anchor, 2 layers, 1500 steps
    ("toy-scan", None, 19.0),  # fig 1's scan
    ("toy-scan", None, 8.0),  # fig 2's scan
    ("toy-condense", None, 1.0),
    ("toy-initial-condensation", None, 1.3),
    ("toy-diagonal", None, 1.5),
    ("compare", None, 38.0),  # fig 5's comparison after its transformers (load ~7)
)
DATE_FORMAT = "%Y-%m-%dT%H:%M:%S%z"  # a run status' started / finished (core.lease.now)


@dataclasses.dataclass
class FigureEstimate:
    """One figure's share of the estimate: the distinct runs charged to it, the runs it
    plans that are charged to an earlier figure (``shared``: figure -> count), its
    worker-seconds and its minutes on the budget's cores, and its budget (None: none
    stated)."""

    figure: int
    runs: int
    shared: dict[int, int]
    seconds: float
    minutes: float
    budget: float | None

    @property
    def over(self) -> bool:
        return self.budget is not None and self.minutes > self.budget


@dataclasses.dataclass
class Estimate:
    """The estimate of a profile's figures (module docstring): per figure, the total
    (the sum of the figures' minutes), the budget's whole (None: none stated), the cores,
    the transformer runs and their training FLOPs, and where the rates came from
    (``fitted``: kind -> finished runs of this machine; ``reference``: kinds timed by
    :data:`REFERENCE`)."""

    profile: str
    cores: int
    figures: list[FigureEstimate]
    minutes: float
    budget: float | None
    transformer_runs: int
    flops: float
    fitted: dict[str, int]
    reference: list[str]

    @property
    def over(self) -> bool:
        return self.budget is not None and self.minutes > self.budget

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for f, row in zip(self.figures, out["figures"], strict=True):
            row["over"] = f.over
        out["over"] = self.over
        return out


def budget(profile: str) -> dict[str, Any] | None:
    """The ``[budget]`` the profile states (module docstring), checked: ``cores`` and
    ``minutes`` > 0, ``figures`` a table of figure numbers to minutes ≥ 0 that add up to
    ``minutes`` at most."""
    table = profiles.stated(profile, "budget")
    if table is None:
        return None
    where = f"{profile}.budget"
    unknown = set(table) - {"cores", "minutes", "figures"}
    if unknown:
        raise ConfigError(
            f"{where} has unknown key(s) {', '.join(sorted(unknown))}; "
            "allowed: cores, minutes, figures"
        )
    for key in ("cores", "minutes"):
        value = table.get(key)
        if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"{where}.{key}={value!r} is not allowed; give a number > 0")
    shares = {}
    for number, minutes in table.get("figures", {}).items():
        if not str(number).isdigit() or not isinstance(minutes, int | float) or minutes < 0:
            raise ConfigError(
                f"{where}.figures.{number}={minutes!r} is not allowed; give "
                "a figure number = minutes >= 0"
            )
        shares[int(number)] = float(minutes)
    if sum(shares.values()) > table["minutes"] + 1e-9:
        raise ConfigError(
            f"{where}.figures add up to {sum(shares.values()):g} minutes, more "
            f"than {where}.minutes={table['minutes']:g}"
        )
    return {"cores": int(table["cores"]), "minutes": float(table["minutes"]), "figures": shares}


def run_seconds(status: dict[str, Any]) -> float | None:
    """Seconds from a run's start to its finish (its status), None when either is missing."""
    try:
        start = datetime.strptime(status["started"], DATE_FORMAT)
        end = datetime.strptime(status["finished"], DATE_FORMAT)
    except (KeyError, TypeError, ValueError):
        return None
    return max(0.0, (end - start).total_seconds())


def finished_here(
    specs: Sequence[RunSpec], store: RunStore
) -> list[tuple[str, float | None, float]]:
    """(kind, training FLOPs, seconds) of each of ``specs`` done in ``store`` on a machine
    like this one."""
    out = []
    for spec in specs:
        status = spec.run_of(store).status()
        seconds = run_seconds(status)
        if (
            status.get("state") == "done"
            and seconds is not None
            and host.same_machine(status.get("host"))
        ):
            out.append((spec.kind, training_flops_of(spec.config), seconds))
    return out


def expected(kind: str, flops: float | None, here: list[tuple[str, float | None, float]]) -> float:
    """A run's expected seconds (module docstring): fitted to ``here`` (this machine's
    finished runs) where it holds the run's kind, else to :data:`REFERENCE` where that holds
    it, else to both."""
    for pool in (here, REFERENCE):
        if any(k == kind for k, _, _ in pool):
            return expected_seconds(kind, flops, pool)
    seconds = expected_seconds(kind, flops, [*here, *REFERENCE])
    return 0.0 if seconds is None else seconds


def charged(
    planned: Sequence[tuple[int, Any, RunSpec, bool]],
) -> tuple[dict[tuple[str, str], tuple[int, RunSpec]], dict[int, dict[int, int]]]:
    """Each distinct run with the figure it is charged to (the first that plans it), and per
    figure the runs it plans that are charged to an earlier one (figure -> count)."""
    first: dict[tuple[str, str], tuple[int, RunSpec]] = {}
    shared: dict[int, dict[int, int]] = {}
    seen: dict[int, set[tuple[str, str]]] = {}
    for number, _, spec, _ in planned:
        owner = first.setdefault(spec.ident, (number, spec))[0]
        mine = seen.setdefault(number, set())
        if owner != number and spec.ident not in mine:
            counts = shared.setdefault(number, {})
            counts[owner] = counts.get(owner, 0) + 1
        mine.add(spec.ident)
    return first, shared


def estimate(
    profile: str, figures: list[int] | None = None, store: RunStore | None = None
) -> Estimate:
    """The estimate of ``profile``'s chosen figures (module docstring), on the cores of its
    budget (this machine's where it states none)."""
    planned = experiments.planned(profile, figures)
    the_budget = budget(profile)
    cores = the_budget["cores"] if the_budget else local_cores()
    pins = [
        p for p in {e.name: e.workers(profile) for _, e, _, _ in planned}.values() if p is not None
    ]
    first, shared = charged(planned)
    here = finished_here([spec for _, spec in first.values()], store or RunStore())
    seconds: dict[int, float] = {}
    minutes: dict[int, float] = {}
    runs: dict[int, int] = {}
    flops = []
    for number, spec in first.values():
        cost = training_flops_of(spec.config)
        if cost is not None:
            flops.append(cost)
        took = expected(spec.kind, cost, here)
        slots = min([default_workers([spec], cores), *pins])
        seconds[number] = seconds.get(number, 0.0) + took
        minutes[number] = minutes.get(number, 0.0) + took / slots / 60.0
        runs[number] = runs.get(number, 0) + 1
    shares = the_budget["figures"] if the_budget else {}
    rows = [
        FigureEstimate(
            n,
            runs.get(n, 0),
            shared.get(n, {}),
            seconds.get(n, 0.0),
            minutes.get(n, 0.0),
            shares.get(n),
        )
        for n in sorted(figures or {n for e in experiments.EXPERIMENTS.values() for n in e.figures})
    ]
    fitted: dict[str, int] = {}
    for kind, _, _ in here:
        fitted[kind] = fitted.get(kind, 0) + 1
    kinds = {spec.kind for _, spec in first.values()}
    return Estimate(
        profile,
        cores,
        rows,
        sum(r.minutes for r in rows),
        the_budget["minutes"] if the_budget else None,
        len(flops),
        sum(flops),
        fitted,
        sorted(kinds - set(fitted)),
    )


def format_estimate(est: Estimate, names: dict[int, str]) -> list[str]:
    """The lines ``figs --plan`` prints: one per figure (runs, shared runs and the figure
    they are charged to, minutes, budget, OVER where it is over), then the total."""
    whole = f" of a {est.budget:g}-minute budget" if est.budget is not None else ""
    rates = ", ".join(
        f"{k} fitted to {n} finished run(s) of this machine" for k, n in sorted(est.fitted.items())
    )
    if est.reference:
        rates += ("; " if rates else "") + (
            f"reference rates (smallinit.study.budget.REFERENCE) for {', '.join(est.reference)}"
        )
    lines = [f"estimate on {est.cores} cores{whole} (the ETA's cost model; {rates}):"]
    for f in est.figures:
        shared = "".join(
            f", {n} shared (charged to fig {owner})" for owner, n in sorted(f.shared.items())
        )
        share = f"  budget {f.budget:g} min" if f.budget is not None else ""
        flag = "  OVER BUDGET" if f.over else ""
        lines.append(
            f"fig {f.figure:2d} {names.get(f.figure, ''):<18} {f.runs:4d} runs"
            f"{shared}: {f.minutes:5.1f} min{share}{flag}"
        )
    flag = "  OVER BUDGET" if est.over else ""
    lines.append(
        f"total {est.minutes:.1f} min{whole} on {est.cores} cores; "
        f"{est.transformer_runs} transformer runs, {est.flops:.3g} training FLOPs"
        f"{flag}"
    )
    return lines
