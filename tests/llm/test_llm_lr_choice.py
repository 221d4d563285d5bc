"""A learning rate per γ and size, chosen on the tune split (docs/science.md §13.1, 3)."""

import math

import pytest

from smallinit.core.config import load_config, override
from smallinit.core.errors import RunFailed
from smallinit.core.store import RunStore
from smallinit.llm.run_config import RunConfig
from smallinit.llm.training import lr_choice
from smallinit.llm.training.lr_choice import LRChoice, TunedSpec, choose, interpolated
from smallinit.llm.training.train import KIND, VERSION

GRID = (5e-4, 1e-3, 2e-3, 4e-3)


def plain(gamma: float) -> RunConfig:
    return load_config(
        RunConfig, None, [f"init=gamma:{gamma}", "model.d_model=32", "eval.held_out=halves"]
    )


def plant(store: RunStore, cfg: RunConfig, losses: dict[float, float]) -> None:
    """Finished tuning runs of ``cfg`` (seed 0) with these tune-split losses (inf: the run
    diverged and is a final failure)."""
    for lr, loss in losses.items():
        run_cfg = override(cfg, {"seed": 0, "train.lr": lr})

        def body(run, loss=loss):
            if math.isinf(loss):
                raise RunFailed("non-finite training loss")
            return {"tune_loss": loss, "val_loss": loss + 0.01}

        store.get_or_run(KIND, run_cfg, body, version=VERSION)


def test_the_rate_with_the_lowest_tune_loss_wins_ties_go_to_the_smaller(tmp_path):
    store = RunStore(tmp_path)
    cfg = plain(0.5)
    plant(store, cfg, {5e-4: 3.9, 1e-3: 3.5, 2e-3: 3.5, 4e-3: math.inf})
    assert choose(store, cfg, GRID, compute=False) == 1e-3


def test_an_edge_optimum_grows_the_grid_once(tmp_path):
    store = RunStore(tmp_path)
    cfg = plain(1.0)
    plant(store, cfg, {5e-4: 3.4, 1e-3: 3.5, 2e-3: 3.6, 4e-3: 3.9})
    assert choose(store, cfg, GRID, compute=False) is None  # waits for the run at 2.5e-4
    plant(store, cfg, {2.5e-4: 3.3})
    assert choose(store, cfg, GRID, compute=False) == 2.5e-4  # still an edge: no second step
    high = plain(0.5)
    plant(store, high, {5e-4: 3.9, 1e-3: 3.8, 2e-3: 3.7, 4e-3: 3.6, 8e-3: 3.65})
    assert choose(store, high, GRID, compute=False) == 4e-3


def test_untuned_gammas_take_the_log_linear_rate_through_the_tuned_points():
    assert interpolated(0.5, 3e-3, 1e-3) == 3e-3
    assert interpolated(1.0, 3e-3, 1e-3) == 1e-3
    assert interpolated(0.75, 3e-3, 1e-3) == 1.73e-3  # √(3e-3 · 1e-3), 3 digits
    assert interpolated(1.3, 4e-3, 1e-3) == float(f"{4e-3 * 0.25**1.6:.3g}")  # beyond


def test_a_tuned_run_is_the_llm_train_run_at_lr_star(tmp_path):
    store = RunStore(tmp_path)
    half, one = plain(0.5), plain(1.0)
    choice = LRChoice(GRID, half, one, 1.0)
    spec = TunedSpec(override(one, {"seed": 3}), {"seed": 3}, choice)
    pending = spec.run_of(store)
    assert pending.kind == "llm-tuned" and pending.state == "absent"
    plant(store, half, {5e-4: 3.9, 1e-3: 3.6, 2e-3: 3.5, 4e-3: 3.7})
    plant(store, one, {5e-4: 3.8, 1e-3: 3.4, 2e-3: 3.6, 4e-3: 3.9})
    run = spec.run_of(store)
    assert run.kind == KIND and run.config.train.lr == 1e-3 and run.config.seed == 3
    shared = TunedSpec(override(one, {"seed": 3}), {"seed": 3}, LRChoice(GRID, half, one, 0.5))
    assert shared.run_of(store).config.train.lr == 2e-3  # γ 1 at γ 0.5's rate
    assert shared.key != spec.key  # the identity says how the rate is chosen
    seed0 = TunedSpec(one, {"seed": 0}, choice).run_of(store)
    assert seed0.done  # seed 0 at lr* is the tuning run itself
    assert (
        TunedSpec(override(one, {"train.lr": 9.0}), {}, choice).key
        == TunedSpec(one, {}, choice).key
    )  # the config's own rate plays no part


def test_a_tuning_run_without_a_tune_loss_is_refused(tmp_path):
    store = RunStore(tmp_path)
    cfg = plain(0.5)
    store.get_or_run(
        KIND,
        override(cfg, {"seed": 0, "train.lr": 5e-4}),
        lambda run: {"val_loss": 3.0},
        version=VERSION,
    )
    with pytest.raises(lr_choice.ConfigError, match="has no tune_loss"):
        choose(store, cfg, GRID, compute=False)


