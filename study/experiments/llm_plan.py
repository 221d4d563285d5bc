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
from smallinit.core.errors import ConfigError
from smallinit.core.jobs import RunSpec
from smallinit.llm.run_config import RunConfig
from smallinit.llm.training.lr_choice import (
    MIN_TUNE_SEEDS,
    SEEDS,
    LRChoice,
    TunedSpec,
    tuning_specs,
)
from smallinit.llm.training.train_spec import TrainSpec
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
    #: peak learning rates tried per size at γ 0.5 and 1 (docs/science.md §13.1, 3; empty:
    #: every run at the base config's train.lr)
    lr_grid: tuple[float, ...] = ()
    #: fig 9's γ grid (empty: ``gammas``)
    critical_gammas: tuple[float, ...] = ()
    #: fig 7's arms beside the plain γ 0.5 / 1 runs: γ 1 at γ 0.5's learning rate, at every
    #: size; γ 1 at weight decay ``decay_arm`` (0: none), at the largest size
    shared_lr_arm: bool = False
    decay_arm: float = 0.0
    #: the tuning seeds of docs/science.md §13.2 (1): at least 3, none of them a report seed
    #: (empty: §13.1's seed 0 tunes)
    tune_seeds: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check_fields(self, "plan")
        if self.tune_seeds:
            report = {
                *self.seeds,
                *self.critical_seeds,
                *self.eps_seeds,
                *self.scaling_seeds,
                *(self.grid_seeds or ()),
            }
            if len(set(self.tune_seeds)) < MIN_TUNE_SEEDS or report & set(self.tune_seeds):
                raise ConfigError(
                    f"plan.tune_seeds {list(self.tune_seeds)}: at least {MIN_TUNE_SEEDS} "
                    f"distinct seeds, none of them a report seed (report seeds: "
                    f"{sorted(report)}; docs/science.md §13.2, 1)"
                )

    @property
    def tuning_seeds(self) -> tuple[int, ...]:
        """The seeds that tune the learning rates (§13.1: seed 0; §13.2: ``tune_seeds``)."""
        return self.tune_seeds or SEEDS


def plan(profile: str) -> Plan:
    """The profile's ``[llm-sweeps.plan]``."""
    return config_from_dict(
        Plan, profiles.section(profile, TABLE).get("plan", {}), where=f"{profile}.{TABLE}.plan"
    )


def workers(profile: str) -> int | None:
    return plan(profile).workers


def base_config(profile: str, d_model: int, *, probe: bool = False) -> RunConfig:
    """The profile's ``[llm-sweeps.base]`` run config at width ``d_model`` (d_ff by the
    model's default rule; every other field the RunConfig default); with ``probe``, the
    ``[llm-sweeps.probe]`` table laid over it (the reasoning probe's corpus, §13.1, 6)."""
    tables = profiles.section(profile, TABLE)
    cfg = override(
        RunConfig(),
        {**tables.get("base", {}), "model.d_model": d_model},
        where=f"{profile}.{TABLE}.base",
    )
    return (
        override(cfg, tables.get("probe", {}), where=f"{profile}.{TABLE}.probe") if probe else cfg
    )


def has_probe(profile: str) -> bool:
    """Whether the profile measures reasoning on a probe of its own (``[llm-sweeps.probe]``)
    rather than on its base corpus."""
    return "probe" in profiles.section(profile, TABLE)


def small_eps(d: int, d_large: int, eps_large: float) -> float:
    """ε for width d with the same γ_ε as width ``d_large`` at ``eps_large`` (module doc)."""
    g = rmsnorm_gamma_threshold(d_large, eps_large)
    return float(f"{matching_eps(d, d_large, g, eps_large):.4g}")


