"""Fig 3 (directions): initial condensation per activation (docs/science.md §3; Zhou et
al. 2022), one run per activation of the profile's ``[initial-condensation]`` table
(:func:`smallinit.toy.initial_condensation.from_profile`)."""

from __future__ import annotations

from smallinit.study.experiments.experiment import Experiment
from smallinit.toy.initial_condensation import (
    InitialCondensationSpec,
    activations,
    from_profile,
)


def specs(profile: str) -> list[InitialCondensationSpec]:
    return [
        InitialCondensationSpec(from_profile(profile, a), {"activation": a})
        for a in activations(profile)
    ]


EXPERIMENT = Experiment("initial-condensation", (3,), "initial condensation per activation", specs)
