"""Fig 7: every size × (γ grid + baselines) × seeds, the same steps and batch per size (the
grid points other than γ = 0.5 and 1, and the baselines, at ``grid_seeds`` if set)."""

from __future__ import annotations

from smallinit.llm.training.train import TrainSpec
from smallinit.study.experiments import llm_plan
from smallinit.study.experiments.experiment import Experiment
from smallinit.theory.init_rules import gamma_scheme


def specs(profile: str) -> list[TrainSpec]:
    the_plan = llm_plan.plan(profile)
    others = the_plan.seeds if the_plan.grid_seeds is None else the_plan.grid_seeds
    out = []
    for d in the_plan.sizes:
        base = llm_plan.base_config(profile, d)
        schemes = ([(gamma_scheme(g), g) for g in the_plan.gammas]
                   + [(b, None) for b in the_plan.baselines])
        for init, g in schemes:
            for seed in (the_plan.seeds if g in llm_plan.COMPARED else others):
                out.append(llm_plan.run(base, {"size": d, "init": init, "gamma": g,
                                               "seed": seed}, init=init, seed=seed))
    return out


EXPERIMENT = Experiment("gamma-sweep", (7,), "LLM: γ grid × sizes + baselines", specs,
                        workers=llm_plan.workers)
