"""Phase scan: S_w against theory's regimes and slope intervals (docs/science.md §2), failures,
CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("jax")

from smallinit.core.errors import RunFailed  # noqa: E402
from smallinit.core.store import RunStore  # noqa: E402
from smallinit.theory import phase  # noqa: E402
from smallinit.theory.phase import log_allowance  # noqa: E402
from smallinit.toy import scan as scan_module  # noqa: E402
from smallinit.toy.scan import ScanConfig, fit_slopes, run_scan  # noqa: E402

GRID = ScanConfig(
    gammas=(0.5, 1.0, 1.75), gamma_primes=(-0.5, 0.0, 0.5), widths=(250, 500, 1000, 2000), seeds=3
)


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    return run_scan(GRID, RunStore(tmp_path_factory.mktemp("runs")))


def _record(scan, g, gp):
    (rec,) = [r for r in scan.records if r["gamma"] == g and r["gamma_prime"] == gp]
    return rec


def test_fit_slopes_recovers_a_power_law_and_skips_failed_widths():
    widths = (100, 200, 400, 800)
    rd = 3.0 * np.asarray(widths, float)[:, None] ** np.array([[-0.5, 0.7]])
    status = np.zeros_like(rd, dtype=int)
    status[0, 1] = 2  # a diverged network: left out of its seed's fit
    rd[0, 1] = 1e9
    slopes, med = fit_slopes(rd, status, widths)
    np.testing.assert_allclose(slopes, [-0.5, 0.7])
    assert med == pytest.approx(0.1)


def test_sw_signs_agree_with_theory_where_delta_is_far_from_zero(scan):
    far = [r for r in scan.records if abs(r["delta"]) >= 0.25]
    assert len(far) >= 6
    for r in far:
        expected = np.sign(float(phase.delta(r["gamma"], r["gamma_prime"])))
        assert np.sign(r["S_w"]) == expected, r


@pytest.mark.parametrize("point", [(0.5, 0.0), (1.0, 0.0), (1.75, 0.0)])
def test_slope_inside_theory_interval_at_standard_points(scan, point):
    r = _record(scan, *point)
    lo, hi = (float(v) for v in phase.slope_interval(*point))
    if lo == hi:  # critical: RD stays O(1); finite widths leave a small slope
        assert abs(r["S_w"]) <= GRID.critical_tol, r
    elif r["regime"] == "linear":  # RD ≲ m^Δ log m: the log adds at most 1/ln(m_min)
        assert r["S_w"] <= hi + log_allowance(GRID.widths), r
        assert r["in_interval"]
    else:  # condensed: RD ≳ m^{Δ/2}, no log factor
        assert lo <= r["S_w"], r
        assert r["in_interval"]


def test_scan_is_stored_and_reused(scan):
    arrays = scan.arrays
    assert arrays["rd"].shape == (3, 3, 4, 3)
    assert (arrays["status"] == 0).all()
    # the engine's in-loop RD equals the kernels' measurement on the returned weights
    np.testing.assert_allclose(arrays["rd_engine"], arrays["rd"], rtol=1e-10)
    again = run_scan(GRID, RunStore(scan.run_path.rsplit("/toy-scan/", 1)[0]))
    np.testing.assert_array_equal(again.arrays["S_w"], arrays["S_w"])


def test_diverged_networks_are_recorded_and_the_scan_continues(tmp_path):
    cfg = ScanConfig(
        gammas=(0.5, 1.0),
        gamma_primes=(0.0,),
        widths=(100, 200),
        seeds=1,
        step_rule="fixed",
        lr=50.0,
        max_steps=3000,
    )
    res = run_scan(cfg, RunStore(tmp_path))
    status = res.arrays["status"]
    # NTK point: this fixed step blows it up (status 2) or kills every ReLU (1, budget)
    assert (status[0] != 0).all() and (status[0] == 2).any()
    assert (status[1] == 0).all()  # mean-field point converges
    assert res.records[0]["S_w"] is None and res.records[0]["failed_networks"] == 2
    assert res.records[1]["S_w"] is not None


def test_a_scan_where_everything_diverges_fails_as_a_run(tmp_path):
    cfg = ScanConfig(
        gammas=(0.5,),
        gamma_primes=(0.0,),
        widths=(100, 200),
        seeds=1,
        step_rule="fixed",
        lr=50.0,
        max_steps=3000,
    )
    store = RunStore(tmp_path)
    with pytest.raises(RunFailed, match="no network"):
        run_scan(cfg, store)
    (run,) = list(store.runs("toy-scan"))
    assert run.status()["state"] == "failed"


def test_cli_scan_json(tmp_path, capsys):
    from smallinit.cli import main

    rc = main(
        [
            "-q",
            "toy",
            "scan",
            "gammas=0.5,1.75",
            "gamma_primes=0",
            "widths=100,200",
            "seeds=1",
            "--json",
            "--runs-dir",
            str(tmp_path),
        ]
    )
    assert rc == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["regime"] for r in records] == ["linear", "condensed"]
    assert [r["agree"] for r in records] == [True, True]
    assert main(["toy", "scan", "widths=100", "--runs-dir", str(tmp_path)]) == 2


def test_an_interrupted_scan_resumes_from_its_finished_widths(tmp_path, monkeypatch):
    """A scan killed after its first width keeps that width (partial/ in the
    run dir) and the resumed result equals an uninterrupted scan's, array for array."""
    from smallinit.toy import twolayer

    cfg = ScanConfig(
        gammas=(0.5, 1.5), gamma_primes=(0.0,), widths=(20, 40, 80), seeds=2, max_steps=3000
    )
    whole = run_scan(cfg, RunStore(tmp_path / "a"))
    real = twolayer.train_batch
    calls, armed = [], [True]

    def failing(*args, **kw):
        calls.append(args[0].shape)
        if armed[0] and len(calls) == 2:
            raise RuntimeError("killed after the first width")
        return real(*args, **kw)

    monkeypatch.setattr(twolayer, "train_batch", failing)
    store = RunStore(tmp_path / "b")
    with pytest.raises(RuntimeError, match="killed"):
        run_scan(cfg, store)
    run = store.run("toy-scan", cfg, version=scan_module.VERSION)
    assert run.state == "failed" and (run.path / "partial" / "width-20.npz").is_file()
    calls.clear()
    armed[0] = False
    resumed = run_scan(cfg, store)
    assert len(calls) == 2  # widths 40 and 80 only; width 20 came from its file
    assert set(resumed.arrays) == set(whole.arrays)
    for key, value in whole.arrays.items():
        np.testing.assert_array_equal(resumed.arrays[key], value, err_msg=key)
    assert resumed.records == whole.records
    assert not (run.path / "partial").exists()  # folded into arrays.npz
