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


def activations(profile: str) -> list[str]:
    """The activations of the profile's ``[initial-condensation]`` table, one run each."""
    found = profiles.section(profile, TABLE).get("activations", ["tanh"])
    require(
        isinstance(found, list) and len(found) > 0,
        f"{profile}.{TABLE}.activations={found!r} is not allowed; give a list of at "
        "least one activation (figure 3 draws one panel per activation)",
    )
    return found


def config(profile: str, activation: str | None = None) -> InitialCondensationConfig:
    """The run of ``activation`` (None: the table's first) at ``profile``: the defaults in
    code with the table's other keys laid over them."""
    table = profiles.section(profile, TABLE)
    table.pop("activations", None)
    activation = activations(profile)[0] if activation is None else activation
    return override(
        InitialCondensationConfig(), {**table, "activation": activation}, where=f"{profile}.{TABLE}"
    )


def specs(profile: str) -> list[InitialCondensationSpec]:
    return [
        InitialCondensationSpec(config(profile, a), {"activation": a}) for a in activations(profile)
    ]


EXPERIMENT = Experiment("initial-condensation", (3,), "initial condensation per activation", specs)
