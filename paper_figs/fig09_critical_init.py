"""Fig 9: critical initialization — what small init costs and what it buys (docs/science.md §4, §5).

Smallest model of the sweep, γ grid × seeds (every seed a dot). Top: (a) final training loss;
(b) steps until the training loss first reaches θ = 1.2 × the sweep's median final loss
(:func:`smallinit.llm.analysis.critical.plateau_steps`), with theory's escape time from scale
ε = d^−γ (``smallinit.theory.escape.escape_time_gamma``, L = 2: ∝ γ ln d; L = 3: ∝ d^γ)
fitted with one offset and one scale on the small-init side (γ at or above the fastest γ);
(c) reasoning accuracy above the prompt-blind baseline, pooled over tasks and levels
(:func:`smallinit.llm.analysis.critical.excess_accuracy`), and (d) the held-out loss. Middle
and bottom, one column per reasoning task: greedy accuracy and answer-token loss per
difficulty level (dashed: each level's chance). Right: the critical γ of each seed read two
ways — from reasoning accuracy (the knee of (c): the smallest γ within one standard error of
that seed's best, :func:`~smallinit.llm.analysis.critical.knee_gamma`) and from loss (the
loss-optimal γ of (d), :func:`~smallinit.llm.analysis.critical.best_gamma`, as fig 7) — with
their means and 95% CIs; and per (task, level) the paired accuracy difference γ = 1 − γ = 0.5
with its 95% CI, the pooled one's effect, CI and paired p in the title.
"""

from __future__ import annotations

import logging

import matplotlib.pyplot as plt
import numpy as np

from smallinit.core.plotting import use_style
from smallinit.core.stats import mean_ci, paired
from smallinit.llm.analysis.critical import (
    best_gamma,
    escape_fit,
    excess_accuracy,
    knee_gamma,
    loss_threshold,
    plateau_steps,
)
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
        curve = [(m["step"], m["loss"]) for m in run.metrics() if "loss" in m]
        excess, se = excess_accuracy(run.summary)
        rows.append(
            {
                "gamma": job.tags["gamma"],
                "seed": job.tags["seed"],
                "train_loss": run.summary["train_loss"],
                "val_loss": run.summary["val_loss"],
                "excess": excess,
                "excess_se": se,
                "cells": run_cells(run.summary),
                "curve": np.array(curve),
            }
        )
    return rows


def critical_gammas(rows) -> dict[int, dict[str, float]]:
    """Per seed: the critical γ from reasoning accuracy (knee of the excess accuracy, the
    tolerance one standard error of the seed's best) and from loss (the loss-optimal γ)."""
    out = {}
    for seed in sorted({r["seed"] for r in rows}):
        mine = sorted((r for r in rows if r["seed"] == seed), key=lambda r: r["gamma"])
        g = [r["gamma"] for r in mine]
        acc = np.array([r["excess"] for r in mine])
        best = int(np.nanargmax(acc)) if np.isfinite(acc).any() else 0
        k_acc = (
            knee_gamma(g, acc, mine[best]["excess_se"]) if np.isfinite(acc).any() else float("nan")
        )
        out[seed] = {"acc": k_acc, "loss": best_gamma(g, [r["val_loss"] for r in mine])}
    return out


def _estimate_text(name: str, values) -> str:
    est = mean_ci(values)
    return (
        f"{name}: {est.effect:.2f} [{est.ci_low:.2f}, {est.ci_high:.2f}]"
        if np.isfinite(est.ci_low)
        else f"{name}: {est.effect:.2f}"
    )


