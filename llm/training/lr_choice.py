"""A peak learning rate chosen per γ and size on the tune split (docs/science.md §13.1, 3).

For a plain run config (one size, one γ) seed 0 trains at every learning rate of a grid;
lr* is the rate with the lowest ``tune_loss`` at the end (the first half of the held-out
split, ``eval.held_out = "halves"``; a tie goes to the smaller rate, a run that diverged
counts as +∞). When lr* is at an edge of the grid, the grid grows once by a factor of 2
beyond that edge. A run at a γ that was not tuned takes the log-linear rate through the two
tuned points γ = 0.5 and γ = 1 at the same size::

    lr*(γ) = lr*(0.5) · (lr*(1) / lr*(0.5)) ^ ((γ − 0.5) / 0.5)     (3 significant digits)

With at least 3 tuning seeds (docs/science.md §13.2, 1; a profile's ``tune_seeds``, disjoint
from its report seeds) every tuning seed trains at every rate and :func:`choose_by_mean`
decides: the lowest mean tune loss, and between rates that tie within their combined
standard error the rate of the reference γ 0.5, else the smallest.

:class:`TunedSpec` is a pretraining run whose learning rate is chosen so: its run is the
``llm-train`` run of its config at lr*, known once the tuning runs are done
(:meth:`TunedSpec.run_of`); computing it computes what the choice still needs first.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from smallinit.core.config import config_to_dict, override
from smallinit.core.errors import ConfigError
from smallinit.core.jobs import RunSpec
from smallinit.core.runs import Run, config_key
from smallinit.core.store import RunStore
from smallinit.llm.run_config import RunConfig
from smallinit.llm.training.population import population_key, train_populations
from smallinit.llm.training.train import KIND, VERSION, train
from smallinit.llm.training.train_spec import TrainSpec

TUNED = (0.5, 1.0)  # the γ at which learning rates are tuned; others are interpolated
TUNE_SEED = 0
SEEDS = (TUNE_SEED,)  # §13.1 (3): seed 0 alone tunes
MIN_TUNE_SEEDS = 3  # §13.2 (1): the mean rule needs at least this many tuning seeds


def grid_runs(
    cfg: RunConfig, rates: tuple[float, ...], seeds: tuple[int, ...] = SEEDS
) -> list[RunConfig]:
    """The tuning runs of the plain config ``cfg``: every tuning seed (§13.1: seed 0) at
    every rate of ``rates``."""
    return [override(cfg, {"seed": s, "train.lr": lr}) for lr in rates for s in seeds]


def tuning_specs(
    cfg: RunConfig, grid: tuple[float, ...], tags: dict[str, Any], seeds: tuple[int, ...] = SEEDS
) -> list[TrainSpec]:
    """The grid's tuning runs as specs for the job driver (the edge extension, when the
    choice needs it, is computed by the runs that need the choice)."""
    return [
        TrainSpec(
            c,
            {
                **tags,
                "lr": c.train.lr,
                "tuning": True,
                **({"seed": c.seed} if seeds != SEEDS else {}),
            },
        )
        for c in grid_runs(cfg, grid, seeds)
    ]


def choose_by_mean(losses: dict[float, list[float]], reference: float | None = None) -> float:
    """§13.2 (1): the rate of ``losses`` (rate -> tune losses over the tuning seeds, +∞ for a
    run that diverged) by mean tune loss m_r with standard error se_r = sd/√T (ddof 1).
    The tie set: every rate with m_r − m_b < √(se_b² + se_r²), b the lowest mean (ties in
    the mean: the smaller rate). The choice: ``reference`` (the rate the reference γ 0.5
    chose) if it is in the tie set, else the smallest rate of the tie set."""
    counts = {len(v) for v in losses.values()}
    if len(counts) != 1 or min(counts) < MIN_TUNE_SEEDS:
        raise ConfigError(
            f"a learning rate by mean tune loss needs the same >= "
            f"{MIN_TUNE_SEEDS} tuning seeds at every rate (got "
            f"{sorted(counts)} per rate; docs/science.md §13.2, 1)"
        )
    mean = {r: math.fsum(v) / len(v) for r, v in losses.items()}
    se = {
        r: (statistics.stdev(v) / math.sqrt(len(v)) if math.isfinite(mean[r]) else math.inf)
        for r, v in losses.items()
    }
    best = min(sorted(losses), key=lambda r: mean[r])
    if not math.isfinite(mean[best]):
        return min(losses)  # every rate diverged: the smallest (its runs say so)
    tied = [
        r
        for r in sorted(losses)
        if math.isfinite(mean[r]) and mean[r] - mean[best] < math.hypot(se[best], se[r])
    ] + [best]
    return reference if reference in tied else min(tied)


def _tune_loss(run: Run) -> float | None:
    """A finished tuning run's tune-split loss (+∞ for a run that diverged); None while it
    is not finished."""
    if run.failed_for_good:
        return math.inf
    if not run.done:
        return None
    loss = run.summary.get("tune_loss")
    if loss is None:
        raise ConfigError(
            f"tuning run {run.path} has no tune_loss: a learning rate is chosen "
            "on the tune split (eval.held_out = 'halves')"
        )
    return float(loss) if math.isfinite(loss) else math.inf


def choose(
    store: RunStore,
    cfg: RunConfig,
    grid: tuple[float, ...],
    *,
    compute: bool,
    seeds: tuple[int, ...] = SEEDS,
    reference: float | None = None,
) -> float | None:
    """lr* of the plain config ``cfg`` over ``grid`` (module doc): with one tuning seed
    (§13.1) the lowest tune loss, with ``seeds`` of at least 3 (§13.2) :func:`choose_by_mean`
    with ``reference``; with ``compute`` the tuning runs still missing are trained here
    first, else None until they are done."""
    rates = sorted(grid)
    while True:
        losses: dict[float, list[float]] = {}
        for c in grid_runs(cfg, tuple(rates), seeds):
            loss = _tune_loss(store.run(KIND, c, version=VERSION))
            if loss is None:
                if not compute:
                    return None
                loss = _tune_loss(train(c, runs_dir=store.root))
                if loss is None:
                    raise ConfigError(f"tuning run at lr={c.train.lr} did not finish")
            losses.setdefault(c.train.lr, []).append(loss)
        if len(seeds) >= MIN_TUNE_SEEDS:
            best = choose_by_mean(losses, reference)
        else:
            best = min(rates, key=lambda lr: (losses[lr][0], lr))
        if len(rates) == len(grid) and best in (rates[0], rates[-1]):
            rates = sorted([*rates, best / 2 if best == rates[0] else best * 2])
            continue
        return best


def interpolated(gamma: float, at_half: float, at_one: float) -> float:
    """lr*(γ) through the tuned points (module doc)."""
    lr = at_half * (at_one / at_half) ** ((gamma - TUNED[0]) / (TUNED[1] - TUNED[0]))
    return float(f"{lr:.3g}")


@dataclass(frozen=True)
class LRChoice:
    """How a run's peak learning rate is chosen: ``grid`` tried on the tuning ``seeds``
    (§13.1: seed 0; §13.2: at least 3, γ 0.5's rate the reference of γ 1's tie rule) of
    the plain configs ``at_half`` (γ 0.5) and ``at_one`` (γ 1) of its size, and the γ whose
    lr* the run takes (``gamma``; interpolated when it is neither)."""

    grid: tuple[float, ...]
    at_half: RunConfig
    at_one: RunConfig
    gamma: float
    seeds: tuple[int, ...] = SEEDS

    def lr(self, store: RunStore, *, compute: bool) -> float | None:
        def at(cfg: RunConfig, reference: float | None = None) -> float | None:
            return choose(
                store, cfg, self.grid, compute=compute, seeds=self.seeds, reference=reference
            )

        mean_rule = len(self.seeds) >= MIN_TUNE_SEEDS
        if self.gamma == TUNED[0]:
            return at(self.at_half)
        half = at(self.at_half) if mean_rule or self.gamma != TUNED[1] else None
        if mean_rule and half is None:
            return None  # γ 1's tie rule needs γ 0.5's rate first
        one = at(self.at_one, half if mean_rule else None)
        if self.gamma == TUNED[1]:
            return one
        return None if half is None or one is None else interpolated(self.gamma, half, one)


@dataclass
class TunedSpec(RunSpec):
    """A pretraining run whose peak learning rate is chosen (:class:`LRChoice`); its
    ``config``'s own ``train.lr`` is replaced by lr*."""

    kind = KIND
    version = VERSION
    choice: LRChoice | None = None

    @property
    def key(self) -> str:
        """The key of the run before lr* is known: its config without the learning rate
        and how that is chosen (the run itself is keyed as any llm-train run)."""
        data = config_to_dict(self.config)
        data["train"].pop("lr")
        return config_key("llm-tuned", {"run": data, "choice": _plain(self.choice)}, self.version)

    def chosen(self, store: RunStore, *, compute: bool = False) -> RunConfig | None:
        """The run's config at lr* (None while the choice waits for tuning runs)."""
        lr = self.choice.lr(store, compute=compute)
        return None if lr is None else override(self.config, {"train.lr": lr})

    def run_of(self, store: RunStore) -> Run:
        cfg = self.chosen(store)
        if cfg is None:  # not chosen yet: a run that is not there
            return store.run("llm-tuned", {"pending": self.key}, version=self.version)
        return store.run(KIND, cfg, version=self.version)

    def compute(self, store: RunStore, force: bool) -> Run:
        return train(self.chosen(store, compute=True), runs_dir=store.root, force=force)

    def population_key(self, mode: str) -> str | None:
        """The run's shape where it trains in a population (the learning rate is no part of
        it, so it is known before lr* is)."""
        return population_key(self.config, mode)

    @classmethod
    def compute_population(
        cls, specs: list[RunSpec], store: RunStore, force: bool, execution: str = "eager"
    ) -> None:
        """The runs of ``specs`` (one shape) at their lr* as populations."""
        train_populations(
            [s.chosen(store, compute=True) for s in specs],
            runs_dir=store.root,
            force=force,
            execution=execution,
        )


def _plain(choice: LRChoice) -> dict[str, Any]:
    """The choice in a run key (the tuning seeds only where they are not §13.1's seed 0, so
    §13.1's keys stay as they are)."""
    seeds = {"tune_seeds": list(choice.seeds)} if choice.seeds != SEEDS else {}
    return {
        "grid": list(choice.grid),
        "gamma": choice.gamma,
        "at_half": config_to_dict(choice.at_half),
        "at_one": config_to_dict(choice.at_one),
        **seeds,
    }
