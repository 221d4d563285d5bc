"""The figure pipeline behind ``smallinit figs`` and ``make figs``.

The figure scripts belong to the package: ``paper_figs/`` is installed as
:mod:`smallinit.paper_figs`, one module per figure of docs/science.md §7 named ``figNN_name``.
Each module registers itself once, at its end: ``FIGURE = Figure(number=NN, title=...,
caption=__doc__, make=make)`` (:class:`smallinit.study.figure.Figure`), where
``make(ctx: FigureContext) -> list[Path]`` reads ``ctx.results(experiment)``, the runs of
one of its experiments at ``ctx.profile`` (the experiments the registry
:mod:`smallinit.study.experiments` lists for it), and saves the drawing with
``ctx.save(fig)``. The driver finds the modules by their names (:func:`figure_modules`,
sorted by number: no list of figures to keep), imports the chosen ones and reads their
``FIGURE``; the figure modules import :mod:`smallinit.study.figure`, never this module. It
computes the runs of every chosen figure once, side by side, before any figure draws (a
second ``make figs`` only draws). Scripts are imported as modules of the package, never
executed from a user folder; where the figures are *written* is a separate choice
(``--out``, ``$SMALLINIT_FIGS_OUT``, else the checkout's ``paper_figs/out``). Every call
also writes the report page ``index.html`` into the output folder
(:mod:`smallinit.study.report`): every figure of the folder with its caption, statistics,
runs and commands, and the claims table of every profile in the store.
"""

from __future__ import annotations

import importlib
import logging
import os
import time
from pathlib import Path
from typing import Any

from smallinit.core import profiles
from smallinit.core.errors import ConfigError, SmallinitError, check_choice, one_line
from smallinit.core.jobs import Results, run_specs
from smallinit.core.store import RunStore
from smallinit.llm.training.cost import training_flops_of
from smallinit.study import report
from smallinit.study.experiments import Experiment, existing, of_figure
from smallinit.study.figure import Figure, FigureContext
from smallinit.study.figure_list import FIGURES as FIGURES  # the paper's figures, by number
from smallinit.study.figure_list import figure_names

log = logging.getLogger(__name__)

PACKAGE = "smallinit.paper_figs"


def compute(
    experiments: list[Experiment],
    profile: str,
    store: RunStore,
    *,
    force: bool = False,
    workers: int | None = None,
    executor: str | None = None,
    population: str | None = None,
    population_exec: str | None = None,
) -> dict[str, Results]:
    """The runs of ``experiments`` at ``profile``, computed once: first, in one call of the
    job driver so that independent runs of different figures run side by side, the runs
    every experiment needs (an experiment's inner runs when it has some, e.g. compare's
    transformers, else its own); then the runs of experiments with inner runs, which find
    those done. An experiment with no runs of its own at ``profile`` (an arm the profile
    cuts) computes nothing, not even its inner runs. ``workers``: given, else the smallest
    pin among the experiments (a profile that pins one worker keeps it), else every core;
    ``population``, ``population_exec``: the job driver's population mode and how a
    population's step runs (:func:`smallinit.core.jobs.run_specs`)."""
    own = {e.name: e.specs(profile) for e in experiments}
    live = [e for e in experiments if own[e.name]]  # an experiment the profile cuts needs nothing
    inner = {e.name: e.inner(profile) for e in live}
    pins = [p for p in (e.workers(profile) for e in live) if p is not None]
    options = {
        "force": force,
        "workers": workers or min(pins, default=None),
        "executor": executor,
        "weigh": training_flops_of,
        "population": population,
        "population_exec": population_exec,
    }
    first = [s for e in live for s in (inner[e.name] or own[e.name])]
    run_specs(first, store, desc="runs of the figures", **options)
    out = {e.name: Results([], []) for e in experiments}
    for e in live:
        the_specs = own[e.name]
        out[e.name] = (
            run_specs(the_specs, store, desc=e.name, **options)
            if inner[e.name]
            else Results(the_specs, [s.run_of(store) for s in the_specs])
        )
    return out


class FigureFailed(SmallinitError):
    """A figure script that raised: the one-line reason, in place of the figure's files."""


def figure_modules() -> dict[int, str]:
    """The figure modules of the figure package (:data:`PACKAGE`) by number, sorted: each
    module ``figNN_<name>`` found by its name (:func:`smallinit.study.figure_list.figure_names`),
    none imported."""
    names = figure_names(importlib.import_module(PACKAGE).__path__)
    return {number: f"{PACKAGE}.fig{number:02d}_{name}" for number, name in names.items()}


def load_figure(number: int) -> Figure:
    """Figure ``number``'s registration: the ``FIGURE`` its module declares."""
    modules = figure_modules()
    check_choice("figure number", number, modules)
    figure = importlib.import_module(modules[number]).FIGURE
    if not isinstance(figure, Figure) or figure.number != number:
        raise ConfigError(
            f"figure module {modules[number]} declares FIGURE={figure!r}; it "
            f"must be Figure(number={number}, ...)"
        )
    return figure


def default_out_dir() -> Path:
    """``$SMALLINIT_FIGS_OUT``, else ``paper_figs/out`` of the checkout the package runs
    from, else ``./paper_figs_out``."""
    env = os.environ.get("SMALLINIT_FIGS_OUT")
    if env:
        return Path(env)
    root = Path(__file__).resolve().parents[1]  # study/figs.py in the checkout
    if (root / "pyproject.toml").is_file() and (root / "paper_figs").is_dir():
        return root / "paper_figs" / "out"
    return Path.cwd() / "paper_figs_out"


