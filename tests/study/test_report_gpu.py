"""The report page's GPU section: the committed ``bench-results/gpu/<date>/gpu_check.json``
goal by goal (the goal, what was measured, met or not) with the check's date and device;
no section without checks; a damaged or hostile file is a warning and stays data."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from test_report_layout import Parents, layout_problems
from test_study_figs import figs_dir  # noqa: F401  (the stand-in figure package)
from test_study_report import Page

from smallinit.core.store import RunStore
from smallinit.study import gpu_report, report
from smallinit.study.figs import make_figures

COMMITTED = gpu_report.GPU_RESULTS / "2026-12-04" / "gpu_check.json"


def goal_rows(page: Page, text: str) -> dict[str, list[str]]:
    """goal name -> the words of its row's cells."""
    rows = {}
    for chunk in text.split('<tr class="gpu-goal"')[1:]:
        row = Page("<tr" + chunk.split("</tr>")[0])
        name = row.all("tr")[0]["data-goal"]
        cells = " ".join(row.text).split()
        rows[name] = cells
    return rows


def test_the_committed_h200_check_is_on_the_page_goal_by_goal(figs_dir, tmp_path):  # noqa: F811
    """The page of a `make figs` in the checkout shows the committed check of 2026-12-04
    on the H200: each goal of its JSON with the goal, the measured value and met or not
    (three met, MFU 39.0% against 45.0% not), every table in a box that scrolls."""
    data = json.loads(COMMITTED.read_text())
    make_figures(store=RunStore(tmp_path / "runs"))
    text = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    page = Page(text)
    assert '<a href="#gpu-section">GPU</a>' in text
    assert "2026-12-04 · NVIDIA H200" in page.words
    assert (
        "bench-results/gpu/2026-12-04/gpu_check.json · 3 of 4 goals met · verdict ok" in page.words
    )
    rows = goal_rows(page, text)
    assert (
        set(rows)
        == set(data["goals"])
        == {"grouped_vs_loop", "grouped_vs_padded", "gram_vs_cublas", "mfu"}
    )
    assert rows["mfu"][-4:] == ["45.0%", "39.0%", "not", "met"]
    assert rows["grouped_vs_loop"][-4:] == ["≥", "3×", "265×", "met"]
    assert rows["gram_vs_cublas"][-3:] == ["0.7×", "1.04×", "met"]
    for name, goal in data["goals"].items():
        assert rows[name][-1] == "met"
        assert (rows[name][-2] == "not") == (not goal["met"])
    assert len(Parents(text).tables) >= 3  # the goals, the parts, the runs behind fig 1
    assert layout_problems(text) == []


def test_no_checks_no_section(tmp_path):
    """An install without the checkout (or a checkout without checks): no GPU section."""
    assert gpu_report.read_checks(tmp_path / "nowhere") == []
    (tmp_path / "empty").mkdir()
    assert gpu_report.read_checks(tmp_path / "empty") == []
    page = report.write_report(
        tmp_path, [], RunStore(tmp_path / "runs"), gpu_results=tmp_path / "nowhere"
    )
    text = page.read_text(encoding="utf-8")
    assert "gpu-section" not in text and "GPU checks" not in text


def _check(device: str, goals: dict) -> dict:
    return {
        "dry": False,
        "started": "2027-01-02T10:00:00Z",
        "parts": {"environment": {"status": "ok", "wall_s": 1.5, "result": {"device": device}}},
        "goals": goals,
        "verdict": {"ok": False, "problems": ["<b>mfu</b> low"]},
    }


def test_damaged_and_hostile_checks_are_warnings_and_stay_data(tmp_path, caplog):
    """Not JSON, not a check, too deep, a folder in place of the file: each left out with
    a warning naming it. Markup in a device, goal name or problem is shown as text;
    non-numbers and infinities as —; a goal of another shape is left out."""
    root = tmp_path / "gpu"
    for name, body in {
        "2027-01-01": "{not json",
        "2027-01-03": "[1, 2]",
        "2027-01-04": "[" * 100 + "]" * 100,
    }.items():
        (root / name).mkdir(parents=True)
        (root / name / "gpu_check.json").write_text(body)
    (root / "2027-01-05" / "gpu_check.json").mkdir(parents=True)
    hostile = _check(
        '<script>alert("x")</script>',
        {
            "mfu": {"goal": 0.45, "measured": float("inf"), "met": "yes"},
            "<img src=x onerror=alert(1)>": {"goal": "3", "measured": 4.0, "met": True},
            "broken": "not a table",
        },
    )
    (root / "2027-01-02").mkdir()
    (root / "2027-01-02" / "gpu_check.json").write_text(json.dumps(hostile))
    with caplog.at_level(logging.WARNING, logger="smallinit.study.gpu_report"):
        checks = gpu_report.read_checks(root)
    warned = " | ".join(r.getMessage() for r in caplog.records)
    for bad in ("2027-01-01", "2027-01-03", "2027-01-04", "2027-01-05"):
        assert str(root / bad / "gpu_check.json") in warned
    assert "goal 'broken' is not a table" in warned
    (check,) = checks
    assert check.date == "2027-01-02" and [g.name for g in check.goals] == [
        "mfu",
        "<img src=x onerror=alert(1)>",
    ]
    html = gpu_report.gpu_section(checks, report.scroll_box)
    page = Page(html)
    assert not page.all("script") and not page.all("img") and not page.all("b")
    assert '<script>alert("x")</script>' in page.words
    assert "verdict failed: <b>mfu</b> low" in page.words
    rows = goal_rows(page, html)
    assert rows["mfu"][-4:] == ["45.0%", "—", "not", "measured"]
    assert rows["<img src=x onerror=alert(1)>"][-3:] == ["—", "4", "met"]


def test_the_date_comes_from_the_json_when_the_folder_is_not_one(tmp_path):
    folder = tmp_path / "gpu" / "first-h200"
    folder.mkdir(parents=True)
    (folder / "gpu_check.json").write_text(json.dumps(_check("NVIDIA H200", {})))
    (check,) = gpu_report.read_checks(tmp_path / "gpu")
    assert (check.date, check.device, check.goals) == ("2027-01-02", "NVIDIA H200", [])
    assert Path(gpu_report.GPU_RESULTS).name == "gpu"
