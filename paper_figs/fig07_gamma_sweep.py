"""Fig 7: held-out loss, reasoning and memorization versus γ across model sizes (docs/science.md
§5).

Every size trains for the same steps × batch × context tokens. Top: held-out loss against
γ (σ = d_in^−γ) per size, with the ``nanogpt`` and ``fixed:0.02`` baselines drawn at their
effective γ, γ_eff = −ln 0.02 / ln d (docs/science.md §1); the best γ per size (minimum of a
parabola through the grid minimum and its neighbours, per seed) against size, and the paired
difference of the held-out loss γ = 1 − γ = 0.5 per size (seeds as dots, mean with its 95%
CI; the title gives the largest size's effect, CI and paired p). Middle and bottom, one column
per reasoning task: greedy accuracy and answer-token loss per difficulty level against γ
(colour: level, line style: size, dots: seeds, dashed: each level's chance 1/|answer
space|); fact (memorization) accuracy; and per (task, level) the paired accuracy difference
γ = 1 − γ = 0.5 at the largest size.
"""

from __future__ import annotations

import logging
import math

import matplotlib.pyplot as plt
import numpy as np

from smallinit.core.plotting import use_style
from smallinit.core.stats import paired
from smallinit.llm.analysis.critical import best_gamma, excess_accuracy
from smallinit.paper_figs.reasoning_panels import (
    draw_paired_cells,
    draw_tasks,
    paired_by_seed,
    run_cells,
)
from smallinit.study.figure import Figure

log = logging.getLogger(__name__)


def collect(pairs):
    rows = []
    for job, run in pairs.done():
        s = run.summary
        d = job.tags["size"]
        gamma = job.tags["gamma"]
        rows.append(
            {
                "size": d,
                "init": job.tags["init"],
                "seed": job.tags["seed"],
                "gamma": gamma,
                "gamma_eff": -math.log(0.02) / math.log(d) if gamma is None else gamma,
                "val_loss": s["val_loss"],
                "excess": excess_accuracy(s)[0],
                "cells": run_cells(s),
                "acc_fact": s.get("acc_fact", np.nan),
            }
        )
    return rows


def _series(rows, size, key, seed=None):
    pts = sorted(
        (r["gamma"], r[key])
        for r in rows
        if r["size"] == size and r["gamma"] is not None and (seed is None or r["seed"] == seed)
    )
    g = sorted({p[0] for p in pts})
    return np.array(g), np.array([np.mean([v for gg, v in pts if gg == x]) for x in g])


