"""Fig 10: fig 8's standard-ε, ungated runs at ``dynamics_gammas``, followed through their
probes — trained for ``dynamics_steps`` instead when the plan sets it (to see past the
condensation)."""

from __future__ import annotations

from smallinit.core.jobs import RunSpec
from smallinit.study.experiments import eps_gating, llm_plan
from smallinit.study.experiments.experiment import Experiment


def specs(profile: str) -> list[RunSpec]:
    the_plan = llm_plan.plan(profile)
    chosen = [
        s
        for s in eps_gating.specs(profile)
        if s.tags["eps_setting"] == "standard"
        and not s.tags["gated"]
        and s.tags["gamma"] in the_plan.dynamics_gammas
    ]
    if not the_plan.dynamics_steps:
        return chosen
    return [llm_plan.respec(s, **{"train.steps": the_plan.dynamics_steps}) for s in chosen]


EXPERIMENT = Experiment(
    "condense-expand",
    (10,),
    "LLM: γ = 0.5 and 1 runs followed over training",
    specs,
    workers=llm_plan.workers,
    inner=llm_plan.tuning,
)
