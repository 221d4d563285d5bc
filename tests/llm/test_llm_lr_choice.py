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
    return load_config(RunConfig, None, [f"init=gamma:{gamma}", "model.d_model=32",
                                         "eval.held_out=halves"])


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
    assert interpolated(1.3, 4e-3, 1e-3) == float(f"{4e-3 * 0.25 ** 1.6:.3g}")  # beyond


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
    shared = TunedSpec(override(one, {"seed": 3}), {"seed": 3},
                       LRChoice(GRID, half, one, 0.5))
    assert shared.run_of(store).config.train.lr == 2e-3  # γ 1 at γ 0.5's rate
    assert shared.key != spec.key  # the identity says how the rate is chosen
    seed0 = TunedSpec(one, {"seed": 0}, choice).run_of(store)
    assert seed0.done  # seed 0 at lr* is the tuning run itself
    assert TunedSpec(override(one, {"train.lr": 9.0}), {}, choice).key == \
        TunedSpec(one, {}, choice).key  # the config's own rate plays no part


def test_a_tuning_run_without_a_tune_loss_is_refused(tmp_path):
    store = RunStore(tmp_path)
    cfg = plain(0.5)
    store.get_or_run(KIND, override(cfg, {"seed": 0, "train.lr": 5e-4}),
                     lambda run: {"val_loss": 3.0}, version=VERSION)
    with pytest.raises(lr_choice.ConfigError, match="has no tune_loss"):
        choose(store, cfg, GRID, compute=False)
