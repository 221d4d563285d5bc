"""Compare two trained runs (e.g. γ = 1 vs γ = 0.5) on benchmark groups, with paired
bootstrap intervals.

Groups (configurable): by default

    reasoning   = gsm8k, arc_challenge, math, bbh     (those present)
    knowledge   = mmlu, triviaqa, nq_open
    commonsense = hellaswag, piqa, arc_easy

Each task is compared on its headline metric
(:func:`smallinit.llm.downstream.scoring.primary_metric`: ``acc_norm`` for multiple choice,
``exact_match`` for generation), read from the per-item records of either record format
(:func:`smallinit.llm.downstream.scoring.outcome`: results stored before llm-downstream
VERSION 2 call it ``correct``). A group's score is the unweighted mean of its tasks'
accuracies (macro average, so a large task does not drown a small one). The two runs are
paired item by item: only items that both runs were scored on count. The interval for a
difference A − B is the percentile interval of the paired bootstrap (Efron & Tibshirani
1993; Koehn 2004): each replicate resamples every task's items with replacement, *the same
items for both runs*, and recomputes the task and group differences; the interval is the
(α/2, 1 − α/2) quantiles of the replicates, and ``p`` is twice the smaller tail fraction of
replicates at or beyond 0 (a two-sided bootstrap p-value, at least 1/B)."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from smallinit.core.config import read_toml
from smallinit.core.errors import ConfigError
from smallinit.core.memory import check_memory
from smallinit.core.store import RunStore
from smallinit.llm.downstream.run import downstream_runs_of, resolve_run
from smallinit.llm.downstream.scoring import outcome, primary_metric
from smallinit.llm.downstream.tasks import TASKS

DEFAULT_GROUPS: dict[str, tuple[str, ...]] = {
    "reasoning": ("gsm8k", "arc_challenge", "math", "bbh"),
    "knowledge": ("mmlu", "triviaqa", "nq_open"),
    "commonsense": ("hellaswag", "piqa", "arc_easy"),
}
KIND = "llm-downstream-compare"
VERSION = "1"


def parse_groups(text: str | None) -> dict[str, tuple[str, ...]]:
    """``"reasoning=gsm8k,arc_challenge;knowledge=mmlu"``, a TOML file with a ``[groups]``
    table of lists, or None for the default groups."""
    if text is None:
        return dict(DEFAULT_GROUPS)
    if text.endswith(".toml") or Path(text).is_file():
        table = read_toml(text).get("groups")
        if not isinstance(table, dict) or not table:
            raise ConfigError(f"{text} has no [groups] table of name = [tasks] entries")
        pairs = [(k, v) for k, v in table.items()]
    else:
        pairs = []
        for part in filter(None, (p.strip() for p in text.split(";"))):
            name, eq, tasks = part.partition("=")
            if not eq or not name.strip():
                raise ConfigError(
                    f"group {part!r} is not NAME=task,task; e.g. "
                    "'reasoning=gsm8k,arc_challenge;knowledge=mmlu'"
                )
            pairs.append((name.strip(), [t.strip() for t in tasks.split(",") if t.strip()]))
    groups: dict[str, tuple[str, ...]] = {}
    for name, tasks in pairs:
        if not isinstance(tasks, list) or not tasks:
            raise ConfigError(f"group {name!r} has no tasks")
        for t in tasks:
            if t not in TASKS:
                raise ConfigError(
                    f"group {name!r}: benchmark {t!r} is not known; choose from " + ", ".join(TASKS)
                )
        groups[name] = tuple(tasks)
    if not groups:
        raise ConfigError(f"no groups in {text!r}")
    return groups


# ----------------------------------------------------------------------------- pairing
@dataclass
class Paired:
    """One task's outcomes for runs A and B on the same items."""

    task: str
    ids: list[str]
    a: np.ndarray
    b: np.ndarray
    notes: list[str] = field(default_factory=list)
    metric: str = "acc_norm"


