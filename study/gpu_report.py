"""The GPU section of the report page: the committed GPU checks, goal by goal.

:mod:`smallinit.tools.gpu_check` writes one ``gpu_check.json`` per check; a check worth
keeping is committed as ``bench-results/gpu/<date>/gpu_check.json`` of the checkout
(:data:`GPU_RESULTS`; the README of that folder says which command made it). This module
reads those files and renders, per check: its date and device, its goals (what each
measures, the goal, the measured value, met or not: the ``goals`` table of the JSON), the
status and wall time of each of its parts, and the check's verdict.

The files are data and stay data: each is read as a regular file of at most
:data:`LIMIT` bytes, parsed as JSON (:func:`smallinit.core.config.parse_json`), and every
value it holds is shown escaped (a number only when it is a finite number). A file that
cannot be read, is not JSON or is not shaped as a check (a table with a ``goals`` table) is
left out with a warning naming it; a goal or part of another shape is left out of its
table. With no checks (an install without the checkout, a checkout without any) the page
has no GPU section.
"""

from __future__ import annotations

import html
import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from smallinit.core.config import parse_json, read_user_file
from smallinit.core.errors import ConfigError

log = logging.getLogger(__name__)

#: where the committed checks lie: ``bench-results/gpu`` of the checkout the package runs
#: from (absent in an installed package: then no section)
GPU_RESULTS = Path(__file__).resolve().parents[1] / "bench-results" / "gpu"
CHECK_FILE = "gpu_check.json"
LIMIT = 4 * 1024**2
#: what each goal of :data:`smallinit.tools.gpu_check.GOALS` measures, with its unit
GOAL_TEXT = {
    "grouped_vs_loop": (
        "grouped step of a population against a torch loop over its networks (speed-up)",
        "×",
    ),
    "grouped_vs_padded": ("grouped step against a padded torch.bmm (speed-up)", "×"),
    "gram_vs_cublas": ("float32 cosine Gram against cuBLAS (throughput ratio)", "×"),
    "mfu": ("model FLOP utilisation of the compiled bf16 training step", "share"),
}


@dataclass
class Goal:
    name: str
    goal: float | None
    measured: float | None
    met: bool | None


@dataclass
class Part:
    name: str
    status: str
    wall_s: float | None


@dataclass
class GpuCheck:
    """One committed GPU check: where it lies, its date, device and what it measured."""

    folder: str
    date: str
    device: str
    dry: bool
    goals: list[Goal] = field(default_factory=list)
    parts: list[Part] = field(default_factory=list)
    ok: bool | None = None
    problems: list[str] = field(default_factory=list)


def _finite(x: Any) -> float | None:
    ok = isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
    return float(x) if ok else None


def _text(x: Any, default: str = "") -> str:
    return x if isinstance(x, str) else default


def _device(parts: dict[str, Any]) -> str:
    """The device the check ran on: the environment part's, else any part's."""
    named = [parts.get("environment")] + list(parts.values())
    for part in named:
        result = part.get("result") if isinstance(part, dict) else None
        if isinstance(result, dict) and isinstance(result.get("device"), str):
            return result["device"]
    return "unknown device"


def parse_check(data: Any, folder: str, where: str) -> GpuCheck | None:
    """The :class:`GpuCheck` of one parsed ``gpu_check.json`` (None, with a warning naming
    ``where``, when it is not a table with a ``goals`` table). The date is the folder's
    name when it is one (``2026-12-04``), else the day of the JSON's ``started``."""
    if not isinstance(data, dict) or not isinstance(data.get("goals"), dict):
        log.warning(
            "%s is not a GPU check (a table with a goals table); left off the report page", where
        )
        return None
    parts = data.get("parts") if isinstance(data.get("parts"), dict) else {}
    date = (
        folder
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", folder)
        else _text(data.get("started"))[:10] or folder
    )
    check = GpuCheck(folder, date, _device(parts), data.get("dry") is True)
    for name, goal in data["goals"].items():
        if not isinstance(goal, dict):
            log.warning("%s: goal %r is not a table {goal, measured, met}; left out", where, name)
            continue
        met = goal.get("met")
        check.goals.append(
            Goal(
                str(name),
                _finite(goal.get("goal")),
                _finite(goal.get("measured")),
                met if isinstance(met, bool) else None,
            )
        )
    for name, part in parts.items():
        if isinstance(part, dict):
            check.parts.append(
                Part(str(name), _text(part.get("status"), "?"), _finite(part.get("wall_s")))
            )
    verdict = data.get("verdict")
    if isinstance(verdict, dict):
        ok = verdict.get("ok")
        check.ok = ok if isinstance(ok, bool) else None
        problems = verdict.get("problems")
        if isinstance(problems, list):
            check.problems = [p for p in problems if isinstance(p, str)]
    return check


