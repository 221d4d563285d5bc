"""What a figure module declares and what it receives, below the figure driver.

Each module ``paper_figs/figNN_<name>.py`` ends with its one registration,
``FIGURE = Figure(number=NN, title=..., caption=__doc__, make=make)``; the driver
(:mod:`smallinit.study.figs`) finds the modules by their file names
(:data:`smallinit.study.figure_list.FIGURES`), imports them and calls ``FIGURE.make(ctx)``
with a :class:`FigureContext`. This module imports only the core, so that the figure
modules import it and never the driver that imports them (no import cycle).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from smallinit.core.errors import ConfigError, RunFailed
from smallinit.core.jobs import Results
from smallinit.core.plotting import save_figure
from smallinit.core.runs import Run
from smallinit.study.figure_list import FIGURES


@dataclasses.dataclass
class FigureContext:
    """What a figure's ``make`` receives: its experiments' runs and where to write its files."""

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
            raise ConfigError(
                f"figure {self.number} reads experiment {experiment!r}, which "
                "the registry does not list for it (smallinit.study.experiments: "
                f"{', '.join(self.runs) or 'none'})"
            )
        return self.runs[experiment]


@dataclasses.dataclass(frozen=True)
class Figure:
    """One figure's registration: its number (the ``NN`` of its file name), the title the
    report page shows, the caption (its module's docstring) and ``make(ctx)``, which reads
    ``ctx.results(experiment)``, draws and returns the paths ``ctx.save(fig)`` wrote."""

    number: int
    title: str
    caption: str
    make: Callable[[FigureContext], list[Path]]


def single(results: Results) -> Run:
    """The one run of a one-run experiment; a run that did not finish raises RunFailed
    with its recorded reason."""
    if len(results.runs) != 1:
        raise ValueError(f"expected one run, got {len(results.runs)}")
    run = results.runs[0]
    if not run.done:
        raise RunFailed(f"{run.kind} run {run.path} is {run.state}: {run.status().get('reason')}")
    return run


def outputs(run: Run) -> dict[str, Any]:
    """A finished toy run's summary and arrays in one dict (what its module returns)."""
    return {**run.summary, **run.arrays()}
