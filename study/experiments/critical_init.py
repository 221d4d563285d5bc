"""Fig 9: the smallest size, the γ grid × ``critical_seeds`` (the loss-optimal γ*)."""

from __future__ import annotations

from smallinit.core.jobs import RunSpec
from smallinit.study.experiments import llm_plan
from smallinit.study.experiments.experiment import Experiment
from smallinit.theory.init_rules import gamma_scheme


def specs(profile: str) -> list[RunSpec]:
    """The smallest size, fig 9's γ grid × ``critical_seeds``; on the profile's reasoning
    probe when it has one (docs/science.md §13.1, 6)."""
    the_plan = llm_plan.plan(profile)
    d = the_plan.sizes[0]
    base = llm_plan.base_config(profile, d, probe=llm_plan.has_probe(profile))
    return [
        llm_plan.spec(
            the_plan,
            base,
            {"size": d, "init": gamma_scheme(g), "gamma": g, "seed": s},
            gamma=g,
            seed=s,
        )
        for g in (the_plan.critical_gammas or the_plan.gammas)
        for s in the_plan.critical_seeds
    ]


EXPERIMENT = Experiment(
    "critical-init",
    (9,),
    "LLM: γ grid × seeds at the smallest size",
    specs,
    workers=llm_plan.workers,
    inner=llm_plan.critical_tuning,
)
