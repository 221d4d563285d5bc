"""The report page: ``index.html`` beside the figures, the study at a glance.

:func:`write_report` writes one static HTML file into the figure folder (``make figs``:
``paper_figs/out/index.html``): no script, no server, no network, every link relative, so
the folder can be opened from disk, zipped or served as it is. It holds

* the claims table (:mod:`smallinit.study.claims`, read-only: :func:`~smallinit.study.
  claims.table`) of every profile the store has runs of, each claim with its effect, its
  one-sided bound at Holm's level, raw and Holm-adjusted p, seeds and verdict (the rules of
  docs/science.md §13.2), and the missing runs of a claim that is ``not run``;
* the committed GPU checks (``bench-results/gpu/<date>/gpu_check.json`` of the checkout,
  :mod:`smallinit.study.gpu_report`): per check its date and device, each speed goal with
  the measured value and whether it was met (no section when there is none);
* every figure drawn in the folder, in order: its PNG (a link to the PDF), its title and
  caption (docs/science.md §7, else the figure module's docstring), its statistics (the
  claims judged on its experiments, the number of runs done, the training FLOPs of its
  transformer runs), the run keys behind it (kind/key, state, what each run stands for)
  and the commands that redraw, recompute and list it.

Which profile a figure in the folder was drawn at is kept in ``report.json`` beside it
(:func:`record_drawn`), so ``smallinit figs --only 1`` after a full ``make figs`` updates
figure 1 and keeps the others on the page. Nothing here computes or writes a run.
"""

from __future__ import annotations

import html
import json
import logging
import math
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from smallinit.core import profiles
from smallinit.core.atomic import atomic_write_text
from smallinit.core.config import CONFIG_BYTES, dotted_items, parse_json, read_user_file
from smallinit.core.errors import ConfigError, StoreError
from smallinit.core.jobs import Results
from smallinit.core.store import RunStore
from smallinit.llm.training.cost import training_flops_of
from smallinit.study import claims as claims_mod
from smallinit.study import experiments
from smallinit.study.gpu_report import GpuCheck, gpu_section, read_checks

log = logging.getLogger(__name__)

REPORT = "index.html"
MANIFEST = "report.json"
SCIENCE = Path(__file__).resolve().parents[1] / "docs" / "science.md"


@dataclass
class FigureEntry:
    """One figure of the page: what the driver knows of it."""

    number: int
    stem: str
    title: str
    doc: str
    profile: str
    files: list[str]
    runs: dict[str, Results] = field(default_factory=dict)  # experiment -> its runs
    inner: dict[str, Results] = field(default_factory=dict)  # runs made inside its runs


