"""Figs 7 and 9 draw per-task, per-level reasoning from stored summaries, and fig 9's two
critical γ (accuracy knee, loss optimum) are the ones the runs imply."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from test_llm_reasoning import all_cells  # tests/llm is on the import path

from smallinit.llm.analysis.critical import best_gamma, excess_accuracy
from smallinit.llm.analysis.reasoning import Cell
from smallinit.llm.data import synthetic
from smallinit.llm.run_config import RunConfig
from smallinit.paper_figs import fig07_gamma_sweep, fig09_critical_init

GAMMAS = (0.3, 0.5, 0.7, 1.0, 1.3)


def _summary(gamma: float, seed: int, size: int = 32) -> dict:
    """Reasoning that grows with γ up to 0.7 and stays flat beyond (the knee is 0.7 at
    every seed), a held-out loss with its minimum at γ = 0.7 + 0.05·seed (parabola)."""
    rng = np.random.default_rng([seed, int(gamma * 10), size])
    summary = {
        "train_loss": 2.0 + 0.1 * gamma,
        "val_loss": 2.0 + (gamma - 0.7 - 0.05 * seed) ** 2,
        "acc_fact": 0.3,
    }
    for task, k in all_cells():
        chance = synthetic.chance(task, k)
        lift = 0.3 * min(gamma, 0.7) / 0.7 / k
        acc = min(1.0, chance + lift + 1e-4 * rng.standard_normal())
        summary.update(Cell(task, k, acc, chance, 200, 2.0 - lift, chance).summary_items())
    return summary


class FakeRun:
    def __init__(self, summary):
        self.summary, self.done, self.path = summary, True, "fake"

    def metrics(self):
        return [
            {"step": s, "loss": 6.0 * math.exp(-s / 60) + self.summary["train_loss"]}
            for s in range(10, 310, 10)
        ]


class FakePairs(list):
    def done(self):
        return list(self)


def _pairs(sizes, seeds):
    pairs = FakePairs()
    for size in sizes:
        cfg = RunConfig()
        cfg.model.d_model, cfg.model.n_layers, cfg.train.steps = size, 2, 300
        cfg.model.context, cfg.train.batch_size = 64, 16
        for g in GAMMAS:
            for seed in seeds:
                job = SimpleNamespace(
                    config=cfg,
                    tags={"size": size, "gamma": g, "seed": seed, "init": f"gamma:{g:g}"},
                )
                pairs.append((job, FakeRun(_summary(g, seed, size))))
    return pairs


class Ctx:
    def __init__(self, pairs, out):
        self.pairs, self.out = pairs, out

    def results(self, experiment):
        return self.pairs

    def save(self, fig, suffix=""):
        path = self.out / f"fig{suffix}.png"
        fig.savefig(path)
        return [path]


def test_excess_accuracy_pools_cells_above_their_baseline():
    s = _summary(0.7, 0)
    excess, se = excess_accuracy(s)
    lifts = [0.3 / k for _, k in all_cells()]
    assert excess == pytest.approx(np.mean(lifts), abs=0.01)
    assert 0 < se < 0.05
    assert math.isnan(excess_accuracy({"val_loss": 1.0})[0])


def test_fig9_reads_both_critical_gammas(tmp_path):
    seeds = [0, 1, 2]
    pairs = _pairs([32], seeds)
    rows = fig09_critical_init.collect(pairs)
    crit = fig09_critical_init.critical_gammas(rows)
    for seed in seeds:
        assert crit[seed]["acc"] == 0.7  # accuracy grows up to 0.7, flat beyond
        assert crit[seed]["loss"] == pytest.approx(0.7 + 0.05 * seed, abs=1e-9)


def test_fig9_draws(tmp_path, caplog):
    with caplog.at_level("INFO"):
        paths = fig09_critical_init.make(Ctx(_pairs([32], [0, 1, 2]), tmp_path))
    assert paths[0].stat().st_size > 10_000
    assert "critical γ from acc: γ_c = 0.700" in caplog.text


def test_fig7_draws_sizes_seeds_and_paired_effects(tmp_path, caplog):
    pairs = _pairs([32, 64], [0, 1, 2])
    with caplog.at_level("INFO"):
        paths = fig07_gamma_sweep.make(Ctx(pairs, tmp_path))
    assert paths[0].stat().st_size > 10_000
    text = caplog.text
    # γ = 1 gains 0.3·(1 − 0.5/0.7)/k accuracy over γ = 0.5 in every cell (paired)
    assert "logic d1: Δ = 0.086" in text and "arith d3: Δ = 0.029" in text
    # the held-out loss gain γ = 1 − γ = 0.5 per size is the parabola's difference
    expect = np.mean([(1 - 0.7 - 0.05 * s) ** 2 - (0.5 - 0.7 - 0.05 * s) ** 2 for s in range(3)])
    assert f"Δ = {expect:.3f}" in text
    assert best_gamma(GAMMAS, [_summary(g, 1)["val_loss"] for g in GAMMAS]) == pytest.approx(0.75)
