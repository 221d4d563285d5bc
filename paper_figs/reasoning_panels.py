"""Panels shared by figs 7 and 9: reasoning accuracy and answer-token loss per task and
difficulty against γ, every seed a dot, each level's chance a dashed line
(docs/science.md §7.7, §7.9; the cells are read by :mod:`smallinit.llm.analysis.reasoning`)."""

from __future__ import annotations

import numpy as np

from smallinit.core.stats import paired
from smallinit.llm.analysis.reasoning import cells
from smallinit.llm.data.synthetic import LEVELS, REASONING

LEVEL_COLORS = {1: "tab:green", 2: "tab:orange", 3: "tab:purple"}


def run_cells(summary: dict) -> dict[tuple[str, int], object]:
    """A run's cells by (task, level)."""
    return {(c.task, c.difficulty): c for c in cells(summary)}


def _n_label(rows, task) -> str:
    """The items scored per level of ``task`` (a range where runs or levels differ)."""
    ns = sorted({r["cells"][(task, k)].n for r in rows for k in LEVELS if (task, k) in r["cells"]})
    if not ns:
        return "0"
    return str(ns[0]) if ns[0] == ns[-1] else f"{ns[0]}–{ns[-1]}"


def draw_tasks(acc_axes, loss_axes, rows, *, groups=None, styles=("-",), markers=("o",)):
    """Per task (one column each): accuracy (``acc_axes``) and answer-token loss
    (``loss_axes``) against γ, a colour per difficulty; ``groups`` (e.g. sizes, key
    ``size``) get a line style and marker each. Seeds are dots, lines their mean."""
    groups = groups or [None]
    for task, ax_acc, ax_loss in zip(REASONING, acc_axes, loss_axes, strict=True):
        for k in LEVELS:
            color = LEVEL_COLORS[k]
            chances = set()
            for group, ls, mark in zip(groups, styles, markers, strict=False):
                mine = [
                    r
                    for r in rows
                    if r["gamma"] is not None
                    and (group is None or r["size"] == group)
                    and (task, k) in r["cells"]
                ]
                if not mine:
                    continue
                chances.update(r["cells"][(task, k)].chance for r in mine)
                gammas = sorted({r["gamma"] for r in mine})
                for ax, attr in ((ax_acc, "acc"), (ax_loss, "answer_loss")):
                    pts = [(r["gamma"], getattr(r["cells"][(task, k)], attr)) for r in mine]
                    ax.plot(
                        [p[0] for p in pts],
                        [p[1] for p in pts],
                        mark,
                        color=color,
                        ms=3,
                        alpha=0.45,
                        mfc="none" if mark != "o" else color,
                        lw=0,
                    )
                    mean = [np.mean([v for g, v in pts if g == x]) for x in gammas]
                    label = f"d{k}" + ("" if group is None else f", d = {group}")
                    ax.plot(gammas, mean, ls, color=color, lw=1.2, label=label)
            for ch in chances:
                ax_acc.axhline(ch, color=color, ls="--", lw=0.8)
        seeds = sorted({r["seed"] for r in rows})
        ax_acc.set_title(
            f"{task}: greedy accuracy (n = {_n_label(rows, task)} items per "
            f"level, {len(seeds)} seeds)",
            fontsize=8,
        )
        ax_loss.set_title(f"{task}: loss on answer tokens", fontsize=8)
        for ax, label in (
            (ax_acc, "accuracy (dashed: chance per level)"),
            (ax_loss, "answer-token loss (nats)"),
        ):
            ax.set_xlabel("γ (σ = d_in^−γ)")
            ax.set_ylabel(label, fontsize=8)
        ax_acc.legend(fontsize=6, ncol=1 if groups == [None] else 3)


def paired_by_seed(rows, value, a_gamma: float = 1.0, b_gamma: float = 0.5, where=None):
    """(values at ``a_gamma``, values at ``b_gamma``) over the seeds that have both, with
    ``value(row)`` per run and ``where(row)`` selecting runs (e.g. one size)."""
    by = {}
    for r in rows:
        if r["gamma"] in (a_gamma, b_gamma) and (where is None or where(r)):
            v = value(r)
            if v is not None and np.isfinite(v):
                by.setdefault(r["seed"], {})[r["gamma"]] = v
    seeds = sorted(s for s, d in by.items() if len(d) == 2)
    return [by[s][a_gamma] for s in seeds], [by[s][b_gamma] for s in seeds]


def draw_paired_cells(ax, rows, where=None):
    """Per cell: accuracy at γ = 1 minus at γ = 0.5, each seed a dot, the mean with its 95%
    CI (``smallinit.core.stats.paired``). Returns the estimates by cell name."""
    names, estimates = [], {}
    for i, (task, k) in enumerate((t, k) for t in REASONING for k in LEVELS):
        a, b = paired_by_seed(
            rows, lambda r, c=(task, k): getattr(r["cells"].get(c), "acc", None), where=where
        )
        names.append(f"{task} d{k}")
        if not a:
            continue
        est = paired(a, b)
        estimates[f"{task} d{k}"] = est
        diffs = np.asarray(a) - np.asarray(b)
        ax.plot(np.full(len(diffs), i), diffs, "o", color=LEVEL_COLORS[k], ms=3, alpha=0.6)
        if np.isfinite(est.ci_low):
            ax.errorbar(
                i,
                est.effect,
                [[est.effect - est.ci_low], [est.ci_high - est.effect]],
                fmt="_",
                color="k",
                ms=10,
                capsize=2,
                lw=1,
            )
        else:
            ax.plot(i, est.effect, "_", color="k", ms=10)
    ax.axhline(0, color="0.5", lw=0.8)
    ax.set_xticks(range(len(names)), names, rotation=60, fontsize=7)
    ax.set_ylabel("accuracy: γ = 1 − γ = 0.5 (per seed; mean, 95% CI)", fontsize=8)
    return estimates
