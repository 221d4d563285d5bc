"""Each claim's power at a profile's seeds (docs/science.md §13.2, 2): σ recovered from a
claims record (its per-seed values, or §13's 95% t interval), the power and seed counts of
smallinit.core.stats at α and α/m, and `smallinit figs --plan` printing them."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from smallinit.core import stats
from smallinit.study import power
from smallinit.study.claims import CLAIMS


def test_spread_from_a_13_1_interval_is_the_sample_sd_of_its_seeds():
    x = [0.021, -0.004, 0.035, 0.012, 0.018]
    e = stats.one_sample(x, 0.0)
    record = {"id": "small-init-lower-loss", "ci_low": e.ci_low, "ci_high": e.ci_high, "n_seeds": 5}
    assert power.spread(record) == pytest.approx(float(np.std(x, ddof=1)), rel=1e-12)
    with_values = {
        **record,
        "values": {"x": {str(s): v for s, v in enumerate(x[:3])}},
        "conditions": {"conditions": [{"series": "x"}]},
    }
    assert power.spread(with_values) == pytest.approx(float(np.std(x[:3], ddof=1)))
    assert math.isnan(
        power.spread({"id": "sinks-restrain", "ci_low": None, "ci_high": None, "n_seeds": 0})
    )
    # a §13 interval of S_B − n_B/n says nothing of §13.2's token statistic
    assert math.isnan(power.spread({**record, "id": "token-gains-context-constrained"}))


def test_power_rows_at_quick_use_the_plans_seeds_and_the_stats_power():
    sd = 0.018
    e = stats.one_sample([0.02 + sd * z for z in (-1.2, -0.4, 0.1, 0.5, 1.0)], 0.0)
    records = [{"id": "eps-restrains", "ci_low": e.ci_low, "ci_high": e.ci_high, "n_seeds": 5}]
    rows = {r["id"]: r for r in power.table("quick", records)}
    eps = rows["eps-restrains"]
    n = len(power.seeds_of("eps-restrains", "quick"))
    m = eps["family"]
    assert n == eps["n_seeds"] == 2 and 0 < m <= len(CLAIMS)  # quick: seeds 0, 1 at fig 8
    sigma = power.spread(records[0])
    assert eps["power"] == pytest.approx(stats.t_power(2, 0.01, sigma, 0.05))
    assert eps["power_holm"] == pytest.approx(stats.t_power(2, 0.01, sigma, 0.05 / m))
    assert eps["n_needed"] == stats.t_sample_size(0.01, sigma, 0.05, 0.9)
    assert eps["power_holm"] < eps["power"] and eps["n_needed_holm"] > eps["n_needed"]
    assert rows["sinks-restrain"]["n_needed"] is None  # no spread recorded
    assert rows["critical-init"]["effect_of_interest"] is None
    text = power.format_rows(list(rows.values()), "here")
    assert "no spread recorded" in text and f"n for 0.9: {eps['n_needed']}" in text


def test_figs_plan_prints_the_power_and_refuses_a_missing_spread_file(tmp_path, capsys):
    from smallinit.cli import main

    x = [0.03, 0.01, 0.02]
    e = stats.one_sample(x, 0.0)
    spread = tmp_path / "claims.json"
    spread.write_text(
        json.dumps(
            [
                {
                    "id": "small-init-lower-loss",
                    "ci_low": e.ci_low,
                    "ci_high": e.ci_high,
                    "n_seeds": 3,
                }
            ]
        )
    )
    assert (
        main(
            [
                "figs",
                "--plan",
                "--only",
                "6",
                "--profile",
                "quick",
                "--json",
                "--spread",
                str(spread),
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    rows = {r["id"]: r for r in out["power"]["claims"]}
    assert out["power"]["sd_source"] == str(spread)
    assert rows["small-init-lower-loss"]["sd"] == pytest.approx(0.01)
    assert (
        main(
            [
                "figs",
                "--plan",
                "--only",
                "6",
                "--profile",
                "quick",
                "--spread",
                str(tmp_path / "absent.json"),
            ]
        )
        == 2
    )
    assert "--spread" in capsys.readouterr().err


def test_figs_plan_text_prints_the_power_block_before_the_totals(capsys):
    from smallinit.cli import main

    assert main(["figs", "--plan", "--only", "6", "--profile", "quick"]) == 0
    out = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(out) if line.startswith("power (docs/science.md"))
    assert "nowhere" in out[head] or "bench-results/claims/quick.json" in out[head]
    assert any("small-init-lower-loss" in line for line in out[head:])
    assert out[-1].endswith("at profile quick")
