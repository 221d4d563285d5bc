"""Fig 1: the two-layer ReLU net's RD slope S_w over the (γ, γ') grid (docs/science.md §2),
one scan run (:func:`smallinit.toy.scan.run_scan`) from the profile's ``[toy-scan]``."""

from __future__ import annotations

from smallinit.core import profiles
from smallinit.core.config import override
from smallinit.study.experiments.experiment import Experiment
from smallinit.toy.scan import ScanConfig, ScanSpec

TABLE = "toy-scan"


def config(profile: str, table: str = TABLE) -> ScanConfig:
    """The scan of a profile's ``[toy-scan]`` table (or another table of the same form,
    e.g. fig 2's ``[rd-vs-width]``); fields it leaves out keep the defaults."""
    return override(ScanConfig(), profiles.section(profile, table), where=f"{profile}.{table}")


def specs(profile: str) -> list[ScanSpec]:
    return [ScanSpec(config(profile))]


EXPERIMENT = Experiment("toy-scan", (1,), "two-layer ReLU net: S_w over the (γ, γ') grid",
                        specs)
