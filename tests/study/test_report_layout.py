"""The report page reads on a phone as on a wide screen, checked without a browser: every
table sits in a box that scrolls sideways (a wide table never widens the page), ``<pre>``
blocks wrap or scroll, images scale to the width, the viewport is the device's; and the
claims table shows only the profiles with judged claims, saying in one line which it left
out and why. tests/study/test_report_browser.py measures the same page in Chromium."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_study_figs import figs_dir  # noqa: F401  (the stand-in figure package)
from test_study_report import Page, records

from smallinit.core.store import RunStore
from smallinit.study import claims as claims_mod
from smallinit.study import report
from smallinit.study.figs import make_figures

#: a table 1,000 px wide put straight into the page (no scrolling box around it)
PLANTED = '<table style="width:1000px"><tr><td>planted</td></tr></table>'


def plant_wide_table(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    page.write_text(text.replace("<body>", "<body>" + PLANTED, 1), encoding="utf-8")


class Parents(HTMLParser):
    """For every <table>: the tag and class of the element it sits in."""

    VOID = {"meta", "img", "br", "hr", "input", "link"}

    def __init__(self, text: str):
        super().__init__()
        self.stack: list[tuple[str, str]] = []
        self.tables: list[tuple[str, str] | None] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append(self.stack[-1] if self.stack else None)
        if tag not in self.VOID:
            self.stack.append((tag, dict(attrs).get("class") or ""))

    def handle_endtag(self, tag):
        while self.stack:
            if self.stack.pop()[0] == tag:
                break


def css_rules(text: str) -> dict[str, str]:
    """Selector -> declarations (whitespace collapsed) of the page's <style>, media queries
    left out."""
    (style,) = re.findall(r"<style>(.*?)</style>", text, flags=re.S)
    style = re.sub(r"@media[^{]*\{(?:[^{}]*\{[^}]*\})*[^}]*\}", "", style)
    rules = {}
    for selectors, body in re.findall(r"([^{}]+)\{([^}]*)\}", style):
        for selector in selectors.split(","):
            rules[" ".join(selector.split())] = " ".join(body.split())
    return rules


def layout_problems(text: str) -> list[str]:
    """What in the page's HTML and CSS would let it grow wider than a phone's screen."""
    problems = []
    rules = css_rules(text)
    box = rules.get(".table-scroll", "")
    if "overflow-x: auto" not in box or "max-width: 100%" not in box:
        problems.append(f".table-scroll does not scroll inside the width: {box!r}")
    for i, parent in enumerate(Parents(text).tables):
        if parent is None or parent[0] != "div" or "table-scroll" not in parent[1].split():
            problems.append(f"table {i} sits in {parent}, not in a div.table-scroll")
    pre = rules.get("pre", "")
    if "overflow-x: auto" not in pre and "white-space: pre-wrap" not in pre:
        problems.append(f"pre neither wraps nor scrolls: {pre!r}")
    if "max-width: 100%" not in rules.get("img", ""):
        problems.append(f"images do not scale to the width: {rules.get('img')!r}")
    if 'content="width=device-width, initial-scale=1"' not in text:
        problems.append("no viewport meta for phones")
    return problems


@pytest.fixture
def page_file(figs_dir, tmp_path, monkeypatch) -> Path:  # noqa: F811
    """The page of a ``make figs`` with the stand-in figure and claims records at quick."""
    monkeypatch.setattr(report, "profiles_in_store", lambda store: ["quick"])
    monkeypatch.setattr(
        claims_mod, "table", lambda names, store: [r for p in names for r in records(p)]
    )
    make_figures(store=RunStore(tmp_path / "runs"))
    return tmp_path / "out" / "index.html"


def test_every_table_scrolls_in_its_box_pre_wraps_images_scale(page_file):
    text = page_file.read_text(encoding="utf-8")
    assert len(Parents(text).tables) >= 2  # the claims table, the runs behind the figure
    assert layout_problems(text) == []


def test_a_planted_wide_table_fails_the_layout_check(page_file):
    plant_wide_table(page_file)
    problems = layout_problems(page_file.read_text(encoding="utf-8"))
    assert problems == ["table 0 sits in ('body', ''), not in a div.table-scroll"]


def test_claims_table_leaves_out_profiles_with_nothing_judged_and_says_why(
    figs_dir,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    """A store whose runs judge quick's claims and none of medium's or full's (the toy
    runs they share): the claims table has the quick column alone, and one line names the
    others and why."""

    def table(names, store):
        out = records("quick")
        for p in names[1:]:
            out += [
                claims_mod.Record(r.id, r.claim, p, claims_mod.not_run("0 of 5 done"))
                for r in records(p)
            ]
        return out

    monkeypatch.setattr(report, "profiles_in_store", lambda store: ["quick", "medium", "full"])
    monkeypatch.setattr(claims_mod, "table", table)
    make_figures(store=RunStore(tmp_path / "runs"))
    page = Page((tmp_path / "out" / "index.html").read_text(encoding="utf-8"))
    cells = {a["data-profile"] for a in page.all("td") if a.get("class") == "claim-cell"}
    assert cells == {"quick"}
    absent = [p for p in report.profiles.names() if p not in ("quick", "medium", "full")]
    line = (
        "Left out: medium, full (every claim not run: no claim has all its runs in the "
        "store)" + (f"; {', '.join(absent)} (no runs in the store)" if absent else "") + "."
    )
    assert line in page.words
    heads = [h for h in page.words.split() if h.endswith(":")]
    assert "medium:" not in heads and "full:" not in heads  # no column, no count


def test_no_profile_judged_keeps_the_first_one_to_list_its_missing_runs():
    quick = [claims_mod.Record("c", "says", "quick", claims_mod.not_run("none done"))]
    medium = [claims_mod.Record("c", "says", "medium", claims_mod.not_run("none done"))]
    shown, line = report.table_profiles(quick + medium, ["quick", "medium"])
    assert shown == ["quick"] and line.startswith("Left out: medium (every claim not run")


def test_claims_table_of_a_real_store_lists_its_profiles_only(tmp_path):
    """No stand-ins: a store holding quick's eps-gating runs alone (which medium's plan
    shares). The claims table has a column for the profiles of the store whose claims it
    judges, and one line names the others: those of the store with nothing judged, and
    every packaged profile without a run in the store."""
    from test_claims import _fill

    from smallinit.study import experiments

    store = RunStore(tmp_path / "runs")
    planted = {
        ("standard", False): 0.01,
        ("standard", True): 0.05,
        ("relaxed", False): 0.08,
        ("relaxed", True): 0.1,
    }

    def summary(job):
        t = job.tags
        gain = planted[(t["eps_setting"], t["gated"])] + 0.001 * t["seed"]
        return {"val_loss": 4.0 - (gain if t["gamma"] == 1.0 else 0.0)}

    _fill(store, experiments.specs("eps-gating", "quick"), summary)
    in_store = report.profiles_in_store(store)
    assert in_store == ["quick", "medium"]
    page = Page(
        report.write_report(tmp_path, [], store, gpu_results=tmp_path / "none").read_text(
            encoding="utf-8"
        )
    )
    shown = {a["data-profile"] for a in page.all("td") if a.get("class") == "claim-cell"}
    assert shown == {"quick"}  # medium's plan has more seeds: none of its claims is judged
    absent = [p for p in report.profiles.names() if p not in in_store]
    assert absent and "medium" not in absent
    assert page.words.count("Left out:") == 1
    assert (
        "Left out: medium (every claim not run: no claim has all its runs in the store); "
        f"{', '.join(absent)} (no runs in the store)."
    ) in page.words
