"""The figure pipeline behind ``smallinit figs`` and ``make figs``.

The figure scripts belong to the package: ``paper_figs/`` is installed as
:mod:`smallinit.paper_figs`, one module per figure of docs/science.md §7 named ``figNN_name``. A
module defines ``NUMBER``, ``TITLE`` and ``make(ctx: FigureContext) -> list[Path]``: it
reads ``ctx.results(experiment)``, the runs of one of its experiments at ``ctx.profile``
(the experiments the registry :mod:`smallinit.study.experiments` lists for it), and saves
the drawing with ``ctx.save(fig)``. The driver computes the runs of every chosen figure
once, side by side, before any figure draws (a second ``make figs`` only draws). Scripts
are imported as modules of the package, never executed from a user folder; where the
figures are
*written* is a separate choice (``--out``, ``$SMALLINIT_FIGS_OUT``, else the checkout's
``paper_figs/out``). A figure whose module does not exist yet is listed as not yet
available; nothing is drawn in its place. Every call also writes the report page
``index.html`` into the output folder (:mod:`smallinit.study.report`): every figure of the
folder with its caption, statistics, runs and commands, and the claims table of every
profile in the store.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import logging
import os
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from smallinit.core import profiles
from smallinit.core.errors import ConfigError, RunFailed, SmallinitError, check_choice, one_line
from smallinit.core.jobs import Results, run_specs
from smallinit.core.plotting import save_figure
from smallinit.core.runs import Run
from smallinit.core.store import RunStore
from smallinit.llm.training.cost import training_flops_of
from smallinit.study import report
from smallinit.study.experiments import Experiment, existing, of_figure
from smallinit.study.figure_list import FIGURES

log = logging.getLogger(__name__)

PACKAGE = "smallinit.paper_figs"


@dataclasses.dataclass
class FigureContext:
    """What a figure script receives: its experiments' runs and where to write its files."""

    number: int
    profile: str
    out_dir: Path
    runs: dict[str, Results]  # experiment name -> its runs, computed by the driver

    @property
    def stem(self) -> str:
        return f"fig{self.number:02d}_{FIGURES[self.number]}"

    def save(self, fig, suffix: str = "") -> list[Path]:
        """Save ``fig`` as ``figNN_name[suffix].png`` and ``.pdf`` in the output folder."""
        return save_figure(fig, self.out_dir, self.stem + suffix)

    def results(self, experiment: str) -> Results:
        """The runs of ``experiment`` at this profile (one of this figure's experiments)."""
        if experiment not in self.runs:
            raise ConfigError(f"figure {self.number} reads experiment {experiment!r}, which "
                              "the registry does not list for it (smallinit.study.experiments: "
                              f"{', '.join(self.runs) or 'none'})")
        return self.runs[experiment]


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


def compute(experiments: list[Experiment], profile: str, store: RunStore, *,
            force: bool = False, workers: int | None = None,
            executor: str | None = None, population: str | None = None,
            population_exec: str | None = None) -> dict[str, Results]:
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
    options = {"force": force, "workers": workers or min(pins, default=None),
               "executor": executor, "weigh": training_flops_of, "population": population,
               "population_exec": population_exec}
    first = [s for e in live for s in (inner[e.name] or own[e.name])]
    run_specs(first, store, desc="runs of the figures", **options)
    out = {e.name: Results([], []) for e in experiments}
    for e in live:
        the_specs = own[e.name]
        out[e.name] = (run_specs(the_specs, store, desc=e.name, **options) if inner[e.name]
                       else Results(the_specs, [s.run_of(store) for s in the_specs]))
    return out


class FigureFailed(SmallinitError):
    """A figure script that raised: the one-line reason, in place of the figure's files."""


def module_name(number: int) -> str:
    return f"{PACKAGE}.fig{number:02d}_{FIGURES[number]}"


def figure_modules() -> dict[int, str]:
    """Module names of the figure scripts that exist, by number."""
    found = {}
    for number in FIGURES:
        if importlib.util.find_spec(module_name(number)) is not None:
            found[number] = module_name(number)
    return found


def load_figure(number: int) -> ModuleType:
    """Import figure ``number``'s module from the package."""
    check_choice("figure number", number, FIGURES)
    module = importlib.import_module(module_name(number))
    if not callable(getattr(module, "make", None)):
        raise ConfigError(f"figure module {module.__name__} has no make(ctx) function")
    return module