def read_checks(root: Path | None = None) -> list[GpuCheck]:
    """Every ``root/<folder>/gpu_check.json`` (default :data:`GPU_RESULTS`), oldest folder
    first; [] when the folder is not there. A file that cannot be read or parsed is left
    out with a warning (module docstring)."""
    root = GPU_RESULTS if root is None else Path(root)
    if not root.is_dir():
        return []
    checks = []
    for path in sorted(root.glob(f"*/{CHECK_FILE}")):
        try:
            data = parse_json(read_user_file(path, what="GPU check", limit=LIMIT), str(path))
        except (ConfigError, OSError) as err:
            log.warning("%s; left off the report page", err)
            continue
        check = parse_check(data, path.parent.name, str(path))
        if check is not None:
            checks.append(check)
    return checks


# ----------------------------------------------------------------------------- rendering
def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _value(x: float | None, unit: str = "") -> str:
    if x is None:
        return "—"
    if unit == "share":
        return f"{x:.1%}"
    return f"{x:.3g}{unit}"


def _met(met: bool | None) -> str:
    if met is None:
        return '<span class="verdict v-not-run">not measured</span>'
    return (
        '<span class="verdict v-holds">met</span>'
        if met
        else '<span class="verdict v-contradicted">not met</span>'
    )


def check_section(check: GpuCheck, scroll_box) -> str:
    """One check: a heading with its date and device, the goals table, the parts table and
    the verdict (``scroll_box`` puts a table in the page's sideways-scrolling box)."""
    rows = []
    for g in check.goals:
        text, unit = GOAL_TEXT.get(g.name, ("", ""))
        what = f'<div class="small">{_e(text)}</div>' if text else ""
        rows.append(
            f'<tr class="gpu-goal" data-goal="{_e(g.name)}"><td><code>{_e(g.name)}'
            f'</code>{what}</td><td class="num">≥ {_value(g.goal, unit)}'
            f'</td><td class="num">{_value(g.measured, unit)}</td>'
            f"<td>{_met(g.met)}</td></tr>"
        )
    goals = (
        scroll_box(
            '<table class="gpu-goals"><thead><tr><th>goal (what it measures)</th>'
            "<th>goal</th><th>measured</th><th>met</th></tr></thead>"
            "<tbody>" + "".join(rows) + "</tbody></table>"
        )
        if rows
        else "<p>No goals recorded.</p>"
    )
    parts = "".join(
        f"<tr><td><code>{_e(p.name)}</code></td><td>{_e(p.status)}</td>"
        f'<td class="num">{_value(p.wall_s)}</td></tr>'
        for p in check.parts
    )
    parts_html = (
        scroll_box(
            '<table class="gpu-parts"><thead><tr><th>part</th><th>status'
            "</th><th>wall s</th></tr></thead><tbody>" + parts + "</tbody></table>"
        )
        if parts
        else ""
    )
    met = sum(g.met is True for g in check.goals)
    verdict = (
        ""
        if check.ok is None
        else " · verdict ok"
        if check.ok
        else " · verdict failed: " + "; ".join(_e(p) for p in check.problems)
    )
    dry = " (dry run on the CPU: no goal judged)" if check.dry else ""
    return (
        f'<section class="gpu-check" data-date="{_e(check.date)}">'
        f"<h3>{_e(check.date)} · {_e(check.device)}{dry}</h3>"
        f'<p class="source"><code>bench-results/gpu/{_e(check.folder)}/{CHECK_FILE}'
        f"</code> · {met} of {len(check.goals)} goals met{verdict}</p>"
        f"{goals}<details><summary>{len(check.parts)} parts</summary>{parts_html}"
        "</details></section>"
    )


def gpu_section(checks: list[GpuCheck], scroll_box) -> str:
    """The page's GPU section ("" when there is no check)."""
    if not checks:
        return ""
    return (
        '<section id="gpu-section"><h2>GPU checks</h2><p>The committed runs of the '
        "prepared GPU check (<code>smallinit gpu-check OUT</code>), "
        "newest last: each speed goal, what was measured, and whether it was met.</p>"
        + "".join(check_section(c, scroll_box) for c in checks)
        + "</section>"
    )
