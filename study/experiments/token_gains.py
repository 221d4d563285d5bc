"""Fig 11: matched γ = 0.5 and γ = 1 models (smallest size) for each critical seed — fig 9's
runs at the compared pair."""

from __future__ import annotations

from smallinit.core.jobs import RunSpec
from smallinit.study.experiments import critical_init, llm_plan
from smallinit.study.experiments.experiment import Experiment


def specs(profile: str) -> list[RunSpec]:
    return [s for s in critical_init.specs(profile) if s.tags["gamma"] in llm_plan.COMPARED]


EXPERIMENT = Experiment(
    "token-gains",
    (11,),
    "LLM: matched γ = 0.5 / γ = 1 models per seed",
    specs,
    workers=llm_plan.workers,
    inner=llm_plan.critical_tuning,
)
