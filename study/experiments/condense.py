"""Fig 3 (maps): where the two-layer net's amplitude condenses over (γ, γ')
(docs/science.md §3), one grid run from the profile's ``[condense]`` table."""

from __future__ import annotations

from smallinit.study.experiments.experiment import Experiment
from smallinit.toy.condense import CondenseSpec, from_profile


def specs(profile: str) -> list[CondenseSpec]:
    return [CondenseSpec(from_profile(profile))]


EXPERIMENT = Experiment(
    "condense", (3,), "two-layer ReLU net: condensation maps over (γ, γ')", specs
)
