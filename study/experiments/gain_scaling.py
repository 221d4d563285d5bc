"""Fig 12: the gain of small init against size — γ ∈ {0.5, 1} × (ε standard, relaxed) ×
(gate off, on) × ``scaling_seeds`` at each of ``scaling_sizes``, ε per size chosen as fig
8's (a width-d model with the saturation threshold of ``d_large``); at fig 8's size these
are fig 8's runs. No runs when the profile sets no ``scaling_sizes``."""

from __future__ import annotations

from smallinit.core.jobs import RunSpec
from smallinit.study.experiments import llm_plan
from smallinit.study.experiments.experiment import Experiment


def specs(profile: str) -> list[RunSpec]:
    the_plan = llm_plan.plan(profile)
    return [
        s
        for d in the_plan.scaling_sizes
        for s in llm_plan.eps_gating_grid(
            profile, the_plan, d, llm_plan.COMPARED, the_plan.scaling_seeds
        )
    ]


EXPERIMENT = Experiment(
    "gain-scaling",
    (12,),
    "LLM: γ = 0.5 / 1 gain against size under ε × gating",
    specs,
    workers=llm_plan.workers,
    inner=llm_plan.tuning,
)
