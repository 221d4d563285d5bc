"""The comparison table on stored fake results with known slopes: theory's FFN points,
slope fits, regime agreement, intervals, failed runs, CSV/JSON."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from smallinit.compare.comparison import CompareConfig
from smallinit.compare.run import theory_points
from smallinit.compare.table import (
    build_table,
    fit_layer_slopes,
    format_table,
    to_csv,
)
from smallinit.core.errors import ConfigError
from smallinit.core.store import RunStore
from smallinit.theory.phase import log_allowance, slope_agrees, slope_in_interval
from smallinit.toy import scan


def cfg_for(gammas, widths=(32, 64, 128)) -> CompareConfig:
    return CompareConfig(gammas=tuple(gammas), widths=tuple(widths))


def fake_llm(cfg, slopes: dict, *, failed=(), c=0.05, score=0.3):
    """Stored-run entries whose RD is c·m^s exactly (m = d_ff), per layer s from ``slopes``
    (γ -> per-layer FFN slopes; Q/K slopes are the FFN slopes + 0.1)."""
    out = []
    for g in cfg.gammas:
        for w in cfg.widths:
            m = cfg.ffn_ratio * w
            if (g, w) in failed:
                out.append({"gamma": g, "width": w, "state": "failed", "reason": "nan"})
                continue
            layers = [
                {
                    "layer": i,
                    "rd_ffn": c * m**s,
                    "rd_qk": 2 * c * m ** (s + 0.1),
                    "dw_rms": c * m ** (s - g) / 2,
                    "score": score + 0.1 * i,
                    "score_init": 0.01,
                    "clusters": 3,
                    "m": m,
                }
                for i, s in enumerate(slopes[g])
            ]
            out.append(
                {"gamma": g, "width": w, "state": "done", "layers": layers, "val_loss": 2.0 - g}
            )
    return out


def fake_toy(values):
    return [{"S_w": s, "score": sc, "score_init": 0.46} for s, sc in values]


def stored(tmp_path, name, obj):
    """Round-trip through a run directory, as the comparison stores its measurements."""
    run = RunStore(tmp_path).writer("compare-fake", {"name": name})
    run.start()
    run.write_json(name, obj)
    return run.read_json(name)


def test_theory_points_are_2gamma_0_under_proportional_widths():
    points = theory_points(cfg_for([0.3, 0.5, 0.75]))
    assert [(p["gamma_value"], p["gamma_prime_value"]) for p in points] == [
        (0.6, 0.0),
        (1.0, 0.0),
        (1.5, 0.0),
    ]
    assert [p["regime"] for p in points] == ["linear", "critical", "condensed"]
    # linear: S_w ≤ Δ = 2γ − 1; condensed: S_w ≥ Δ/2
    assert points[0]["slope_lo_value"] is None
    assert points[0]["slope_hi_value"] == pytest.approx(-0.4)
    assert points[2]["slope_lo_value"] == pytest.approx(0.25)
    assert points[2]["slope_hi_value"] is None


def test_slope_fit_recovers_known_power_laws():
    widths = [128, 256, 512]
    rd = np.array([[0.1 * m**-0.5 for m in widths], [3.0 * m**0.75 for m in widths]])
    slopes = fit_layer_slopes(rd, np.array([True, True, True]), widths)
    assert slopes == pytest.approx([-0.5, 0.75], abs=1e-12)
    # a failed width is left out; the other two still give the exact slope
    rd_bad = rd.copy()
    rd_bad[:, 1] = 1e6
    assert fit_layer_slopes(rd_bad, np.array([True, False, True]), widths) == pytest.approx(
        [-0.5, 0.75], abs=1e-12
    )
    # one usable width: no slope
    assert np.isnan(fit_layer_slopes(rd, np.array([False, False, True]), widths)).all()


def test_toy_scan_and_comparison_grade_by_theorys_one_rule():
    """The same toy slopes graded by the toy scan (scan.compare) and by the comparison
    (build_table) give the same verdicts, which are theory's slope_agrees /
    slope_in_interval; the slopes sit on the boundaries of the rule."""
    cfg = cfg_for([0.3, 0.5, 0.75])  # toy points (0.6, 0) linear Δ = −0.4, (1, 0) critical,
    points = theory_points(cfg)  # (1.5, 0) condensed Δ = 0.5
    tol, top = cfg.critical_tol, -0.4 + log_allowance(cfg.toy_widths)
    cases = [  # (linear, critical, condensed) slopes
        (0.0, tol, 0.25),  # sign 0 is not "falls"; |S_w| = tol is critical; Δ/2 is inside
        (top, -tol, 0.25 - 1e-12),  # linear top of the interval (with the log allowance)
        (top + 1e-9, tol + 1e-9, 0.0),
        (-1e-12, 0.0, 1e-12),
        (None, None, None),
    ]
    for values in cases:
        toy = fake_toy([(v, 0.5) for v in values])
        llm = fake_llm(cfg, {g: [0.0] for g in cfg.gammas})
        records = build_table(cfg, points, toy, llm)
        grid = scan.ScanConfig(
            gammas=(0.6, 1.0, 1.5), gamma_primes=(0.0,), widths=cfg.toy_widths, critical_tol=tol
        )
        s_w = np.array([[np.nan if v is None else v] for v in values])
        by_scan = scan.compare(grid, s_w, np.zeros((3, 1), int))
        for r, q, v, p in zip(records, by_scan, values, points, strict=True):
            assert r["regime"] == q["regime"] == p["regime"]
            expect = slope_agrees(p["regime"], v, tol)
            inside = slope_in_interval(
                p["regime"], p["slope_lo_value"], p["slope_hi_value"], v, cfg.toy_widths, tol
            )
            assert r["toy_agree"] is q["agree"] is expect, (values, r["regime"])
            assert r["toy_in_interval"] is q["in_interval"] is inside, (values, r["regime"])
    # spot checks of the boundary verdicts themselves
    assert slope_agrees("linear", 0.0, tol) is False
    assert slope_agrees("critical", tol, tol) is True
    assert slope_in_interval("linear", None, -0.4, top, cfg.toy_widths, tol) is True
    assert slope_in_interval("linear", None, -0.4, top + 1e-9, cfg.toy_widths, tol) is False


def test_table_from_stored_fake_runs(tmp_path):
    cfg = cfg_for([0.3, 0.5, 1.0])
    slopes = {0.3: [-0.5, 0.3], 0.5: [0.1, -0.05], 1.0: [0.8, 0.2]}
    llm = stored(tmp_path, "measurements.json", fake_llm(cfg, slopes))
    toy = stored(tmp_path, "toy.json", fake_toy([(-0.41, 0.46), (-0.03, 0.73), (0.5, 0.99)]))
    records = build_table(cfg, theory_points(cfg), toy, llm)

    lin, crit, cond = records
    assert [r["regime"] for r in records] == ["linear", "critical", "condensed"]
    for r in records:
        assert r["llm_S_w"] == pytest.approx(slopes[r["gamma"]], abs=1e-9)
        assert r["llm_S_w_qk"] == pytest.approx([s + 0.1 for s in slopes[r["gamma"]]], abs=1e-9)
        assert r["toy_agree"] is True
    # linear: layer 0 falls (agrees), layer 1 grows (does not): the row does not agree
    assert lin["llm_agree"] == [True, False] and lin["agree"] is False
    assert lin["llm_in_interval"] == [True, False]
    # critical: both |S_w| ≤ 0.15
    assert crit["llm_agree"] == [True, True] and crit["agree"] is True
    # condensed: both grow; only layer 0 reaches Δ/2 = 0.5
    assert cond["agree"] is True and cond["llm_in_interval"] == [True, False]
    # scores at the largest width, per layer, beside the init score
    assert cond["llm_score"] == pytest.approx([0.3, 0.4]) and cond["llm_score_width"] == 128
    assert cond["llm_score_init"] == [0.01, 0.01]
    assert cond["llm_rd_ffn"]["64"][0] == pytest.approx(0.05 * 256**0.8)
    assert cond["llm_dw_rms_ffn"]["128"][1] == pytest.approx(0.025 * 512**-0.8)
    assert cond["llm_val_loss"] == {"32": 1.0, "64": 1.0, "128": 1.0}

    text = format_table(records)
    assert "transformer agrees with theory (sign of S_w, every layer): 2/3 γ; toy: 3/3" in text
    assert text.splitlines()[2].split()[-3:] == ["yes/no", "yes", "no"]

    rows = list(csv.DictReader(io.StringIO(to_csv(records))))
    assert [float(r["gamma"]) for r in rows] == [0.3, 0.5, 1.0]
    assert float(rows[0]["llm_S_w_L1"]) == pytest.approx(0.3)
    assert rows[0]["slope_lo"] == "" and float(rows[0]["slope_hi"]) == pytest.approx(-0.4)
    assert [r["agree"] for r in rows] == ["False", "True", "True"]


def test_failed_runs_are_left_out_of_the_fit(tmp_path):
    cfg = cfg_for([0.3, 1.0])
    slopes = {0.3: [-0.5, -0.6], 1.0: [0.8, 0.7]}
    failed = {(0.3, 64), (1.0, 64), (1.0, 128)}
    records = build_table(
        cfg,
        theory_points(cfg),
        fake_toy([(None, None), (0.5, 0.99)]),
        fake_llm(cfg, slopes, failed=failed),
    )
    lin, cond = records
    assert lin["llm_S_w"] == pytest.approx([-0.5, -0.6], abs=1e-9)
    assert lin["llm_runs_failed"] == [64] and lin["agree"] is True
    assert lin["toy_S_w"] is None and lin["toy_agree"] is None and lin["toy_score"] is None
    # one width left at γ = 1: no slope, agreement undecided; scores from width 32
    assert cond["llm_S_w"] == [None, None] and cond["agree"] is None
    assert cond["llm_score_width"] == 32
    assert "1/1 γ" in format_table(records)


def test_missing_transformer_result_is_an_error():
    cfg = cfg_for([0.5])
    llm = [e for e in fake_llm(cfg, {0.5: [0.0, 0.0]}) if e["width"] != 64]
    with pytest.raises(ValueError, match=r"γ=0.5 at widths \[64\]"):
        build_table(cfg, theory_points(cfg), fake_toy([(0.0, 0.5)]), llm)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"widths": (64,)}, "at least two widths"),
        ({"widths": (64, 64)}, "duplicates"),
        ({"widths": (70, 64)}, "width 70 is not allowed"),
        ({"gammas": (0.5, 2.5)}, "gamma 2.5 is not allowed"),
        ({"gammas": ()}, "gammas is empty"),
    ],
)
def test_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        CompareConfig(**kwargs)


def test_llm_runs_are_proportional_with_the_gamma_init():
    cfg = cfg_for([0.75], widths=(16, 32, 128))
    runs = [cfg.llm_run(0.75, w) for w in cfg.widths]
    assert [r.model.ffn_dim for r in runs] == [64, 128, 512]
    assert [r.model.n_heads for r in runs] == [1, 1, 4]
    assert {r.init for r in runs} == {"gamma:0.75"}
    # a fixed token budget: same steps, batch and context at every width
    assert len({(r.train.steps, r.train.batch_size, r.model.context) for r in runs}) == 1