def make(ctx):
    pairs = ctx.results("critical-init")
    rows = collect(pairs)
    cfg = pairs[0][0].config
    d = cfg.model.d_model
    theta = loss_threshold([r["train_loss"] for r in rows])
    for r in rows:
        r["plateau"] = plateau_steps(r["curve"][:, 0], r["curve"][:, 1], theta)
    seeds = sorted({r["seed"] for r in rows})
    gammas = sorted({r["gamma"] for r in rows})
    crit = critical_gammas(rows)

    def mean_of(key):
        out = []
        for g in gammas:
            vals = np.array([r[key] for r in rows if r["gamma"] == g], dtype=float)
            out.append(vals[np.isfinite(vals)].mean() if np.isfinite(vals).any() else np.nan)
        return np.array(out)

    plateau = mean_of("plateau")
    # escape from small init describes the small-init side: fit γ ≥ the fastest γ
    fastest = gammas[int(np.nanargmin(plateau))]
    side = [i for i, g in enumerate(gammas) if g >= fastest]
    fits = [escape_fit([gammas[i] for i in side], plateau[side], d, L) for L in (2, 3)]
    with use_style():
        fig, axes = plt.subplots(3, 4, figsize=(17, 11.5), constrained_layout=True)
        panels = [
            (axes[0, 0], "train_loss", "final training loss"),
            (axes[0, 1], "plateau", f"steps to training loss ≤ θ = {theta:.2f}"),
            (axes[0, 2], "excess", "reasoning accuracy − prompt-blind baseline"),
            (axes[0, 3], "val_loss", "held-out loss (nats/token)"),
        ]
        for ax, key, label in panels:
            for seed, marker in zip(seeds, "os^vD<>", strict=False):
                mine = sorted((r for r in rows if r["seed"] == seed), key=lambda r: r["gamma"])
                ax.plot(
                    [r["gamma"] for r in mine],
                    [r[key] for r in mine],
                    marker,
                    ms=4,
                    color="0.45",
                    mfc="none",
                    label=f"seed {seed}",
                )
            ax.plot(gammas, mean_of(key), "k-", lw=1.2, label="mean over seeds")
            ax.set_xlabel("γ (σ = d_in^−γ)")
            ax.set_ylabel(label)
        axes[0, 2].axhline(0, color="0.5", ls="--", lw=0.8)
        ax = axes[0, 1]
        fine = np.linspace(fastest, max(gammas), 100)
        for fit, color in zip(fits, ("tab:blue", "tab:red"), strict=True):
            ax.plot(
                fine,
                fit["predict"](fine),
                color=color,
                lw=1,
                label=f"escape time, L = {fit['L']:g}, fit γ ≥ {fastest:g} (R² = {fit['r2']:.2f})",
            )
        ax.set_ylim(0, np.nanmax(plateau) * 1.6)
        for ax, key, name in ((axes[0, 2], "acc", "knee"), (axes[0, 3], "loss", "optimum")):
            vals = [crit[s][key] for s in seeds]
            ax.axvspan(
                min(vals) - 0.01,
                max(vals) + 0.01,
                color="tab:green",
                alpha=0.2,
                label=f"{name} per seed: {', '.join(f'{v:.2f}' for v in vals)}",
            )
        for ax in axes[0]:
            ax.legend(fontsize=6)
        draw_tasks([axes[1, 0], axes[1, 1], axes[1, 2]], [axes[2, 0], axes[2, 1], axes[2, 2]], rows)
        ax = axes[1, 3]
        texts = []
        for i, (key, name) in enumerate(
            (("acc", "from accuracy (knee)"), ("loss", "from loss (optimum)"))
        ):
            vals = np.array([crit[s][key] for s in seeds], dtype=float)
            ok = vals[np.isfinite(vals)]
            ax.plot(np.full(len(ok), i), ok, "o", color="0.45", mfc="none", ms=5)
            if len(ok):
                est = mean_ci(ok)
                if np.isfinite(est.ci_low):
                    ax.errorbar(
                        i,
                        est.effect,
                        [[est.effect - est.ci_low], [est.ci_high - est.effect]],
                        fmt="_",
                        color="k",
                        ms=14,
                        capsize=3,
                    )
                texts.append(_estimate_text(name.split()[1], ok))
        ax.set_xticks([0, 1], ["reasoning\naccuracy", "held-out\nloss"])
        ax.set_xlim(-0.6, 1.6)
        ax.set_ylabel("critical γ per seed (mean, 95% CI)")
        ax.set_title("critical γ " + "; ".join(texts) + f" (n = {len(seeds)})", fontsize=8)
        ax = axes[2, 3]
        cell_gain = draw_paired_cells(ax, rows)
        a, b = paired_by_seed(rows, lambda r: r["excess"])
        pooled = paired(a, b) if a else None
        ax.set_title(
            "accuracy above baseline, pooled:\n"
            + (pooled.label("Δ") if pooled else "no paired seeds"),
            fontsize=8,
        )
        fig.suptitle(
            f"d_model = {d}, {cfg.model.n_layers} layers, {cfg.train.steps} steps, "
            f"seeds {seeds} (n = {len(seeds)}); dots: seeds, lines: mean",
            fontsize=10,
        )
        paths = ctx.save(fig)
    log.info(
        "fig 9: θ %.3f; critical γ per seed %s; escape fits %s",
        theta,
        crit,
        [(f["L"], round(f["r2"], 3), round(f["b"], 4)) for f in fits],
    )
    for key in ("acc", "loss"):
        vals = [crit[s][key] for s in seeds if np.isfinite(crit[s][key])]
        if vals:
            log.info("fig 9 critical γ from %s: %s", key, mean_ci(vals).label("γ_c"))
    for name, est in cell_gain.items():
        log.info("fig 9 accuracy γ=1 − γ=0.5 %s: %s", name, est.label("Δ"))
    if pooled:
        log.info("fig 9 pooled accuracy above baseline γ=1 − γ=0.5: %s", pooled.label("Δ"))
    log.info(
        "fig 9 means per γ %s: train %s plateau %s excess accuracy %s val %s",
        gammas,
        np.round(mean_of("train_loss"), 4).tolist(),
        np.round(plateau, 1).tolist(),
        np.round(mean_of("excess"), 4).tolist(),
        np.round(mean_of("val_loss"), 4).tolist(),
    )
    return paths


FIGURE = Figure(
    number=9,
    caption=__doc__,
    make=make,
    title="Critical initialization: training loss, plateau and reasoning versus γ",
)
