"""The report page of ``make figs``: index.html beside the figures with every figure, its
caption, statistics, runs and commands, and the claims table (read-only)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_study_figs import TESTFIG, figs_dir  # noqa: F401  (the stand-in figure package)

from smallinit.core.store import RunStore
from smallinit.study import claims as claims_mod
from smallinit.study import report
from smallinit.study.figs import FIGURES, make_figures


class Page(HTMLParser):
    """The tags of a page with their attributes, and its text."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def all(self, tag: str) -> list[dict]:
        return [a for t, a in self.tags if t == tag]

    @property
    def words(self) -> str:
        """The text, whitespace collapsed (no space before punctuation after a tag)."""
        return re.sub(r" ([,.;:)\]])", r"\1", " ".join(" ".join(self.text).split()))


def records(profile: str = "quick") -> list[claims_mod.Record]:
    """Claims records from the study's own rules on made-up per-seed values, decided as one
    family under the default rules (§13.2): one holds, one is contradicted, one not run
    with its missing runs."""
    ids = list(claims_mod.CLAIMS)
    return claims_mod.decide(
        [
            claims_mod.Record(
                ids[0],
                claims_mod.CLAIMS[ids[0]].text,
                profile,
                claims_mod.directional({0: 0.2, 1: 0.25, 2: 0.3, 3: 0.22}),
            ),
            claims_mod.Record(
                ids[2],
                claims_mod.CLAIMS[ids[2]].text,
                profile,
                claims_mod.directional({0: -0.2, 1: -0.25, 2: -0.3, 3: -0.22}),
            ),
            claims_mod.Record(
                ids[4],
                claims_mod.CLAIMS[ids[4]].text,
                profile,
                claims_mod.not_run("2 of 5 critical-init runs not done"),
                [
                    "llm-train/0123456789abcdef (gamma=1): absent",
                    "llm-train/fedcba9876543210 (gamma=1.1): absent",
                ],
            ),
        ]
    )


def test_make_figs_writes_a_static_report_page(figs_dir, tmp_path):  # noqa: F811
    store = RunStore(tmp_path / "runs")
    make_figures(store=store)
    out = tmp_path / "out"
    text = (out / "index.html").read_text(encoding="utf-8")
    page = Page(text)
    images = [a["src"] for a in page.all("img")]
    assert images == ["fig01_phase_diagram.png"]  # relative, beside the page
    assert all((out / src).is_file() for src in images)
    assert "fig01_phase_diagram.pdf" in [a.get("href") for a in page.all("a")]
    assert not re.search(r"(src|href)=\"(https?:)?//", text)  # nothing from the network
    assert not page.all("script") and not page.all("link")  # static: no script, no stylesheet
    words = page.words
    assert "Figure 1: test figure" in words
    assert "Theory's linear and condensed regions in the (γ, γ') plane" in words  # §7.1
    (run,) = TESTFIG.specs("quick")
    assert f"testfig/{run.key}" in words and "1 of 1 runs done" in words
    assert "smallinit figs --only 1 --profile quick --force" in words
    assert "The store has no runs of any profile yet" in words  # nothing of the registry
    assert "fig02_" not in text  # the stand-in package has figure 1 alone
    assert json.loads((out / "report.json").read_text()) == {
        "1": {"profile": "quick", "files": ["fig01_phase_diagram.png", "fig01_phase_diagram.pdf"]}
    }


