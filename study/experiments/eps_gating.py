"""Fig 8: (ε standard, relaxed) × (gate off, on) × ``eps_gammas`` × ``eps_seeds`` at the
smallest size, each run probed along training (:mod:`smallinit.llm.training.probes`)."""

from __future__ import annotations

from smallinit.core.jobs import RunSpec
from smallinit.study.experiments import llm_plan
from smallinit.study.experiments.experiment import Experiment


def specs(profile: str) -> list[RunSpec]:
    the_plan = llm_plan.plan(profile)
    return llm_plan.eps_gating_grid(
        profile, the_plan, the_plan.sizes[0], the_plan.eps_gammas, the_plan.eps_seeds
    )


EXPERIMENT = Experiment(
    "eps-gating",
    (8,),
    "LLM: RMSNorm ε × gated attention",
    specs,
    workers=llm_plan.workers,
    inner=llm_plan.tuning,
)
