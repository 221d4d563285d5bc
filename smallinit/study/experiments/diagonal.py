"""Fig 4: the diagonal linear net trained from init scale α against theory's argmin Q_α
(docs/science.md §4; Woodworth et al. 2020), one run per depth of the profile's
``[diagonal]`` table."""

from __future__ import annotations

import numpy as np

from smallinit.core import profiles
from smallinit.core.config import override
from smallinit.study.experiments.experiment import Experiment
from smallinit.toy.diagonal import DiagonalConfig, DiagonalSpec

TABLE = "diagonal"


def alphas(profile: str) -> tuple[float, ...]:
    """The α grid of the diagonal net: ``np.logspace(start, stop, num)[::every]``."""
    grid = profiles.section(profile, TABLE)["alpha_grid"]
    values = np.logspace(grid["start"], grid["stop"], int(grid["num"]))
    return tuple(float(a) for a in values[::int(grid.get("every", 1))])


def specs(profile: str) -> list[DiagonalSpec]:
    table = profiles.section(profile, TABLE)
    return [DiagonalSpec(override(DiagonalConfig(), {"alphas": list(alphas(profile)),
                                                     "depth": depth, **table["problem"]},
                                  where=f"{profile}.{TABLE}"), {"depth": depth})
            for depth in table["depths"]]


EXPERIMENT = Experiment("diagonal", (4,), "diagonal linear net trained from init scale α",
                        specs)