def spec(
    the_plan: Plan,
    base: RunConfig,
    tags: dict[str, Any],
    *,
    lr_gamma: float | None = None,
    **changes: Any,
) -> RunSpec:
    """The training run of ``base`` with ``changes`` (dotted paths; ``gamma`` sets the init
    ``gamma:γ``), tagged ``tags``. With the plan's ``lr_grid`` its learning rate is chosen
    (:class:`~smallinit.llm.training.lr_choice.TunedSpec`): the lr* of ``base`` at γ
    ``lr_gamma`` (default: the run's own γ), tuned on ``base`` at γ 0.5 and 1."""
    gamma = changes.pop("gamma", None)
    if gamma is not None:
        changes["init"] = gamma_scheme(gamma)
    cfg = override(base, changes)
    if not the_plan.lr_grid:
        return TrainSpec(cfg, dict(tags))
    g = lr_gamma if lr_gamma is not None else gamma
    if g is None:
        raise ConfigError(
            f"run {tags} is not a γ-rule run: with an lr_grid only γ runs get "
            "a learning rate (docs/science.md §13.1, 3); leave baselines out"
        )
    choice = LRChoice(
        the_plan.lr_grid, plain(base, 0.5), plain(base, 1.0), g, the_plan.tuning_seeds
    )
    return TunedSpec(cfg, dict(tags), choice)


def respec(spec: RunSpec, **changes: Any) -> RunSpec:
    """``spec`` with its config changed at dotted paths (its learning-rate choice kept)."""
    return spec.with_config(override(spec.config, changes))


def plain(base: RunConfig, gamma: float) -> RunConfig:
    """``base`` at γ: the plain run whose learning rate is tuned."""
    return override(base, {"init": gamma_scheme(gamma)})


def _tuning_of(profile: str, bases: list[RunConfig]) -> list[TrainSpec]:
    """The tuning seeds (§13.1: seed 0) at every rate of the plan's ``lr_grid``, γ 0.5 and 1,
    on each base config (none without an ``lr_grid``)."""
    the_plan = plan(profile)
    if not the_plan.lr_grid:
        return []
    return [
        s
        for base in bases
        for g in (0.5, 1.0)
        for s in tuning_specs(
            plain(base, g),
            the_plan.lr_grid,
            {"size": base.model.d_model, "gamma": g},
            the_plan.tuning_seeds,
        )
    ]


def tuning(profile: str) -> list[TrainSpec]:
    """The tuning runs of the profile's sweeps (every size of figs 7 and 12), computed
    before the runs that need their choice."""
    the_plan = plan(profile)
    return _tuning_of(
        profile,
        [
            base_config(profile, d)
            for d in dict.fromkeys((*the_plan.sizes, *the_plan.scaling_sizes))
        ],
    )


def critical_tuning(profile: str) -> list[TrainSpec]:
    """The tuning runs of fig 9's grid (smallest size): on the profile's reasoning probe
    when it has one (docs/science.md §13.1, 6), else on the sweeps' base."""
    d = plan(profile).sizes[0]
    return _tuning_of(profile, [base_config(profile, d, probe=has_probe(profile))])


def eps_gating_grid(profile: str, the_plan: Plan, d: int, gammas, seeds) -> list[RunSpec]:
    """(ε standard, relaxed) × (gate off, on) × ``gammas`` × ``seeds`` at width ``d``, ε
    imitating ``the_plan.d_large`` (module doc)."""
    base = base_config(profile, d)
    specs = []
    for eps_name, nominal in zip(("standard", "relaxed"), the_plan.eps_nominal, strict=True):
        eps = small_eps(d, the_plan.d_large, nominal)
        for gated in (False, True):
            for g in gammas:
                for seed in seeds:
                    specs.append(
                        spec(
                            the_plan,
                            base,
                            {
                                "size": d,
                                "gamma": g,
                                "init": gamma_scheme(g),
                                "seed": seed,
                                "eps_setting": eps_name,
                                "eps_nominal": nominal,
                                "eps": eps,
                                "gated": gated,
                                "d_large": the_plan.d_large,
                            },
                            gamma=g,
                            seed=seed,
                            **{"model.norm_eps": eps, "model.gated_attention": gated},
                        )
                    )
    return specs