def prepare_out_dir(out_dir: Path) -> Path:
    """Create the output folder before any run is computed; a path that is a file, lies
    below a file or cannot be written raises :class:`ConfigError` naming it and why."""

    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(
            f"figure output folder {out_dir} is a file; give a folder with --out "
            "or $SMALLINIT_FIGS_OUT"
        )
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(
            f"figure output folder {out_dir} cannot be created "
            f"({err.strerror or err}); give a writable folder with --out or "
            "$SMALLINIT_FIGS_OUT"
        ) from None
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise ConfigError(
            f"figure output folder {out_dir} is not writable; give a writable "
            "folder with --out or $SMALLINIT_FIGS_OUT"
        )
    return out_dir


def make_figures(
    only: list[int] | None = None,
    profile: str = "quick",
    out_dir: Path | None = None,
    store: RunStore | None = None,
    force: bool = False,
    workers: int | None = None,
    executor: str | None = None,
    population: str | None = None,
    population_exec: str | None = None,
) -> dict[int, list[Path] | FigureFailed]:
    """Render the chosen figures (default: every figure module of the package); value
    ``[]`` marks a figure whose experiments have no runs at ``profile`` (arms a profile
    cuts), a
    :class:`FigureFailed` one whose script raised (logged with its traceback; the other
    figures and the report page are still drawn). The
    runs of all chosen figures are computed first, side by side
    (:func:`compute`: ``workers`` local processes, default every core, or on a Ray cluster
    with ``executor="ray"``; ``population``: whether runs of one shape train together,
    ``population_exec``: how their step runs, :func:`smallinit.core.jobs.run_specs`); then
    each figure draws, and the report page is written (:func:`write_report`)."""
    check_choice("profile", profile, (*profiles.names(), *profiles.derived()))
    available = figure_modules()
    for n in only or []:
        check_choice("figure number", n, available)
    out_dir = prepare_out_dir(Path(out_dir) if out_dir else default_out_dir())
    store = store or RunStore()
    chosen = sorted(only or available)
    needed = list({e.name: e for n in chosen for e in of_figure(n)}.values())
    runs = compute(
        needed,
        profile,
        store,
        force=force,
        workers=workers,
        executor=executor,
        population=population,
        population_exec=population_exec,
    )
    results: dict[int, list[Path] | FigureFailed] = {}
    for number in chosen:
        if not any(runs[e.name].specs for e in of_figure(number)):
            results[number] = []  # its arms are cut at this profile: nothing to draw
            log.info("fig %02d: no runs at profile %s, not drawn", number, profile)
            continue
        ctx = FigureContext(
            number, profile, out_dir, {e.name: runs[e.name] for e in of_figure(number)}
        )
        t0 = time.perf_counter()
        try:
            results[number] = list(load_figure(number).make(ctx))
        except Exception as err:  # one figure's failure leaves the others and the page
            log.exception("fig %02d failed", number)
            results[number] = FigureFailed(
                f"fig {number} failed: {type(err).__name__}: {one_line(err)}"
            )
            continue
        log.info("fig %02d done in %.1f s", number, time.perf_counter() - t0)
    path = write_report(out_dir, store, profile, results, runs)
    log.info("report page %s", path)
    return results


def drawn_at(info: dict[str, Any]) -> str | None:
    """The profile a figure of the folder was drawn at (its ``report.json`` entry): a
    derived one is derived again from the base and overlay kept there; None where that
    overlay no longer applies to the base, or the profile is not known here."""
    if "overlay" not in info:
        known = info["profile"] in (*profiles.names(), *profiles.derived())
        return info["profile"] if known else None
    try:
        return profiles.derive(info.get("base"), overrides=info["overlay"])
    except (ConfigError, TypeError):
        return None


def write_report(
    out_dir: Path,
    store: RunStore,
    profile: str,
    drawn: dict[int, list[Path] | Exception],
    runs: dict[str, Results] | None = None,
) -> Path:
    """The report page of ``out_dir`` (:mod:`smallinit.study.report`): the figures drawn now
    (``drawn``, at ``profile``, their experiments' runs in ``runs``) and those drawn there
    before (``report.json``), their runs looked up read-only at the profile each was drawn
    at."""
    runs = runs or {}
    modules = figure_modules()
    entries = []
    for number, info in report.record_drawn(out_dir, profile, drawn).items():
        if number not in modules:
            continue
        at = drawn_at(info)
        if at is None:
            log.warning(
                "fig %02d in %s: its profile %s is not known here, or its overlay "
                "no longer applies; not on the report page",
                number,
                out_dir,
                info.get("base", info["profile"]),
            )
            continue
        figure = load_figure(number)
        now = {e.name: runs[e.name] for e in of_figure(number) if at == profile and e.name in runs}
        entries.append(
            report.FigureEntry(
                number,
                modules[number].rpartition(".")[2],
                figure.title,
                figure.caption or "",
                at,
                info["files"],
                {e.name: now.get(e.name) or existing(e.name, at, store) for e in of_figure(number)},
                {
                    e.name: Results(inner, [s.run_of(store) for s in inner])
                    for e in of_figure(number)
                    if (inner := e.inner(at))
                },
            )
        )
    return report.write_report(out_dir, entries, store)
