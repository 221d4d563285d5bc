"""Fig 7: every size × (γ grid + baselines) × seeds, the same steps and batch per size (the
grid points other than γ = 0.5 and 1, and the baselines, at ``grid_seeds`` if set)."""

from __future__ import annotations

from smallinit.core.jobs import RunSpec
from smallinit.study.experiments import llm_plan
from smallinit.study.experiments.experiment import Experiment
from smallinit.theory.init_rules import gamma_scheme


def specs(profile: str) -> list[RunSpec]:
    the_plan = llm_plan.plan(profile)
    others = the_plan.seeds if the_plan.grid_seeds is None else the_plan.grid_seeds
    out = []
    for d in the_plan.sizes:
        base = llm_plan.base_config(profile, d)
        schemes = [(gamma_scheme(g), g) for g in the_plan.gammas] + [
            (b, None) for b in the_plan.baselines
        ]
        for init, g in schemes:
            for seed in the_plan.seeds if g in llm_plan.COMPARED else others:
                out.append(
                    llm_plan.spec(
                        the_plan,
                        base,
                        {"size": d, "init": init, "gamma": g, "seed": seed},
                        init=init,
                        seed=seed,
                        lr_gamma=g,
                    )
                )
        out += arms(the_plan, base, d == max(the_plan.sizes))
    return out


def arms(the_plan: llm_plan.Plan, base, largest: bool) -> list[RunSpec]:
    """The arms beside the plain runs (docs/science.md §13.1, 4-5): γ 1 at γ 0.5's learning
    rate (``arm=shared_lr``), and at the largest size γ 1 at weight decay ``decay_arm``
    (``arm=weight_decay``), for every seed of the compared pair."""
    d = base.model.d_model
    out = []
    for seed in the_plan.seeds:
        tags = {"size": d, "init": gamma_scheme(1.0), "gamma": 1.0, "seed": seed}
        if the_plan.shared_lr_arm:
            out.append(
                llm_plan.spec(
                    the_plan, base, {**tags, "arm": "shared_lr"}, gamma=1.0, seed=seed, lr_gamma=0.5
                )
            )
        if the_plan.decay_arm and largest:
            out.append(
                llm_plan.spec(
                    the_plan,
                    base,
                    {**tags, "arm": "weight_decay", "weight_decay": the_plan.decay_arm},
                    gamma=1.0,
                    seed=seed,
                    **{"train.weight_decay": the_plan.decay_arm},
                )
            )
    return out


EXPERIMENT = Experiment(
    "gamma-sweep",
    (7, 13),
    "LLM: γ grid × sizes + baselines",
    specs,
    workers=llm_plan.workers,
    inner=llm_plan.tuning,
)
