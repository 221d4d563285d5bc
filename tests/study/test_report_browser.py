"""The report page in a real browser: the system's Chromium (Debian: apt install chromium),
driven headless by Playwright (the ``browser`` extra), opens ``index.html`` from disk; every
image loads, the claims table renders with its verdicts, nothing is fetched from the
network, and a screenshot is saved. Skipped where Chromium or Playwright is missing.

``SMALLINIT_REPORT=path/to/index.html`` checks that page (e.g. the one ``make figs``
wrote) instead of one built here; ``SMALLINIT_REPORT_SCREENSHOT=file.png`` says where the
screenshot goes (default: the test's temporary folder)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from test_study_figs import figs_dir  # noqa: F401  (the stand-in figure package)
from test_study_report import records

from smallinit.core.store import RunStore
from smallinit.study import claims as claims_mod
from smallinit.study import report
from smallinit.study.figs import make_figures

pytestmark = pytest.mark.slow
CHROMIUM = next((p for p in (os.environ.get("SMALLINIT_CHROMIUM"), shutil.which("chromium"),
                             shutil.which("chromium-browser"), "/usr/bin/chromium")
                 if p and Path(p).is_file()), None)
#: headless as root on a machine without a network (Debian's Chromium, the flags of
#: /work/.library's probe): no sandbox, no GPU, no background connections
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture
def page_file(figs_dir, tmp_path, monkeypatch) -> Path:  # noqa: F811
    given = os.environ.get("SMALLINIT_REPORT")
    if given:
        return Path(given)
    monkeypatch.setattr(report, "profiles_in_store", lambda store: ["quick"])
    monkeypatch.setattr(claims_mod, "table",
                        lambda names, store: [r for p in names for r in records(p)])
    make_figures(store=RunStore(tmp_path / "runs"))
    return tmp_path / "out" / "index.html"


def test_report_page_in_headless_chromium(page_file, tmp_path):
    if CHROMIUM is None:
        pytest.skip("no Chromium installed (Debian: apt install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="needs Playwright: make extra EXTRA=browser")
    shot = Path(os.environ.get("SMALLINIT_REPORT_SCREENSHOT") or tmp_path / "report.png")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            asked: list[str] = []
            page.on("request", lambda request: asked.append(request.url))
            page.goto(page_file.resolve().as_uri(), wait_until="load")
            images = page.eval_on_selector_all(
                "img", "els => els.map(e => [e.getAttribute('src'), e.complete, "
                       "e.naturalWidth, e.naturalHeight])")
            assert images, "the page shows no figure"
            for src, complete, width, height in images:
                assert complete and width > 100 and height > 100, f"{src} did not load"
            cells = page.eval_on_selector_all(
                "#claims td.claim-cell", "cells => cells.map(c => [c.dataset.verdict, "
                "c.querySelector('.verdict').innerText, c.offsetHeight, c.offsetWidth])")
            assert cells, "the claims table has no verdicts"
            for verdict, shown, height, width in cells:
                assert verdict in claims_mod.VERDICTS and shown == verdict
                assert height > 0 and width > 0
            heads = page.locator("#claims thead th").all_inner_texts()
            assert heads[:3] == ["claim", "what it says", "decided at"] and len(heads) > 3
            assert len(cells) == page.locator("#claims tbody tr").count() * (len(heads) - 3)
            assert all(url.startswith("file://") for url in asked), asked  # no network
            shot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shot), full_page=False)
        finally:
            browser.close()
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