# ----------------------------------------------------------------------------- §13.2 (1)
TUNE = (100, 101, 102)


def plant_seeds(store: RunStore, cfg: RunConfig, losses: dict[float, list[float]]) -> None:
    """Finished tuning runs of ``cfg`` at the tuning seeds :data:`TUNE`, one loss each."""
    for lr, per_seed in losses.items():
        for seed, loss in zip(TUNE, per_seed, strict=True):
            store.get_or_run(
                KIND,
                override(cfg, {"seed": seed, "train.lr": lr}),
                lambda run, loss=loss: {"tune_loss": loss},
                version=VERSION,
            )


# fair's d_model 128, γ 1 reading (docs/results.md): 1e-3 and 2e-3 end 0.006 nats apart, inside the
# seeds' spread (means 2.8947 and 2.8887, standard errors 0.0058 and 0.0049: combined 0.0076)
TIED = {
    5e-4: [2.95, 2.96, 2.97],
    1e-3: [2.885, 2.905, 2.894],
    2e-3: [2.880, 2.897, 2.889],
    4e-3: [2.93, 2.94, 2.95],
}


def test_rates_that_tie_within_their_standard_error_go_to_the_tie_rule():
    assert lr_choice.choose_by_mean(TIED, reference=2e-3) == 2e-3  # γ 0.5's rate is tied
    assert lr_choice.choose_by_mean(TIED) == 1e-3  # no reference: the smaller tied rate
    assert lr_choice.choose_by_mean(TIED, reference=4e-3) == 1e-3  # reference not tied
    # the same means with a spread a tenth as large: no tie, the lowest mean wins
    tight = {lr: [sum(v) / 3 + (x - sum(v) / 3) / 10 for x in v] for lr, v in TIED.items()}
    assert lr_choice.choose_by_mean(tight, reference=1e-3) == 2e-3
    diverged = {**TIED, 2e-3: [2.880, math.inf, 2.889]}  # one diverged seed: +∞ mean
    assert lr_choice.choose_by_mean(diverged, reference=2e-3) == 1e-3
    with pytest.raises(lr_choice.ConfigError, match=">= 3 tuning seeds"):
        lr_choice.choose_by_mean({1e-3: [2.9, 2.8], 2e-3: [2.9, 2.85]})


def test_a_planted_one_seed_tie_goes_to_the_rule_not_to_seed_100(tmp_path):
    """Seed 100 alone (§13.1's way) picks 2e-3 for γ 1 by 0.005 nats; the three tuning seeds
    cannot tell 1e-3 from 2e-3, and γ 0.5 chose 1e-3, so γ 1 runs at 1e-3 (§13.2, 1)."""
    store = RunStore(tmp_path)
    half, one = plain(0.5), plain(1.0)
    plant_seeds(
        store,
        half,
        {
            5e-4: [3.0, 3.02, 3.01],
            1e-3: [2.90, 2.91, 2.905],
            2e-3: [2.95, 2.96, 2.955],
            4e-3: [3.1, 3.2, 3.15],
        },
    )
    plant_seeds(store, one, TIED)
    assert choose(store, one, GRID, compute=False, seeds=TUNE[:1]) == 2e-3  # one seed
    assert choose(store, half, GRID, compute=False, seeds=TUNE) == 1e-3
    choice = LRChoice(GRID, half, one, 1.0, TUNE)
    assert choice.lr(store, compute=False) == 1e-3  # the tie rule: γ 0.5's rate
    run = TunedSpec(override(one, {"seed": 3}), {"seed": 3}, choice).run_of(store)
    assert run.config.train.lr == 1e-3 and run.config.seed == 3
    assert (
        TunedSpec(one, {}, choice).key != TunedSpec(one, {}, LRChoice(GRID, half, one, 1.0)).key
    )  # the tuning seeds are part of the choice's identity


def test_tuning_seeds_are_at_least_3_and_disjoint_from_the_report_seeds():
    from smallinit.core.errors import ConfigError
    from smallinit.study.experiments.llm_plan import Plan

    base = dict(
        sizes=(32,),
        gammas=(0.5, 1.0),
        baselines=(),
        seeds=(0, 1, 2),
        critical_seeds=(0,),
        eps_gammas=(0.5,),
    )
    assert Plan(**base, tune_seeds=(100, 101, 102)).tuning_seeds == (100, 101, 102)
    assert Plan(**base).tuning_seeds == (0,)  # §13.1: seed 0
    for bad in ((100, 101), (2, 100, 101), (100, 100, 101)):
        with pytest.raises(ConfigError, match="tune_seeds"):
            Plan(**base, tune_seeds=bad)
