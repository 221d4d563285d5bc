"""Fig 4: the diagonal linear net trained from init scale α against theory's argmin Q_α
(docs/science.md §4; Woodworth et al. 2020), one run per depth of the profile's
``[diagonal]`` table."""

from __future__ import annotations

from smallinit.core import grids, profiles
from smallinit.core.config import override
from smallinit.study.experiments.experiment import Experiment
from smallinit.toy.diagonal import DiagonalConfig, DiagonalSpec

TABLE = "diagonal"


def alphas(profile: str) -> tuple[float, ...]:
    """The α grid of the diagonal net: ``logspace(start, stop, num)[::every]``, each point
    the correctly rounded double (:func:`smallinit.core.grids.logspace`), so the run key is
    the same on every processor."""
    grid = profiles.section(profile, TABLE)["alpha_grid"]
    values = grids.logspace(grid["start"], grid["stop"], int(grid["num"]))
    return values[::int(grid.get("every", 1))]


def specs(profile: str) -> list[DiagonalSpec]:
    table = profiles.section(profile, TABLE)
    return [DiagonalSpec(override(DiagonalConfig(), {"alphas": list(alphas(profile)),
                                                     "depth": depth, **table["problem"]},
                                  where=f"{profile}.{TABLE}"), {"depth": depth})
            for depth in table["depths"]]


EXPERIMENT = Experiment("diagonal", (4,), "diagonal linear net trained from init scale α",
                        specs)
