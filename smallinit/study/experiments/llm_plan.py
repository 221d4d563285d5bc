"""What the LLM experiments of figs 7–12 share: the profile's ``[llm-sweeps]`` table (its
``plan`` grids and its ``base`` run config) and the rules that turn a size and a setting
into a run config.

Experiments share runs: identical configs have identical run-store keys, so e.g. the
smallest model's γ = 0.5 and γ = 1 runs serve figs 7, 9 and 11, and the job driver trains
each once.

Fig 8's ε follows docs/science.md §5: a width-d model sits on the same side of RMSNorm
saturation as a width-D model with ε_D when both have the same threshold
γ_ε = ln(1/ε)/(2 ln d), i.e. ε_d = d^{−2 γ_ε(D, ε_D)} (``theory.transformer.matching_eps`` at
γ = γ_ε(D, ε_D)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from smallinit.core import profiles
from smallinit.core.config import check_fields, config_from_dict, override
from smallinit.llm.run_config import RunConfig
from smallinit.llm.training.train import TrainSpec
from smallinit.theory.init_rules import gamma_scheme
from smallinit.theory.transformer import matching_eps, rmsnorm_gamma_threshold

TABLE = "llm-sweeps"  # the profiles' table of these experiments
COMPARED = (0.5, 1.0)  # the γ pair every comparison of the study contrasts (figs 7 ... 12)


@dataclass(frozen=True)
class Plan:
    """The grids of every LLM experiment for one profile (``[llm-sweeps.plan]``)."""

    sizes: tuple[int, ...]
    gammas: tuple[float, ...]
    baselines: tuple[str, ...]
    seeds: tuple[int, ...]  # fig 7
    critical_seeds: tuple[int, ...]  # figs 9 and 11 (smallest size)
    eps_gammas: tuple[float, ...]  # fig 8 (0.5, 1 and one beyond both γ_ε)
    eps_seeds: tuple[int, ...] = (0,)  # figs 8 and 10
    eps_nominal: tuple[float, ...] = (1e-5, 1e-12)  # a large model's ε: standard, relaxed
    d_large: int = 2048  # the large model fig 8's small one imitates
    dynamics_gammas: tuple[float, ...] = (0.5, 1.0)
    dynamics_steps: int = 0  # fig 10's run length (0: fig 8's runs as they are)
    workers: int | None = None  # pinned worker count (None: every core, smallinit.core.jobs)
    #: fig 7's seeds at the γ grid points other than 0.5 and 1 and for the baselines
    #: (None: ``seeds``; the γ = 0.5 / 1 comparison always gets every seed of ``seeds``)
    grid_seeds: tuple[int, ...] | None = None
    #: the size-scaling experiment (fig 12): its sizes (empty: no runs at this profile)
    #: and seeds; ε per size as fig 8's (``eps_nominal`` imitating ``d_large``)
    scaling_sizes: tuple[int, ...] = ()
    scaling_seeds: tuple[int, ...] = (0,)

    def __post_init__(self) -> None:
        check_fields(self, "plan")


def plan(profile: str) -> Plan:
    """The profile's ``[llm-sweeps.plan]``."""
    return config_from_dict(Plan, profiles.section(profile, TABLE).get("plan", {}),
                            where=f"{profile}.{TABLE}.plan")


def workers(profile: str) -> int | None:
    return plan(profile).workers


def base_config(profile: str, d_model: int) -> RunConfig:
    """The profile's ``[llm-sweeps.base]`` run config at width ``d_model`` (d_ff by the
    model's default rule; every other field the RunConfig default)."""
    table = profiles.section(profile, TABLE).get("base", {})
    return override(RunConfig(), {**table, "model.d_model": d_model},
                    where=f"{profile}.{TABLE}.base")


def small_eps(d: int, d_large: int, eps_large: float) -> float:
    """ε for width d with the same γ_ε as width ``d_large`` at ``eps_large`` (module doc)."""
    g = rmsnorm_gamma_threshold(d_large, eps_large)
    return float(f"{matching_eps(d, d_large, g, eps_large):.4g}")


def run(base: RunConfig, tags: dict[str, Any], **changes: Any) -> TrainSpec:
    """The training run of ``base`` with ``changes`` (dotted paths; ``gamma`` sets the init
    ``gamma:γ``), tagged ``tags``."""
    if "gamma" in changes:
        changes["init"] = gamma_scheme(changes.pop("gamma"))
    return TrainSpec(override(base, changes), dict(tags))


def eps_gating_grid(profile: str, the_plan: Plan, d: int, gammas, seeds) -> list[TrainSpec]:
    """(ε standard, relaxed) × (gate off, on) × ``gammas`` × ``seeds`` at width ``d``, ε
    imitating ``the_plan.d_large`` (module doc)."""
    base = base_config(profile, d)
    specs = []
    for eps_name, nominal in zip(("standard", "relaxed"), the_plan.eps_nominal, strict=True):
        eps = small_eps(d, the_plan.d_large, nominal)
        for gated in (False, True):
            for g in gammas:
                for seed in seeds:
                    specs.append(run(base, {
                        "size": d, "gamma": g, "init": gamma_scheme(g), "seed": seed,
                        "eps_setting": eps_name, "eps_nominal": nominal, "eps": eps,
                        "gated": gated, "d_large": the_plan.d_large},
                        gamma=g, seed=seed, **{"model.norm_eps": eps,
                                               "model.gated_attention": gated}))
    return specs