def test_claims_table_of_every_profile_in_the_store(figs_dir, tmp_path, monkeypatch):  # noqa: F811
    """The claims records of each profile that has runs, with verdicts; the figure whose
    experiments a claim reads repeats its rows as its statistics."""
    asked = []

    def table(profile_names, store):
        asked.append(list(profile_names))
        return [r for p in profile_names for r in records(p)] + claims_mod.decide(
            [
                claims_mod.Record(
                    "test-claim", "squares grow", "quick", claims_mod.directional({0: 1.0, 1: 2.0})
                )
            ]
        )

    monkeypatch.setattr(report, "profiles_in_store", lambda store: ["quick", "medium"])
    monkeypatch.setattr(claims_mod, "table", table)
    monkeypatch.setattr(
        claims_mod,
        "CLAIMS",
        {
            **claims_mod.CLAIMS,
            "test-claim": (
                claims_mod.Claim(
                    "test-claim",
                    "squares grow",
                    "testfig",
                    claims_mod._all,
                    lambda r: claims_mod.not_run("x"),
                )
            ),
        },
    )
    make_figures(store=RunStore(tmp_path / "runs"))
    page = Page((tmp_path / "out" / "index.html").read_text(encoding="utf-8"))
    assert asked == [["quick", "medium"]]
    rows = [a["data-claim"] for a in page.all("tr") if a.get("class") == "claim"]
    ids = list(claims_mod.CLAIMS)
    assert rows == [ids[0], ids[2], ids[4], "test-claim", "test-claim"]  # then figure 1's
    cells = [
        (a["data-profile"], a["data-verdict"])
        for a in page.all("td")
        if a.get("class") == "claim-cell"
    ]
    assert cells[:7] == [
        ("quick", "holds"),
        ("medium", "holds"),
        ("quick", "contradicted"),
        ("medium", "contradicted"),
        ("quick", "not run"),
        ("medium", "not run"),
        ("quick", "undecided"),  # two seeds, one-sided t p 0.10
    ]
    assert cells[7:] == [("quick", "undecided")]  # figure 1's statistics: its experiment's claim
    tables = [a["id"] for a in page.all("table") if "claims" in a.get("class", "")]
    assert tables == ["claims", "claims-fig01"]
    words = page.words
    assert "profiles with runs in the store: quick, medium" in words
    assert "quick: 1 holds, 1 contradicted, 1 undecided, 1 not run" in words
    assert f"{ids[0]} {claims_mod.CLAIMS[ids[0]].text}" in words
    assert (
        "2 of 5 critical-init runs not done llm-train/0123456789abcdef (gamma=1): absent" in words
    )
    first = records()[0]  # §13.2: the bound at Holm's level, the raw and the Holm p
    shown = f"{first.judgement.estimate.effect:.3f} (≥ {first.decision.bound_holm:.3f})"
    assert shown in words
    assert f"p {first.decision.p_raw:.2g} · Holm {first.decision.p_holm:.2g} · n 4" in words
    assert first.decision.p_holm == pytest.approx(2 * first.decision.p_raw)  # Holm over 2
    against = records()[1].decision  # contradicted: the Holm p of the test against it too
    assert f"· against it {against.p_opposite_holm:.2g} · n 4" in words
    assert words.count("· against it") == 2  # the contradicted cells only (quick, medium)


def test_a_claim_tested_for_less_shows_an_upper_bound_on_the_page_and_in_the_cli():
    """A claim whose main condition is ``less`` is bounded from above (§13.2, 4): the report
    cell and the CLI table both write ``≤`` and the bound lies above the effect."""
    from smallinit.cli.claims import format_table
    from smallinit.study.verdicts import Condition, Design

    judgement = claims_mod.directional({0: -0.2, 1: -0.25, 2: -0.3, 3: -0.22})
    judgement.design = Design((Condition("x", alternative="less"),))
    (r,) = claims_mod.decide([claims_mod.Record("falls", "it falls", "quick", judgement)])
    assert r.verdict == "holds" and r.bound_side == "≤"
    assert r.decision.bound_holm > r.judgement.estimate.effect
    assert f"(≤ {r.decision.bound_holm:.3f})" in report.claim_cell(r)
    assert f"≤{r.decision.bound_holm:.3f}" in format_table([r])
    assert "≥" not in report.claim_cell(r)


def test_report_json_keeps_figures_drawn_before(tmp_path):
    for name in ("fig01_a.png", "fig01_a.pdf", "fig02_b.png"):
        (tmp_path / name).write_bytes(b"x")
    kept = report.record_drawn(
        tmp_path,
        "quick",
        {
            1: [tmp_path / "fig01_a.png", tmp_path / "fig01_a.pdf"],
            2: [tmp_path / "fig02_b.png"],
            3: None,
        },
    )
    assert {n: v["profile"] for n, v in kept.items()} == {1: "quick", 2: "quick"}
    kept = report.record_drawn(tmp_path, "medium", {1: [tmp_path / "fig01_a.png"]})
    assert {n: v["profile"] for n, v in kept.items()} == {1: "medium", 2: "quick"}
    (tmp_path / "fig02_b.png").unlink()  # its file is gone: so is its entry
    assert list(report.record_drawn(tmp_path, "quick", {})) == [1]
    (tmp_path / report.MANIFEST).write_text("{not json")  # a damaged record is rebuilt
    assert report.record_drawn(tmp_path, "quick", {}) == {}


