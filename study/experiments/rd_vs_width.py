"""Fig 2: RD against width at γ' = 0 for a few γ (docs/science.md §2): a phase scan of the
profile's ``[rd-vs-width]`` table."""

from __future__ import annotations

from smallinit.study.experiments.experiment import Experiment
from smallinit.toy.scan import ScanSpec, from_profile


def specs(profile: str) -> list[ScanSpec]:
    return [ScanSpec(from_profile(profile, "rd-vs-width"))]


EXPERIMENT = Experiment(
    "rd-vs-width", (2,), "two-layer ReLU net: RD against width at γ' = 0", specs
)
