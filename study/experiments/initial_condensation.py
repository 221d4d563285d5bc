"""Fig 3 (directions): initial condensation per activation (docs/science.md §3; Zhou et
al. 2022), one run per activation of the profile's ``[initial-condensation]`` table."""

from __future__ import annotations

from smallinit.core import profiles
from smallinit.core.config import override
from smallinit.core.errors import require
from smallinit.study.experiments.experiment import Experiment
from smallinit.toy.initial_condensation import (
    InitialCondensationConfig,
    InitialCondensationSpec,
)

TABLE = "initial-condensation"


def specs(profile: str) -> list[InitialCondensationSpec]:
    table = profiles.section(profile, TABLE)
    activations = table.pop("activations", ["tanh"])
    require(isinstance(activations, list) and len(activations) > 0,
            f"{profile}.{TABLE}.activations={activations!r} is not allowed; give a list of at "
            "least one activation (figure 3 draws one panel per activation)")
    return [InitialCondensationSpec(
        override(InitialCondensationConfig(), {**table, "activation": a},
                 where=f"{profile}.{TABLE}"), {"activation": a}) for a in activations]


EXPERIMENT = Experiment("initial-condensation", (3,), "initial condensation per activation",
                        specs)
