"""Condensation (docs/science.md §2, §3) and lazy-vs-rich (docs/science.md §4) in the toy
simulations."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")

from smallinit.core.store import RunStore  # noqa: E402


def test_condensation_score_high_when_condensed_low_when_linear(tmp_path):
    from smallinit.kernels.measure import condensation_baseline
    from smallinit.toy.condense import CondenseConfig, run

    cfg = CondenseConfig(gammas=(0.5, 1.75), gamma_primes=(0.0,), width=400)
    r = run(cfg, RunStore(tmp_path))
    assert (r["status"] == 0).all()
    linear, condensed = r["score"][0, 0], r["score"][1, 0]
    assert condensed > 0.9
    # linear regime: the neurons stay near their isotropic init (score near the d = 2
    # random baseline ≈ top_k·acos(t)/π ≈ 0.4), far below the condensed score
    base = condensation_baseline(cfg.width, 2, top_k=cfg.top_k, threshold=cfg.threshold)
    assert linear < base + 0.15
    assert r["clusters"][1, 0] < r["clusters"][0, 0]


def test_initial_condensation_p1_matches_theory_direction(tmp_path):
    """Small init, gradient descent (the flow theory describes), tanh (p = 1): the input
    weights align with ±normalize(Σ_i y_i x̃_i) and form at most 2p = 2 orientations."""
    from smallinit.toy.initial_condensation import InitialCondensationConfig, run

    cfg = InitialCondensationConfig(activation="tanh", optimizer="gd", lr=0.01, steps=150)
    r = run(cfg, RunStore(tmp_path))
    assert r["p"] == 1
    assert r["median_abs_cos_to_theory"] > 0.95
    assert r["mean_abs_cos_init"] < 0.5 < 0.9 < r["mean_abs_cos"]  # isotropic -> aligned
    assert r["lines"] <= 1 and r["clusters"] <= 2
    # a larger init does not condense in the same number of steps
    big = run(
        InitialCondensationConfig(
            activation="tanh", optimizer="gd", lr=0.01, steps=150, init_std=0.5
        ),
        RunStore(tmp_path),
    )
    assert big["median_abs_cos_to_theory"] < 0.9


@pytest.mark.parametrize("depth, alphas", [(2, (0.03, 0.3, 3.0)), (3, (0.3, 3.0))])
def test_diagonal_net_reaches_argmin_q_alpha(tmp_path, depth, alphas):
    from smallinit.toy.diagonal import DiagonalConfig, run

    r = run(DiagonalConfig(alphas=alphas, depth=depth), RunStore(tmp_path))
    assert (r["residual"] <= 1.001e-7).all()
    assert (r["rel_err"] < 0.05).all(), r["rel_err"]


def test_diagonal_net_goes_from_l2_to_l1(tmp_path):
    from smallinit.toy.diagonal import DiagonalConfig, run

    r = run(DiagonalConfig(alphas=(0.01, 10.0)), RunStore(tmp_path))
    small, large = 0, 1
    assert r["dist_l2"][large] < 0.01  # lazy: the minimum-ℓ2 interpolant
    assert r["dist_l1"][small] < r["dist_l1"][large] / 2  # rich: toward the minimum ℓ1
    assert np.abs(r["beta"][small]).sum() < np.abs(r["beta"][large]).sum()