def pair_records(
    task: str,
    recs_a: Sequence[Mapping[str, Any]],
    recs_b: Sequence[Mapping[str, Any]],
    metric: str | None = None,
) -> Paired:
    """Align two runs' per-item 0/1 outcomes under ``metric`` (default: the task's
    headline metric) by item id (items both have, in A's order)."""
    by_b = {r["id"]: r for r in recs_b}
    ids = [r["id"] for r in recs_a if r["id"] in by_b]
    if not ids:
        raise ConfigError(
            f"benchmark {task}: the two runs share no scored items; evaluate "
            "both on the same data and --limit"
        )
    by_a = {r["id"]: r for r in recs_a}
    metric = metric or primary_metric(recs_a)
    a = np.array([outcome(by_a[i], metric) for i in ids], dtype=np.float64)
    b = np.array([outcome(by_b[i], metric) for i in ids], dtype=np.float64)
    notes = []
    if len(ids) < max(len(recs_a), len(recs_b)):
        notes.append(
            f"paired on {len(ids)} shared items (A has {len(recs_a)}, B has {len(recs_b)})"
        )
    return Paired(task, ids, a, b, notes, metric)


# ----------------------------------------------------------------------------- bootstrap
def _task_replicates(p: Paired, n_boot: int, seed: int, chunk: int = 64) -> np.ndarray:
    """n_boot bootstrap replicates of mean(a) − mean(b) over resampled shared items."""
    rng = np.random.default_rng([seed, zlib.crc32(p.task.encode())])
    n = len(p.ids)
    out = np.empty(n_boot)
    diff = p.a - p.b
    for lo in range(0, n_boot, chunk):
        hi = min(n_boot, lo + chunk)
        idx = rng.integers(0, n, size=(hi - lo, n))
        out[lo:hi] = diff[idx].mean(axis=1)
    return out


def _interval(point: float, reps: np.ndarray, alpha: float) -> dict[str, float]:
    lo, hi = np.quantile(reps, [alpha / 2, 1 - alpha / 2])
    tail = min(float(np.mean(reps <= 0)), float(np.mean(reps >= 0)))
    return {
        "diff": point,
        "lo": float(lo),
        "hi": float(hi),
        "p": float(min(1.0, max(2 * tail, 1.0 / len(reps)))),
    }