# ----------------------------------------------------------------------------- inputs
def science_captions(path: Path = SCIENCE) -> dict[int, tuple[str, str]]:
    """docs/science.md §7: figure number → (its heading, its description); {} when the
    file is not there (an install without the docs)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    start = text.find("\n## 7.")
    if start < 0:
        return {}
    end = text.find("\n## ", start + 1)
    section = text[start : end if end > 0 else None]
    out = {}
    for match in re.finditer(
        r"\n### 7\.(\d+) ([^\n]*)\n(.*?)(?=\n### |\n---|\Z)", section, flags=re.S
    ):
        out[int(match.group(1))] = (match.group(2).strip(), match.group(3).strip())
    return out


def _is_entry(key: str, info: Any) -> bool:
    """Whether ``key: info`` has the shape :func:`record_drawn` writes: a figure number →
    ``{"profile": str, "files": [plain file names]}``, with ``"base"`` (str) and
    ``"overlay"`` (a table) for a derived profile."""
    return (
        isinstance(key, str)
        and key.isdigit()
        and isinstance(info, dict)
        and isinstance(info.get("profile"), str)
        and isinstance(info.get("files"), list)
        and all(
            isinstance(f, str) and f and Path(f).name == f and not f.startswith(".")
            for f in info["files"]
        )
        and isinstance(info.get("base", ""), str)
        and isinstance(info.get("overlay", {}), dict)
    )


def read_drawn(path: Path) -> dict[int, dict[str, Any]]:
    """The entries of ``report.json`` at ``path`` (figure number → entry, :func:`_is_entry`);
    none when it is absent. A file that is not a small regular file, not JSON or nested
    too deeply, and every entry of another shape, is left out with a warning: its figures
    leave the page until drawn again (:func:`record_drawn` rewrites the file)."""
    if not path.exists() and not path.is_symlink():
        return {}
    try:
        data = parse_json(read_user_file(path, what=MANIFEST, limit=CONFIG_BYTES), str(path))
    except ConfigError as err:
        log.warning("%s; the figures it listed leave the report page until drawn again", err)
        return {}
    if not isinstance(data, dict):
        log.warning(
            "%s is not a table of figure entries ({number: {profile, files}}); the "
            "figures it listed leave the report page until drawn again",
            path,
        )
        return {}
    bad = sorted(k for k, v in data.items() if not _is_entry(k, v))
    if bad:
        log.warning(
            "%s: entry %s is not a figure entry ({profile, files}); left off the report page",
            path,
            ", ".join(bad),
        )
    return {int(k): v for k, v in data.items() if k not in bad}


def record_drawn(
    out_dir: Path, profile: str, drawn: dict[int, list[Path] | Exception | None]
) -> dict[int, dict[str, Any]]:
    """Update ``report.json`` with the figures drawn now (number → profile and files; at a
    derived profile also its base and overlay, so a later process derives it again) and
    return every figure of the folder whose files are still there."""
    path = Path(out_dir) / MANIFEST
    known = read_drawn(path)
    base, tables = profiles.overlay(profile)
    again = {"base": base, "overlay": tables} if tables else {}  # a derived profile
    for number, paths in drawn.items():
        if isinstance(paths, list) and paths:  # not a figure that is missing, cut or failed
            known[number] = {"profile": profile, "files": [Path(p).name for p in paths], **again}
    kept = {
        n: v
        for n, v in sorted(known.items())
        if isinstance(v, dict)
        and v.get("files")
        and all((Path(out_dir) / f).is_file() for f in v["files"])
    }
    atomic_write_text(
        path, json.dumps({str(n): v for n, v in kept.items()}, indent=1, sort_keys=True) + "\n"
    )
    return kept


def profiles_in_store(store: RunStore) -> list[str]:
    """The profiles of which the store holds at least one run (any state), smallest first
    (quick, medium, full, then any other)."""
    order = {"quick": 0, "medium": 1, "full": 2}
    found = []
    for profile in sorted(profiles.names(), key=lambda p: (order.get(p, 3), p)):
        if any(
            _state(run) != "absent"
            for e in experiments.EXPERIMENTS.values()
            for run in experiments.existing(e.name, profile, store).runs
        ):
            found.append(profile)
    return found


def _state(run) -> str:
    try:
        return run.state
    except StoreError:
        return "corrupt"


def profile_args(profile: str) -> str:
    """The command-line words that give ``profile``: ``--profile P``, for a derived profile
    its base and the overlay as ``key=value`` overrides (shell-quoted)."""
    base, tables = profiles.overlay(profile)
    words = ["--profile", base]  # JSON of a value is a TOML literal of it
    words += [
        f"{path}={json.dumps(value, separators=(',', ':'))}" for path, value in dotted_items(tables)
    ]
    return " ".join(shlex.quote(w) for w in words)


# ----------------------------------------------------------------------------- rendering
def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _inline(text: str) -> str:
    """Escaped text with `code` spans and **bold** of the science doc rendered."""
    out = _e(text)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)


def _paragraphs(text: str) -> str:
    return "".join(
        f"<p>{_inline(' '.join(p.split()))}</p>"
        for p in re.split(r"\n\s*\n", text.strip())
        if p.strip()
    )


def _number(x: float, digits: int = 3) -> str:
    return "—" if not isinstance(x, int | float) or not math.isfinite(x) else f"{x:.{digits}f}"


def _p(x: float) -> str:
    if not isinstance(x, int | float) or not math.isfinite(x):
        return "—"
    return "&lt;1e-4" if x < 1e-4 else f"{x:.2g}"


def _verdict(verdict: str) -> str:
    return f'<span class="verdict v-{verdict.replace(" ", "-")}">{_e(verdict)}</span>'


def scroll_box(table: str) -> str:
    """``table`` in a box of the page's width that scrolls sideways when the table is wider
    (:data:`STYLE`'s ``.table-scroll``): a wide table never widens the page."""
    return f'<div class="table-scroll">{table}</div>'


def claim_cell(r: claims_mod.Record) -> str:
    """One claim at one profile: the effect with, under §13.2, its one-sided bound at Holm's
    level and the raw and Holm-adjusted p (and a contradicted claim's Holm-adjusted p against
    it; under §13.1 its 95% interval and p), n, the verdict, and why it is not run."""
    e = r.judgement.estimate
    note = ""
    if r.missing:  # the reason, unfolding to the missing runs
        shown = "".join(f"<li><code>{_e(m)}</code></li>" for m in r.missing[:8])
        more = f"<li>… and {len(r.missing) - 8} more</li>" if len(r.missing) > 8 else ""
        summary = r.judgement.detail or f"{len(r.missing)} missing runs"
        note = f"<details><summary>{_e(summary)}</summary><ul>{shown}{more}</ul></details>"
    elif r.judgement.detail:
        note = f'<div class="note">{_e(r.judgement.detail)}</div>'
    numbers = ""
    d = r.decision if r.rules == "13.2" else None
    if e.n and d is not None:  # §13.2: the one-sided bound at Holm's level, raw and Holm p
        bound = ""
        if math.isfinite(d.bound_holm):
            bound = f" ({r.bound_side} {_number(d.bound_holm)})"
        against = f" · against it {_p(d.p_opposite_holm)}" if r.verdict == "contradicted" else ""
        numbers = (
            f'<div class="num">{_number(e.effect)}{bound}</div><div class="num small">'
            f"p {_p(d.p_raw)} · Holm {_p(d.p_holm)}{against} · n {e.n}</div>"
        )
    elif e.n:
        numbers = (
            f'<div class="num">{_number(e.effect)} [{_number(e.ci_low)}, '
            f'{_number(e.ci_high)}]</div><div class="num small">p {_p(e.p_value)}'
            f" · n {e.n}</div>"
        )
    return (
        f'<td class="claim-cell" data-profile="{_e(r.profile)}" '
        f'data-verdict="{_e(r.verdict)}">{numbers}{_verdict(r.verdict)}{note}</td>'
    )


def claims_table(records: Sequence[claims_mod.Record], *, table_id: str = "claims") -> str:
    """The claims table: one row per claim (§13's order): what it says, the profiles where
    it is decided, then one column per profile."""
    names = list(dict.fromkeys(r.profile for r in records))
    by_claim: dict[str, dict[str, claims_mod.Record]] = {}
    for r in records:
        by_claim.setdefault(r.id, {})[r.profile] = r
    head = (
        "<tr><th>claim</th><th>what it says</th><th>decided at</th>"
        + "".join(f"<th>{_e(p)}: effect, verdict</th>" for p in names)
        + "</tr>"
    )
    rows = []
    for claim_id, at in by_claim.items():
        first = next(iter(at.values()))
        cells = "".join(claim_cell(at[p]) if p in at else "<td>—</td>" for p in names)
        rows.append(
            f'<tr class="claim" data-claim="{_e(claim_id)}"><td><code>'
            f"{_e(claim_id)}</code></td><td>{_e(first.claim)}</td>"
            f"<td>{_e(', '.join(first.decided_at))}</td>{cells}</tr>"
        )
    return scroll_box(
        f'<table id="{table_id}" class="claims"><thead>{head}</thead><tbody>'
        + "\n".join(rows)
        + "</tbody></table>"
    )


def verdict_counts(records: Sequence[claims_mod.Record]) -> str:
    """``quick: 2 holds, 1 undecided, 9 not run`` per profile, in the order of the verdicts
    of the records' rules (:data:`~smallinit.study.claims.VERDICTS_OF`)."""
    order = dict.fromkeys(v for r in records for v in claims_mod.VERDICTS_OF[r.rules])
    parts = []
    for profile in dict.fromkeys(r.profile for r in records):
        counts = {v: sum(r.verdict == v and r.profile == profile for r in records) for v in order}
        shown = ", ".join(f"{n} {_verdict(v)}" for v, n in counts.items() if n)
        parts.append(f"<code>{_e(profile)}</code>: {shown}")
    return "<p>" + "; ".join(parts) + ".</p>"


def _tags(tags: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in tags.items())


def runs_table(entry: FigureEntry) -> tuple[str, dict[str, int], float]:
    """The run keys behind a figure (a table), the count per state and the transformer
    runs' training FLOPs."""
    rows, counts, flops, seen = [], {}, 0.0, set()
    for label, groups in (("", entry.runs), ("inside ", entry.inner)):
        for name, results in groups.items():
            for spec, run in results:
                if spec.ident in seen:
                    continue
                seen.add(spec.ident)
                state = _state(run)
                counts[state] = counts.get(state, 0) + 1
                flops += training_flops_of(spec.config) or 0.0
                rows.append(
                    f"<tr><td>{_e(label + name)}</td><td><code>{_e(spec.kind)}/"
                    f"{_e(spec.key)}</code></td><td>{_e(state)}</td>"
                    f"<td>{_e(_tags(spec.tags))}</td></tr>"
                )
    if not rows:
        return "<p>No runs: this figure is drawn from theory alone.</p>", counts, flops
    table = scroll_box(
        '<table class="runs"><thead><tr><th>experiment</th><th>run '
        "(kind/key)</th><th>state</th><th>stands for</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )
    return (
        (
            f"<details><summary>{len(rows)} runs (<code>smallinit runs show KEY</code> opens "
            f"one)</summary>{table}</details>"
        ),
        counts,
        flops,
    )


def figure_section(
    entry: FigureEntry, caption: tuple[str, str] | None, records: Sequence[claims_mod.Record]
) -> str:
    """One figure: images, caption, statistics, run keys, commands."""
    png = [f for f in entry.files if f.endswith(".png")]
    pdf = {Path(f).stem: f for f in entry.files if f.endswith(".pdf")}
    images = "".join(
        f'<a href="{_e(pdf.get(Path(f).stem, f))}"><img src="{_e(f)}" alt="figure '
        f'{entry.number}: {_e(entry.title)}" loading="eager"></a>'
        for f in png
    )
    heading, text = caption or (entry.title, "")
    about = _paragraphs(text) if text else _paragraphs(entry.doc.split("\n\n")[0])
    runs_html, counts, flops = runs_table(entry)
    done = counts.get("done", 0)
    total = sum(counts.values())
    facts = [f"profile <code>{_e(entry.profile)}</code>"]
    if total:
        facts.append(
            f"{done} of {total} runs done"
            + "".join(f", {n} {_e(s)}" for s, n in sorted(counts.items()) if s != "done")
        )
    if flops:
        facts.append(f"transformer training compute {flops:.3g} FLOPs")
    stats = claims_table(records, table_id=f"claims-fig{entry.number:02d}") if records else ""
    only = f"--only {entry.number} {_e(profile_args(entry.profile))}"
    commands = (
        f"<pre><code>smallinit figs {only}          # redraw from the stored runs\n"
        f"smallinit figs {only} --force  # recompute its runs, then draw\n"
        f"smallinit figs {only} --plan   # list its runs, compute nothing"
        "</code></pre>"
    )
    return (
        f'<section class="figure" id="fig{entry.number:02d}">'
        f"<h2>Figure {entry.number}: {_e(entry.title)}</h2>"
        f'<p class="source">docs/science.md §7.{entry.number} {_e(heading)} · '
        f"<code>paper_figs/{_e(entry.stem)}.py</code> · {' · '.join(facts)}</p>"
        f'<div class="images">{images}</div>{about}'
        + (f"<h3>Statistics</h3>{stats}" if stats else "")
        + f"<h3>Runs behind it</h3>{runs_html}<h3>Commands</h3>{commands}</section>"
    )


STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1180px;
       padding: 1em 1.5em 4em; color: #1d1d1d; overflow-wrap: break-word; }
h1 { margin-bottom: .2em; } h2 { border-top: 1px solid #ccc; padding-top: .8em; }
h3 { margin: 1em 0 .3em; font-size: 1em; }
code, pre { font: 13px ui-monospace, monospace; }
pre { background: #f4f4f4; padding: .6em; max-width: 100%; overflow-x: auto;
      white-space: pre-wrap; overflow-wrap: anywhere; }
.table-scroll { max-width: 100%; overflow-x: auto; margin: .4em 0; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: .25em .5em; vertical-align: top; text-align: left; }
th { background: #f0f0f0; } td.num { text-align: right; white-space: nowrap; }
.note, details { color: #555; font-size: 12px; } .small { font-size: 12px; color: #555; }
td.claim-cell { min-width: 11em; } .num { white-space: nowrap; }
img { max-width: 100%; height: auto; }
.images img { border: 1px solid #eee; margin: .3em 0; }
.source { color: #555; font-size: 13px; }
.verdict { padding: .05em .45em; border-radius: .6em; white-space: nowrap; }
.v-holds { background: #c8ecc9; } .v-partial { background: #f3e7b0; }
.v-not-at-this-scale { background: #e4e4e4; } .v-contradicted { background: #f5c2c0; }
.v-not-run { background: #fff; border: 1px dashed #aaa; }
.v-undecided { background: #fff; border: 1px solid #aaa; }
nav a { margin-right: .8em; white-space: nowrap; display: inline-block; }
@media (max-width: 600px) { body { padding: .6em .8em 3em; font-size: 14px; } }
"""


def table_profiles(
    records: Sequence[claims_mod.Record], in_store: Sequence[str]
) -> tuple[list[str], str]:
    """The profiles the claims table shows and one line saying which it leaves out and why.
    Shown: the profiles of the store with at least one claim judged (not ``not run``); when
    none has one, the first profile of the store alone, so that its missing runs are listed.
    Left out: the other profiles of the store (their runs are ones they share, e.g. the toy
    runs after a ``make figs`` of the toy figures alone: every claim there is ``not run``)
    and the packaged profiles without runs in the store."""
    judged = [
        p for p in in_store if any(r.profile == p and r.verdict != "not run" for r in records)
    ]
    shown = judged or list(in_store[:1])
    idle = [p for p in in_store if p not in shown]
    absent = [p for p in profiles.names() if p not in in_store]
    why = []
    if idle:
        why.append(
            f"{', '.join(idle)} (every claim not run: no claim has all its runs in the store)"
        )
    if absent:
        why.append(f"{', '.join(absent)} (no runs in the store)")
    return shown, ("Left out: " + "; ".join(why) + "." if why else "")


def render(
    entries: Sequence[FigureEntry],
    records: Sequence[claims_mod.Record],
    in_store: Sequence[str],
    captions: dict[int, tuple[str, str]],
    gpu_checks: Sequence[GpuCheck] = (),
) -> str:
    """The whole page (a pure function of its inputs: the same inputs, the same bytes);
    ``gpu_checks``: the committed GPU checks (:mod:`smallinit.study.gpu_report`), a section
    of their own after the claims when there are any."""
    by_claim: dict[tuple[str, str], claims_mod.Record] = {(r.id, r.profile): r for r in records}
    sections = []
    for entry in entries:
        names = set(entry.runs)
        figure_records = [
            by_claim[(c.id, entry.profile)]
            for c in claims_mod.CLAIMS.values()
            if c.experiment in names and (c.id, entry.profile) in by_claim
        ]
        sections.append(figure_section(entry, captions.get(entry.number), figure_records))
    nav = ('<a href="#gpu-section">GPU</a>' if gpu_checks else "") + "".join(
        f'<a href="#fig{e.number:02d}">Fig {e.number}</a>' for e in entries
    )
    shown = ", ".join(f"<code>{_e(p)}</code>" for p in in_store) or "none"
    shown_profiles, left_out = table_profiles(records, in_store)
    table_records = [r for r in records if r.profile in shown_profiles]
    left_html = f'<p class="left-out">{_e(left_out)}</p>' if left_out and records else ""
    claims_html = (
        verdict_counts(table_records) + left_html + claims_table(table_records)
        if table_records
        else "<p>The store has no runs of any profile yet: every claim is "
        "<em>not run</em> (<code>make figs</code> computes the quick profile's).</p>"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>smallinit: figures and claims</title><style>{STYLE}</style></head><body>"
        "<h1>smallinit: figures and claims</h1>"
        "<p>How the scale of initialization decides what a network learns. Every number "
        "below comes from a run in the store (<code>smallinit runs ls</code>); the page is "
        "written by <code>make figs</code> (<code>smallinit figs</code>) and reads nothing "
        "from the network.</p>"
        f'<nav><a href="#claims-section">Claims</a>{nav}</nav>'
        '<section id="claims-section"><h2>The study\'s claims, measured</h2>'
        f"<p>Judged from the stored runs by the verdict rules of docs/science.md §13.2 "
        f"(<code>smallinit claims --profile P</code>; <code>--rules 13.1</code> gives the "
        f"earlier rules); profiles with runs in the store: {shown} (profiles share the runs "
        f"whose configs they share). Effect in the claim's units, in parentheses its one-sided "
        f"bound at Holm's level, the deciding test's raw p, that p adjusted by Holm over the "
        f"profile's claims (for a contradicted claim also the adjusted p of the test against "
        f"it), n seeds; a claim whose runs are not "
        f"all done is <em>not run</em>, its missing runs listed. <em>Decided at</em>: the "
        f"profiles whose design decides the claim; quick cuts seeds and grid points to fit "
        f"its time, so its verdicts are a first look.</p>{claims_html}</section>"
        + gpu_section(list(gpu_checks), scroll_box)
        + "".join(sections)
        + "</body></html>\n"
    )


def write_report(
    out_dir: Path,
    entries: Sequence[FigureEntry],
    store: RunStore,
    *,
    table: Callable[[Sequence[str], RunStore], list[claims_mod.Record]] | None = None,
    gpu_results: Path | None = None,
) -> Path:
    """Write ``out_dir/index.html`` for ``entries`` (module docstring) and return its path;
    ``table`` computes the claims records (default :func:`smallinit.study.claims.table`,
    read-only) of the profiles the store has runs of; ``gpu_results``: the folder of the
    committed GPU checks (default: the checkout's ``bench-results/gpu``,
    :func:`smallinit.study.gpu_report.read_checks`)."""
    in_store = profiles_in_store(store)
    records = (table or claims_mod.table)(in_store, store) if in_store else []
    page = render(entries, records, in_store, science_captions(), read_checks(gpu_results))
    path = Path(out_dir) / REPORT
    atomic_write_text(path, page)
    return path
