"""The report page in a real browser: the system's Chromium (Debian: apt install chromium),
driven headless by Playwright (the ``browser`` extra), opens ``index.html`` from disk; every
image loads, the claims table renders with its verdicts, nothing is fetched from the
network, and a screenshot is saved; at a phone's width (390 px) and a wide screen's (1280 px)
the document never scrolls sideways, and a planted 1,000 px table makes that check fail.
Skipped where Chromium or Playwright is missing.

``SMALLINIT_REPORT=path/to/index.html`` checks that page (e.g. the one ``make figs``
wrote) instead of one built here; ``SMALLINIT_REPORT_SCREENSHOT=file.png`` says where the
screenshot goes (default: the test's temporary folder)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from test_report_layout import plant_wide_table
from test_study_figs import figs_dir  # noqa: F401  (the stand-in figure package)
from test_study_report import records

from smallinit.core.store import RunStore
from smallinit.study import claims as claims_mod
from smallinit.study import report
from smallinit.study.figs import make_figures

pytestmark = pytest.mark.slow
CHROMIUM = next(
    (
        p
        for p in (
            os.environ.get("SMALLINIT_CHROMIUM"),
            shutil.which("chromium"),
            shutil.which("chromium-browser"),
            "/usr/bin/chromium",
        )
        if p and Path(p).is_file()
    ),
    None,
)
#: headless as root on a machine without a network (Debian's Chromium, the flags of
#: /work/.library's probe): no sandbox, no GPU, no background connections
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def page_file(figs_dir, tmp_path, monkeypatch) -> Path:  # noqa: F811
    given = os.environ.get("SMALLINIT_REPORT")
    if given:
        return Path(given)
    monkeypatch.setattr(report, "profiles_in_store", lambda store: ["quick"])
    monkeypatch.setattr(
        claims_mod, "table", lambda names, store: [r for p in names for r in records(p)]
    )
    make_figures(store=RunStore(tmp_path / "runs"))
    return tmp_path / "out" / "index.html"


#: a phone's width (an iPhone 12 to 15 in CSS pixels) and a wide screen's
WIDTHS = (390, 1280)


def look(page_file: Path, width: int, shot: Path | None = None) -> dict:
    """Open ``page_file`` in headless Chromium at ``width`` CSS pixels: what its images,
    claims table, document width and requests are (and a screenshot into ``shot``)."""
    if CHROMIUM is None:
        pytest.skip("no Chromium installed (Debian: apt install chromium)")
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="needs Playwright: make extra EXTRA=browser"
    )
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            asked: list[str] = []
            page.on("request", lambda request: asked.append(request.url))
            page.goto(page_file.resolve().as_uri(), wait_until="load")
            seen = {
                "asked": asked,
                "images": page.eval_on_selector_all(
                    "img",
                    "els => els.map(e => [e.getAttribute('src'), e.complete, "
                    "e.naturalWidth, e.naturalHeight, e.getBoundingClientRect().right])",
                ),
                "cells": page.eval_on_selector_all(
                    "#claims td.claim-cell",
                    "cells => cells.map(c => [c.dataset.verdict, "
                    "c.querySelector('.verdict').innerText, c.offsetHeight, c.offsetWidth])",
                ),
                "heads": page.locator("#claims thead th").all_inner_texts(),
                "rows": page.locator("#claims tbody tr").count(),
                "document": page.evaluate(
                    "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
                ),
            }
            if shot is not None:
                shot.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(shot), full_page=False)
        finally:
            browser.close()
    return seen


def width_problems(seen: dict) -> list[str]:
    """The page scrolls sideways, or an image reaches past the screen's right edge."""
    scroll, client = seen["document"]
    out = [f"the document is {scroll} px wide on a {client} px screen"] if scroll > client else []
    out += [
        f"{src} reaches {right:.0f} px" for src, *_, right in seen["images"] if right > client + 0.5
    ]
    return out


@pytest.mark.parametrize("width", WIDTHS)
def test_report_page_in_headless_chromium(page_file, tmp_path, width):
    default = tmp_path / f"report-{width}.png"
    given = os.environ.get("SMALLINIT_REPORT_SCREENSHOT")
    shot = Path(given).with_stem(f"{Path(given).stem}-{width}") if given else default
    seen = look(page_file, width, shot)
    assert seen["images"], "the page shows no figure"
    for src, complete, w, h, _right in seen["images"]:
        assert complete and w > 100 and h > 100, f"{src} did not load"
    assert width_problems(seen) == []  # nothing scrolls sideways but inside its own box
    cells, heads = seen["cells"], seen["heads"]
    assert cells, "the claims table has no verdicts"
    for verdict, shown, height, cell_width in cells:
        assert any(verdict in v for v in claims_mod.VERDICTS_OF.values()) and shown == verdict
        assert height > 0 and cell_width > 0
    assert heads[:3] == ["claim", "what it says", "decided at"] and len(heads) > 3
    assert len(cells) == seen["rows"] * (len(heads) - 3)
    assert all(url.startswith("file://") for url in seen["asked"]), seen["asked"]  # no network
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_planted_wide_table_fails_the_browser_check(page_file, tmp_path):
    """The width check can fail: a 1,000 px table outside any scrolling box widens the
    document at a phone's width."""
    planted = tmp_path / "planted" / "index.html"
    planted.parent.mkdir()
    shutil.copy(page_file, planted)
    plant_wide_table(planted)
    problems = width_problems(look(planted, 390))
    assert (
        problems
        and problems[0].startswith("the document is ")
        and "on a 390 px screen" in problems[0]
    ), problems