def compare_paired(
    paired: Mapping[str, Paired],
    groups: Mapping[str, Sequence[str]],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> dict[str, Any]:
    """Per-task and per-group accuracies of A and B, differences and bootstrap intervals."""
    if n_boot < 10:
        raise ConfigError(f"bootstrap replicates {n_boot} is too few; use >= 10")
    if not 0 < alpha < 1:
        raise ConfigError(f"alpha={alpha} must be in (0, 1)")
    check_bootstrap_memory(n_boot, len(paired) + len(groups))
    reps = {t: _task_replicates(p, n_boot, seed) for t, p in paired.items()}
    tasks = {}
    for t, p in paired.items():
        a, b = float(p.a.mean()), float(p.b.mean())
        tasks[t] = {
            "n": len(p.ids),
            "metric": p.metric,
            "acc_a": a,
            "acc_b": b,
            **_interval(a - b, reps[t], alpha),
            "notes": p.notes,
        }
    out_groups = {}
    for name, members in groups.items():
        present = [t for t in members if t in paired]
        missing = [t for t in members if t not in paired]
        if not present:
            out_groups[name] = {"tasks": [], "missing": missing}
            continue
        a = float(np.mean([tasks[t]["acc_a"] for t in present]))
        b = float(np.mean([tasks[t]["acc_b"] for t in present]))
        group_reps = np.mean([reps[t] for t in present], axis=0)
        out_groups[name] = {
            "tasks": present,
            "missing": missing,
            "acc_a": a,
            "acc_b": b,
            **_interval(a - b, group_reps, alpha),
        }
    return {"tasks": tasks, "groups": out_groups, "n_boot": n_boot, "seed": seed, "alpha": alpha}


def bootstrap_bytes(n_boot: int, n_series: int) -> int:
    """Memory of the bootstrap: one float64 vector of ``n_boot`` replicates per task and
    per group (``n_series``), plus one for the quantiles' sorted copy."""
    return 8 * n_boot * (n_series + 1)


def check_bootstrap_memory(n_boot: int, n_series: int = 1) -> None:
    """Refuse ``--bootstrap`` values whose replicates cannot fit the memory limit."""
    check_memory(
        bootstrap_bytes(n_boot, n_series),
        f"--bootstrap {n_boot} ({n_boot} float64 replicates for each of {n_series} "
        "tasks and groups, at least)",
    )


# ----------------------------------------------------------------------------- two stored runs
def compare_runs(
    ref_a: str,
    ref_b: str,
    *,
    groups: Mapping[str, Sequence[str]] | None = None,
    tasks: Sequence[str] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    runs_dir: str | Path | None = None,
    force: bool = False,
):
    """Compare the stored benchmark results of two trained runs; the report is stored as a
    run of kind ``llm-downstream-compare`` (``report.json``). Returns (report, run)."""
    groups = dict(groups or DEFAULT_GROUPS)
    if n_boot < 10:
        raise ConfigError(f"bootstrap replicates {n_boot} is too few; use >= 10")
    check_bootstrap_memory(n_boot)  # the least any comparison needs, before reading runs
    ta, tb = resolve_run(ref_a, runs_dir), resolve_run(ref_b, runs_dir)
    store = RunStore(runs_dir or ta.store_root)
    runs_a, runs_b = downstream_runs_of(store, ta.name), downstream_runs_of(store, tb.name)
    wanted = list(tasks) if tasks else sorted(set(runs_a) & set(runs_b))
    if not wanted:
        raise ConfigError(
            f"no benchmark was scored for both {ta.name} and {tb.name}; run "
            "smallinit llm downstream on each first"
        )
    chosen = {}
    for t in wanted:
        if t not in runs_a or t not in runs_b:
            who = ta.name if t not in runs_a else tb.name
            raise ConfigError(f"benchmark {t} has no finished result for {who}")
        chosen[t] = _best_pair(runs_a[t], runs_b[t])
    config = {
        "a": ta.name,
        "b": tb.name,
        "groups": {k: list(v) for k, v in groups.items()},
        "bench_runs": {t: [ra.key, rb.key] for t, (ra, rb) in chosen.items()},
        "n_boot": n_boot,
        "seed": seed,
    }

    def body(run):
        paired = {t: pair_records(t, ra.metrics(), rb.metrics()) for t, (ra, rb) in chosen.items()}
        report = compare_paired(paired, groups, n_boot=n_boot, seed=seed)
        report.update(a=ta.name, b=tb.name, bench_runs=config["bench_runs"])
        run.write_json("report.json", report)
        return {
            "groups": {
                k: {kk: v.get(kk) for kk in ("acc_a", "acc_b", "diff", "lo", "hi")}
                for k, v in report["groups"].items()
            }
        }

    run = store.get_or_run(KIND, config, body, version=VERSION, force=force)
    return run.read_json("report.json"), run


def _best_pair(runs_a, runs_b):
    """The two runs with the same data digest and the most items (else the largest)."""

    def size(r):
        return int(r.config.get("n_items", 0))

    same = [
        (ra, rb) for ra in runs_a for rb in runs_b if ra.config.get("data") == rb.config.get("data")
    ]
    pool = same or [(ra, rb) for ra in runs_a for rb in runs_b]
    return max(pool, key=lambda pr: (min(size(pr[0]), size(pr[1])), pr[0].key, pr[1].key))


def format_report(report: Mapping[str, Any]) -> str:
    """A plain-text table of the groups and tasks."""
    lines = [
        f"A = {report.get('a', 'A')}   B = {report.get('b', 'B')}   "
        f"(paired bootstrap, {report['n_boot']} replicates, "
        f"{100 * (1 - report['alpha']):.0f}% intervals)",
        f"{'':2}{'name':<16}{'n':>7}{'acc A':>9}{'acc B':>9}{'A - B':>9}{'interval':>20}{'p':>8}",
    ]

    def row(name, n, r):
        return (
            f"  {name:<16}{n:>7}{r['acc_a']:>9.4f}{r['acc_b']:>9.4f}{r['diff']:>+9.4f}"
            f"{'[' + format(r['lo'], '+.4f') + ', ' + format(r['hi'], '+.4f') + ']':>20}"
            f"{r['p']:>8.3f}"
        )

    lines.append("groups (macro mean over tasks)")
    for name, g in report["groups"].items():
        if not g["tasks"]:
            lines.append(f"  {name:<16}   no scored tasks (missing: {', '.join(g['missing'])})")
            continue
        lines.append(
            row(name, len(g["tasks"]), g)
            + (f"   missing: {', '.join(g['missing'])}" if g["missing"] else "")
        )
    lines.append("tasks")
    for name, t in report["tasks"].items():
        lines.append(row(name, t["n"], t) + ("   " + "; ".join(t["notes"]) if t["notes"] else ""))
    return "\n".join(lines)


__all__ = [
    "DEFAULT_GROUPS",
    "parse_groups",
    "pair_records",
    "compare_paired",
    "compare_runs",
    "format_report",
    "Paired",
]
