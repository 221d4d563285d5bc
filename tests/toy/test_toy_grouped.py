"""The grouped toy engine (kernels' ragged two-layer step, NumPy fallback here) against the
JAX engine: same stopping steps, statuses, RD and weights on a mixed-width batch; same S_w;
divergence; determinism; the engine choice in run_scan and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("jax")

from smallinit.core.errors import ConfigError  # noqa: E402
from smallinit.core.store import RunStore  # noqa: E402
from smallinit.toy import steprule  # noqa: E402
from smallinit.toy import twolayer as tl  # noqa: E402
from smallinit.toy.grouped_engine import train_grouped  # noqa: E402
from smallinit.toy.scan import (  # noqa: E402
    ScanConfig,
    _width_batch,
    fit_slopes,
    run_scan,
    simulate,
)

WIDTHS = (16, 40, 100)
# γ = 0.5 linear (NTK-like), 1 critical (mean field) at γ' = 0 / linear at γ' = 0.5,
# 1.75 condensed; networks ordered (γ, γ', seed) within each width
GRID = ScanConfig(gammas=(0.5, 1.0, 1.75), gamma_primes=(0.0, 0.5), widths=WIDTHS, seeds=2)


def _both(cfg: ScanConfig, settings):
    """The JAX engine per width, concatenated, and the grouped engine on all widths at once."""
    X, y = tl.reference_data()
    widths = cfg.widths
    batches = [_width_batch(cfg, m) for m in widths]
    ref = [tl.train_batch(*b, X, y, settings) for b in batches]
    a0 = [a for b in batches for a in b[0]]
    W0 = [w for b in batches for w in b[1]]
    k = np.concatenate([b[2] for b in batches])
    kp = np.concatenate([b[3] for b in batches])
    out = train_grouped(a0, W0, k, kp, X, y, settings)
    jax_out = {
        key: np.concatenate([r[key] for r in ref])
        for key in ("step", "status", "rd", "loss", "time", "hist_rd", "hist_loss")
    }
    jax_out["a"] = np.concatenate([r["a"].reshape(-1) for r in ref])
    jax_out["W"] = np.concatenate([r["W"].reshape(-1, 2) for r in ref])
    return jax_out, out


@pytest.mark.kernel_sensitive
def test_grouped_engine_reproduces_the_jax_engine_on_mixed_widths():
    s = tl.TrainSettings(max_steps=5000)
    ref, out = _both(GRID, s)
    np.testing.assert_array_equal(out["status"], ref["status"])
    conv = out["status"] == tl.CONVERGED
    assert conv.mean() > 0.8 and (out["loss"][conv] < s.tol).all()
    budget = out["status"] == tl.BUDGET  # the slowest condensed nets run out of steps
    assert (out["step"][budget] == s.max_steps).all() and (out["loss"][budget] > s.tol).all()
    assert not (out["status"] == tl.DIVERGED).any()
    # Summation orders differ (kernel/reduceat vs XLA matrix products), so the two runs agree to
    # rounding; a stop can move by one step only if a loss lands within rounding of tol.
    assert np.abs(out["step"] - ref["step"]).max() <= 1
    same = out["step"] == ref["step"]
    assert same.mean() >= 0.9
    steps = ref["step"]
    assert steps.max() > 3 * steps.min()  # the batch is heterogeneous: stragglers and fast ones
    np.testing.assert_allclose(out["rd"][same], ref["rd"][same], rtol=1e-9)
    np.testing.assert_allclose(out["time"][same], ref["time"][same], rtol=1e-9)
    np.testing.assert_allclose(out["loss"][same], ref["loss"][same], rtol=1e-6)
    rows = np.repeat(same, np.diff(out["offsets"]))
    np.testing.assert_allclose(out["W"][rows], ref["W"][rows], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(out["a"][rows], ref["a"][rows], rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(np.isnan(out["hist_rd"]), np.isnan(ref["hist_rd"]))
    np.testing.assert_allclose(out["hist_rd"], ref["hist_rd"], rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(out["hist_loss"], ref["hist_loss"], rtol=1e-6)
    # the regimes differ as they should: RD at the stop far larger at the condensed point
    rd = out["rd"].reshape(len(WIDTHS), 3, 2, 2)  # (width, γ, γ', seed)
    assert (rd[:, 2] > 5 * rd[:, 0]).all()


@pytest.mark.kernel_sensitive
def test_diverging_network_is_recorded_as_diverged_and_the_batch_goes_on():
    # a fixed step that suits the mean-field point is far too large for the NTK point
    s = tl.TrainSettings(step_rule="fixed", lr=50.0, max_steps=4000)
    cfg = ScanConfig(gammas=(0.5, 1.0), gamma_primes=(0.0,), widths=(40, 100), seeds=2)
    ref, out = _both(cfg, s)
    np.testing.assert_array_equal(out["status"], ref["status"])
    status = out["status"].reshape(2, 2, 2)
    assert (status[:, 0] == tl.DIVERGED).any()  # NTK: diverged at some width
    assert (status[:, 1] == tl.CONVERGED).all()  # mean field: still converges
    conv = out["status"] == tl.CONVERGED
    np.testing.assert_array_equal(out["step"][conv], ref["step"][conv])


def test_grouped_engine_is_deterministic_and_seed_dependent():
    X, y = tl.reference_data()
    a0, W0, k, kp = _width_batch(ScanConfig(gammas=(1.25,), gamma_primes=(-0.25,)), 24)
    a1, W1, k1, kp1 = _width_batch(ScanConfig(gammas=(1.25,), gamma_primes=(-0.25,), seeds=1), 36)
    args = (
        list(a0) + list(a1),
        list(W0) + list(W1),
        np.r_[k, k1],
        np.r_[kp, kp1],
        X,
        y,
        tl.TrainSettings(max_steps=4000),
    )
    one, two = train_grouped(*args), train_grouped(*args)
    for key in ("rd", "loss", "step", "W", "a", "hist_rd"):
        np.testing.assert_array_equal(one[key], two[key])
    assert one["rd"][0] != pytest.approx(one["rd"][1], rel=1e-3)


@pytest.mark.kernel_sensitive
def test_scan_slopes_agree_between_engines_and_with_theory():
    cfg = ScanConfig(
        gammas=(0.5, 1.75), gamma_primes=(0.0,), widths=(40, 80, 160), seeds=2, max_steps=6000
    )
    jax_sim = simulate(cfg, engine="batched")
    grp_sim = simulate(cfg, engine="grouped")
    np.testing.assert_array_equal(grp_sim["status"], jax_sim["status"])
    np.testing.assert_allclose(grp_sim["rd"], jax_sim["rd"], rtol=1e-8)
    np.testing.assert_allclose(grp_sim["rd_engine"], grp_sim["rd"], rtol=1e-10)
    _, sw_jax = fit_slopes(jax_sim["rd"], jax_sim["status"], cfg.widths)
    _, sw_grp = fit_slopes(grp_sim["rd"], grp_sim["status"], cfg.widths)
    np.testing.assert_allclose(sw_grp, sw_jax, atol=1e-8)
    assert sw_grp[0, 0] < 0 < sw_grp[1, 0]  # linear point negative, condensed positive


def test_run_scan_engine_is_a_separate_run_and_the_jax_key_is_unchanged(tmp_path):
    from smallinit.core.runs import config_key
    from smallinit.toy.scan import KIND, VERSION

    cfg = ScanConfig(gammas=(1.75,), gamma_primes=(0.0,), widths=(20, 40), seeds=1, max_steps=4000)
    store = RunStore(tmp_path)
    grp = run_scan(cfg, store, engine="grouped")
    jx = run_scan(cfg, store)
    assert grp.run_path != jx.run_path
    assert jx.run_path.endswith(config_key(KIND, cfg, VERSION))
    np.testing.assert_allclose(grp.arrays["S_w"], jx.arrays["S_w"], atol=1e-8)
    with pytest.raises(ConfigError, match="engine"):
        run_scan(cfg, store, engine="cuda")
    with pytest.raises(ConfigError, match="ReLU only"):
        run_scan(ScanConfig(widths=(20, 40), activation="tanh"), store, engine="grouped")


def test_cli_scan_engine_option(tmp_path, capsys):
    from smallinit.cli import main

    argv = [
        "toy",
        "scan",
        "gammas=1.75",
        "gamma_primes=0",
        "widths=20,40",
        "seeds=1",
        "max_steps=4000",
        "--runs-dir",
        str(tmp_path),
        "--json",
    ]
    assert main(argv + ["--engine", "grouped"]) == 0
    grouped = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    default = json.loads(capsys.readouterr().out)
    assert grouped[0]["S_w"] == pytest.approx(default[0]["S_w"], abs=1e-8)
    assert grouped[0]["S_w"] > 0
    with pytest.raises(SystemExit) as exc:
        main(argv + ["--engine", "torch"])
    assert exc.value.code == 2


def test_shared_top_eigenvalue_bound_brackets_lambda_max():
    rng = np.random.default_rng(1)
    J = rng.normal(size=(50, 4, 7))
    K = J @ np.swapaxes(J, -1, -2)
    lam = np.linalg.eigvalsh(K)[:, -1]
    bound = steprule.top_eigenvalue_bound(K, np)
    assert (bound >= lam * (1 - 1e-12)).all()
    assert (bound <= 4 ** (1 / 16) * lam * (1 + 1e-12)).all()
    assert (bound > 1.001 * lam).any() or np.allclose(bound, lam)
