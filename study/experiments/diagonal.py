"""Fig 4: the diagonal linear net trained from init scale α against theory's argmin Q_α
(docs/science.md §4; Woodworth et al. 2020), one run per depth of the profile's
``[diagonal]`` table."""

from __future__ import annotations

from smallinit.study.experiments.experiment import Experiment
from smallinit.toy.diagonal import DiagonalSpec, from_profile


def specs(profile: str) -> list[DiagonalSpec]:
    return [DiagonalSpec(cfg, {"depth": cfg.depth}) for cfg in from_profile(profile)]


EXPERIMENT = Experiment("diagonal", (4,), "diagonal linear net trained from init scale α", specs)
