"""Fig 1: the two-layer ReLU net's RD slope S_w over the (γ, γ') grid (docs/science.md §2),
one scan run (:func:`smallinit.toy.scan.run_scan`) from the profile's ``[toy-scan]``."""

from __future__ import annotations

from smallinit.study.experiments.experiment import Experiment
from smallinit.toy.scan import ScanSpec, from_profile


def specs(profile: str) -> list[ScanSpec]:
    return [ScanSpec(from_profile(profile))]


EXPERIMENT = Experiment("toy-scan", (1,), "two-layer ReLU net: S_w over the (γ, γ') grid", specs)