def make(ctx):
    pairs = ctx.results("gamma-sweep")
    rows = collect(pairs)
    sizes = sorted({r["size"] for r in rows})
    colors = plt.get_cmap("viridis")(np.linspace(0, 0.85, len(sizes)))
    marks = {"nanogpt": "s", "fixed:0.02": "D"}
    seeds = sorted({r["seed"] for r in rows})
    largest = sizes[-1]
    with use_style():
        fig, axes = plt.subplots(3, 4, figsize=(17, 11.5), constrained_layout=True)
        best = {}
        for ax, key, label in (
            (axes[0, 0], "val_loss", "held-out loss (nats/token)"),
            (axes[1, 3], "acc_fact", "memorization accuracy (facts)"),
        ):
            for size, color in zip(sizes, colors, strict=True):
                for r in rows:
                    if r["size"] == size and r["gamma"] is not None:
                        ax.plot(r["gamma"], r[key], ".", color=color, ms=3, alpha=0.5)
                g, y = _series(rows, size, key)
                ax.plot(g, y, "o-", color=color, label=f"d = {size}", ms=4)
                for init, mark in marks.items():
                    base = [r for r in rows if r["size"] == size and r["init"] == init]
                    if base:
                        ax.plot(
                            base[0]["gamma_eff"],
                            np.mean([r[key] for r in base]),
                            mark,
                            color=color,
                            mfc="none",
                            ms=7,
                        )
                if key == "val_loss":
                    best[size] = {
                        seed: best_gamma(*_series(rows, size, key, seed)) for seed in seeds
                    }
                    ax.axvline(np.nanmean(list(best[size].values())), color=color, lw=0.8, ls=":")
            ax.set_xlabel("γ (σ = d_in^−γ)")
            ax.set_ylabel(label)
        axes[0, 0].legend(
            fontsize=7, title="□ nanogpt, ◇ fixed 0.02 at γ_eff; dots: seeds", title_fontsize=7
        )
        ax = axes[0, 1]
        for size, color in zip(sizes, colors, strict=True):
            g, y = _series(rows, size, "val_loss")
            ax.plot(g, y - np.nanmin(y), "o-", color=color, ms=4, label=f"d = {size}")
        ax.set_ylim(-0.01, 0.15)
        ax.set_xlabel("γ")
        ax.set_ylabel("held-out loss − best of its size")
        ax.set_title("zoom near the optimum (mean over seeds)", fontsize=9)
        ax = axes[0, 2]
        ax.plot(
            sizes,
            [np.nanmean(list(best[s].values())) for s in sizes],
            "ko-",
            label="mean over seeds",
        )
        for seed, marker in zip(seeds, "s^vD<>", strict=False):
            ax.plot(
                sizes,
                [best[s][seed] for s in sizes],
                marker,
                color="0.5",
                mfc="none",
                label=f"seed {seed}",
            )
        ax.legend(fontsize=7)
        ax.set_xscale("log")
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.minorticks_off()
        ax.set_xlabel("d_model")
        ax.set_ylabel("best γ (parabolic vertex of the held-out loss)")
        ax = axes[0, 3]
        loss_gain = {}
        for i, (size, color) in enumerate(zip(sizes, colors, strict=True)):
            a, b = paired_by_seed(
                rows, lambda r: r["val_loss"], where=lambda r, size=size: r["size"] == size
            )
            if not a:
                continue
            est = loss_gain[size] = paired(a, b)
            ax.plot(np.full(len(a), i), np.asarray(a) - np.asarray(b), "o", color=color, ms=4)
            if np.isfinite(est.ci_low):
                ax.errorbar(
                    i,
                    est.effect,
                    [[est.effect - est.ci_low], [est.ci_high - est.effect]],
                    fmt="_",
                    color="k",
                    ms=12,
                    capsize=3,
                )
        ax.axhline(0, color="0.5", lw=0.8)
        ax.set_xticks(range(len(sizes)), [f"d = {s}" for s in sizes])
        ax.set_ylabel("held-out loss: γ = 1 − γ = 0.5 (per seed; mean, 95% CI)", fontsize=8)
        if largest in loss_gain:
            ax.set_title(f"d = {largest}: {loss_gain[largest].label('Δ loss')}", fontsize=8)
        draw_tasks(
            [axes[1, 0], axes[1, 1], axes[1, 2]],
            [axes[2, 0], axes[2, 1], axes[2, 2]],
            rows,
            groups=sizes,
            styles=(":", "--", "-"),
            markers=("v", "s", "o"),
        )
        ax = axes[2, 3]
        cell_gain = draw_paired_cells(ax, rows, where=lambda r: r["size"] == largest)
        a, b = paired_by_seed(rows, lambda r: r["excess"], where=lambda r: r["size"] == largest)
        excess_gain = paired(a, b) if a else None
        ax.set_title(
            f"d = {largest}, accuracy above baseline pooled:\n"
            f"{excess_gain.label('Δ') if excess_gain else 'no paired seeds'}",
            fontsize=8,
        )
        steps = pairs[0][0].config.train.steps
        tokens = steps * pairs[0][0].config.train.batch_size * pairs[0][0].config.model.context
        fig.suptitle(
            f"γ sweep, {steps} steps ({tokens:,} tokens) per run; curves: mean over "
            f"seeds {seeds} (n = {len(seeds)})",
            fontsize=10,
        )
        paths = ctx.save(fig)
    for size, est in loss_gain.items():
        log.info(
            "fig 7 d=%d held-out loss γ=1 − γ=0.5: %s; best γ per seed %s",
            size,
            est.label("Δ"),
            best[size],
        )
    for name, est in cell_gain.items():
        log.info("fig 7 d=%d accuracy γ=1 − γ=0.5 %s: %s", largest, name, est.label("Δ"))
    for size in sizes:
        for r in sorted(
            (r for r in rows if r["size"] == size and r["gamma"] in (0.5, 1.0)),
            key=lambda r: (r["gamma"], r["seed"]),
        ):
            log.info(
                "fig 7 d=%d γ=%g seed %d: val loss %.4f, acc_fact %.3f, %s",
                size,
                r["gamma"],
                r["seed"],
                r["val_loss"],
                r["acc_fact"],
                ", ".join(
                    f"{c.name} {c.acc:.3f} (chance {c.chance:.3f})" for c in r["cells"].values()
                ),
            )
    return paths


FIGURE = Figure(
    number=7,
    caption=__doc__,
    make=make,
    title="LLM loss, reasoning and memorization versus γ across model sizes",
)
