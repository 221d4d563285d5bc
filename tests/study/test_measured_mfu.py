"""The full profile's hours at the MFU the newest committed GPU check measured: the full
profile's own first run when the check ran it, else the compiled throughput model; dry
checks and checks that measured neither are passed over; the plan names the file."""

from __future__ import annotations

import json

import pytest

from smallinit.llm.training import cost
from smallinit.study import experiments, measured_mfu

FIRST = experiments.specs("gamma-sweep", "full")[0]


def check(rate=None, key=FIRST.key, compiled=None, dry=False) -> dict:
    parts = {"compiled": {"status": "ok", "result": {"mfu": compiled}}}
    if rate is not None:
        parts["full_run"] = {
            "status": "ok",
            "result": {"last_tok_per_s": rate, "key_of_the_full_run": key},
        }
    return {"dry": dry, "parts": parts}


def write(root, date, data):
    (root / date).mkdir()
    (root / date / "gpu_check.json").write_text(json.dumps(data))


def test_the_full_runs_own_tokens_per_second_give_the_mfu():
    got = measured_mfu.from_check(check(rate=2e6, compiled=0.39), FIRST)
    per_token = cost.training_flops(FIRST.config.model, 1)
    assert got["part"] == "full_run"
    assert got["mfu"] == pytest.approx(2e6 * per_token / 989e12, rel=1e-12)


def test_the_compiled_model_stands_in_when_the_full_run_is_another_key_or_absent():
    assert measured_mfu.from_check(check(rate=2e6, key="0" * 16, compiled=0.39), FIRST) == {
        "mfu": 0.39,
        "part": "compiled",
    }
    assert measured_mfu.from_check(check(compiled=0.39), FIRST)["mfu"] == 0.39
    assert measured_mfu.from_check(check(compiled=0.39, dry=True), FIRST) is None
    assert measured_mfu.from_check(check(), FIRST) is None


def test_the_newest_check_that_measured_decides_and_is_named(tmp_path):
    """The newest non-dry check decides; one that ran the full profile's own first run
    decides before any that did not."""
    write(tmp_path, "2026-12-04", check(compiled=0.30))
    write(tmp_path, "2026-12-06", check(compiled=0.45, dry=True))  # newest, but dry
    write(tmp_path, "2026-12-05", check(compiled=0.40))
    got = measured_mfu.newest(FIRST, tmp_path)
    assert got["mfu"] == 0.40 and got["source"].endswith("2026-12-05/gpu_check.json")
    assert measured_mfu.newest(FIRST, tmp_path / "none") is None
    write(tmp_path, "2026-12-03", check(rate=2e6, compiled=0.2))  # older, but the full run
    full = measured_mfu.newest(FIRST, tmp_path)
    assert full["part"] == "full_run" and full["source"].endswith("2026-12-03/gpu_check.json")
    hours = measured_mfu.hours(3.6e18, got)
    assert hours["h200_hours"] == pytest.approx(3.6e18 / (0.40 * 989e12) / 3600)


def test_the_committed_check_gives_the_plan_its_measured_hours():
    """The plan's totals carry the hours at the committed check's MFU and its file."""
    totals = experiments.plan_totals(
        [
            {
                "kind": "llm",
                "key": "k",
                "population": None,
                "cost": {
                    "flops": 1e18,
                    "h200_hours": 1.0,
                    "h200_hours_small_mfu": 1.0,
                    "memory_bytes": 1,
                },
            }
        ]
    )
    m = totals["measured"]
    assert m["source"].startswith("bench-results/gpu/") and 0 < m["mfu"] < 1
    assert m["h200_hours"] == pytest.approx(1e18 / (m["mfu"] * 989e12) / 3600)
