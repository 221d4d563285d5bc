"""Fig 9: the smallest size, the γ grid × ``critical_seeds`` (the loss-optimal γ*)."""

from __future__ import annotations

from smallinit.llm.training.train import TrainSpec
from smallinit.study.experiments import llm_plan
from smallinit.study.experiments.experiment import Experiment
from smallinit.theory.init_rules import gamma_scheme


def specs(profile: str) -> list[TrainSpec]:
    the_plan = llm_plan.plan(profile)
    d = the_plan.sizes[0]
    base = llm_plan.base_config(profile, d)
    return [llm_plan.run(base, {"size": d, "init": gamma_scheme(g), "gamma": g, "seed": s},
                         gamma=g, seed=s)
            for g in the_plan.gammas for s in the_plan.critical_seeds]


EXPERIMENT = Experiment("critical-init", (9,), "LLM: γ grid × seeds at the smallest size",
                        specs, workers=llm_plan.workers)