HOSTILE_MANIFESTS = {
    "nested 100000 levels": "[" * 100_000 + "]" * 100_000,
    "files nested": '{"1": {"profile": "quick", "files": [["fig01_phase_diagram.png"]]}}',
    "profile a table": '{"1": {"profile": {"a": [1]}, "files": ["fig01_phase_diagram.png"]}}',
    "profile unknown": '{"1": {"profile": "enormous", "files": ["fig01_phase_diagram.png"]}}',
    "profile missing": '{"1": {"files": ["fig01_phase_diagram.png"]}}',
    "overlay a list": '{"1": {"profile": "quick", "base": "quick", "overlay": [1], '
    '"files": ["fig01_phase_diagram.png"]}}',
    "file outside the folder": '{"1": {"profile": "quick", "files": ["../outside.png"]}}',
    "a list": "[1, 2]",
}


@pytest.mark.parametrize("text", HOSTILE_MANIFESTS.values(), ids=HOSTILE_MANIFESTS)
def test_a_damaged_report_json_is_left_off_the_page_and_rewritten(
    figs_dir,  # noqa: F811
    tmp_path,
    text,
    monkeypatch,
):
    """report.json as a user or a bad disk may leave it in --out: its entries that are not
    {profile, files} of plain names in the folder leave the page; the figures drawn now and
    the page itself are still written, and the file is rewritten."""
    from smallinit.cli import main
    from smallinit.study.figs import write_report

    monkeypatch.setattr(report, "profiles_in_store", lambda store: [])  # no claims table
    out, store = tmp_path / "out", RunStore(tmp_path / "runs")
    out.mkdir()
    (out / "fig01_phase_diagram.png").write_bytes(b"x")
    (tmp_path / "outside.png").write_bytes(b"x")
    (out / report.MANIFEST).write_text(text)
    write_report(out, store, "quick", {})  # nothing drawn now: the page is what it lists
    assert 'id="fig01"' not in (out / "index.html").read_text(encoding="utf-8")
    kept = json.loads((out / report.MANIFEST).read_text())
    # an entry of a profile unknown here is kept for a process that knows it, off the page
    assert kept == ({} if "enormous" not in text else json.loads(text))
    (out / report.MANIFEST).write_text(text)
    assert main(["figs", "--only", "1", "--runs-dir", str(tmp_path / "runs")]) == 0
    assert json.loads((out / report.MANIFEST).read_text()) == {
        "1": {"profile": "quick", "files": ["fig01_phase_diagram.png", "fig01_phase_diagram.pdf"]}
    }


def test_every_figure_has_a_caption_in_the_science_doc():
    captions = report.science_captions()
    assert sorted(captions) == sorted(FIGURES)
    assert captions[6][0] == "Anchor-task phase diagram"
    assert captions[11][1].startswith("Each bucket's share of the total gain")


def test_the_page_is_a_function_of_its_inputs(tmp_path):
    entry = report.FigureEntry(
        4,
        "fig04_lazy_vs_rich",
        "Lazy versus rich",
        "Doc.",
        "quick",
        ["fig04_lazy_vs_rich.png", "fig04_lazy_vs_rich.pdf"],
    )
    one = report.render([entry], records(), ["quick"], report.science_captions())
    assert one == report.render([entry], records(), ["quick"], report.science_captions())
    assert (
        "<code>smallinit figs --only 4 --profile quick" in one.replace("\n", " ")
        or "smallinit figs --only 4 --profile quick" in one
    )
    assert "No runs: this figure is drawn from theory alone." in one
    # user text is escaped, never markup
    bad = report.FigureEntry(4, "x", "<b>t</b>", "", "quick", ["a.png"])
    assert "<b>t</b>" not in report.render([bad], [], [], {})


def test_cli_prints_where_the_report_is(figs_dir, tmp_path, capsys):  # noqa: F811
    from smallinit.cli import main

    assert main(["figs", "--only", "1", "--runs-dir", str(tmp_path / "runs")]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == f"report page {tmp_path / 'out' / 'index.html'} (open it in a browser)"
    assert Path(tmp_path / "out" / "index.html").is_file()


@pytest.fixture(autouse=True)
def _no_runs_dir_env(monkeypatch):
    monkeypatch.delenv("SMALLINIT_RUNS", raising=False)