def default_out_dir() -> Path:
    """``$SMALLINIT_FIGS_OUT``, else ``paper_figs/out`` of the checkout the package runs
    from, else ``./paper_figs_out``."""
    env = os.environ.get("SMALLINIT_FIGS_OUT")
    if env:
        return Path(env)
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "paper_figs").is_dir():
        return root / "paper_figs" / "out"
    return Path.cwd() / "paper_figs_out"


def prepare_out_dir(out_dir: Path) -> Path:
    """Create the output folder before any run is computed; a path that is a file, lies
    below a file or cannot be written raises :class:`ConfigError` naming it and why."""

    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"figure output folder {out_dir} is a file; give a folder with --out "
                          "or $SMALLINIT_FIGS_OUT")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"figure output folder {out_dir} cannot be created "
                          f"({err.strerror or err}); give a writable folder with --out or "
                          "$SMALLINIT_FIGS_OUT") from None
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise ConfigError(f"figure output folder {out_dir} is not writable; give a writable "
                          "folder with --out or $SMALLINIT_FIGS_OUT")
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
) -> dict[int, list[Path] | FigureFailed | None]:
    """Render the chosen figures; value ``None`` marks a figure not yet available, ``[]`` one
    whose experiments have no runs at ``profile`` (arms a profile cuts), a
    :class:`FigureFailed` one whose script raised (logged with its traceback; the other
    figures and the report page are still drawn). The
    runs of all chosen figures are computed first, side by side
    (:func:`compute`: ``workers`` local processes, default every core, or on a Ray cluster
    with ``executor="ray"``; ``population``: whether runs of one shape train together,
    ``population_exec``: how their step runs, :func:`smallinit.core.jobs.run_specs`); then
    each figure draws, and the report page is written (:func:`write_report`)."""
    check_choice("profile", profile, (*profiles.names(), *profiles.derived()))
    for n in only or []:
        check_choice("figure number", n, FIGURES)
    out_dir = prepare_out_dir(Path(out_dir) if out_dir else default_out_dir())
    store = store or RunStore()
    available = figure_modules()
    chosen = [n for n in sorted(only or FIGURES) if n in available]
    needed = list({e.name: e for n in chosen for e in of_figure(n)}.values())
    runs = compute(needed, profile, store, force=force, workers=workers, executor=executor,
                   population=population, population_exec=population_exec)
    results: dict[int, list[Path] | FigureFailed | None] = {}
    for number in sorted(only or FIGURES):
        if number not in available:
            results[number] = None
            continue
        if not any(runs[e.name].specs for e in of_figure(number)):
            results[number] = []  # its arms are cut at this profile: nothing to draw
            log.info("fig %02d: no runs at profile %s, not drawn", number, profile)
            continue
        ctx = FigureContext(number, profile, out_dir,
                            {e.name: runs[e.name] for e in of_figure(number)})
        t0 = time.perf_counter()
        try:
            results[number] = list(load_figure(number).make(ctx))
        except Exception as err:  # one figure's failure leaves the others and the page
            log.exception("fig %02d failed", number)
            results[number] = FigureFailed(f"fig {number} failed: {type(err).__name__}: "
                                           f"{one_line(err)}")
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


def write_report(out_dir: Path, store: RunStore, profile: str,
                 drawn: dict[int, list[Path] | Exception | None],
                 runs: dict[str, Results] | None = None) -> Path:
    """The report page of ``out_dir`` (:mod:`smallinit.study.report`): the figures drawn now
    (``drawn``, at ``profile``, their experiments' runs in ``runs``) and those drawn there
    before (``report.json``), their runs looked up read-only at the profile each was drawn
    at."""
    runs = runs or {}
    entries = []
    for number, info in report.record_drawn(out_dir, profile, drawn).items():
        if number not in FIGURES or importlib.util.find_spec(module_name(number)) is None:
            continue
        at = drawn_at(info)
        if at is None:
            log.warning("fig %02d in %s: its profile %s is not known here, or its overlay "
                        "no longer applies; not on the report page", number, out_dir,
                        info.get("base", info["profile"]))
            continue
        module = load_figure(number)
        now = {e.name: runs[e.name] for e in of_figure(number)
               if at == profile and e.name in runs}
        entries.append(report.FigureEntry(
            number, f"fig{number:02d}_{FIGURES[number]}", getattr(module, "TITLE", ""),
            module.__doc__ or "", at, info["files"],
            {e.name: now.get(e.name) or existing(e.name, at, store) for e in of_figure(number)},
            {e.name: Results(inner, [s.run_of(store) for s in inner])
             for e in of_figure(number) if (inner := e.inner(at))}))
    missing = [n for n in FIGURES if importlib.util.find_spec(module_name(n)) is None]
    return report.write_report(out_dir, entries, store, missing=missing)
