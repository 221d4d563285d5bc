"""Fig 9: critical initialization — what small init costs and what it buys (docs/science.md §4, §5).

Smallest model of the sweep, γ grid × seeds. (a) final training loss; (b) steps until the
training loss first reaches θ = 1.2 × the sweep's median final loss
(:func:`smallinit.llm.analysis.critical.plateau_steps`), with theory's escape time from scale
ε = d^−γ (``smallinit.theory.escape.escape_time_gamma``, L = 2: ∝ γ ln d; L = 3:
∝ d^γ) fitted with one offset and one scale on the small-init side (γ at or above the
fastest γ); (c) greedy reasoning accuracy and (d) loss on
reasoning answer tokens (± s.e. over tokens). The critical γ of a seed is the knee
(:func:`smallinit.llm.analysis.critical.knee_gamma`): the smallest γ within one standard error of
that seed's best reasoning score; shaded: the range over seeds.
"""

from __future__ import annotations

import logging

import matplotlib.pyplot as plt
import numpy as np

from smallinit.llm.analysis.critical import (
    binomial_se,
    escape_fit,
    knee_gamma,
    loss_threshold,
    plateau_steps,
    reasoning_answer_loss,
)
from smallinit.llm.data import corpus as corpus_mod
from smallinit.llm.data.synthetic import CATEGORIES, REASONING
from smallinit.plotting import use_style

NUMBER = 9
TITLE = "Critical initialization: training loss, plateau and reasoning versus γ"
log = logging.getLogger(__name__)


def n_reasoning_items(cfg) -> int:
    """How many held-out reasoning items the evaluator scores (per category capped)."""
    items = corpus_mod.load(cfg.data, cfg.model.vocab_size).val_items
    fits = items["length"] <= cfg.model.context
    return int(sum(min(cfg.eval.answer_items, int(((items["category"] == CATEGORIES.index(c))
                                                     & fits).sum())) for c in REASONING))


def collect(pairs):
    rows = []
    for job, run in pairs.done():
        curve = [(m["step"], m["loss"]) for m in run.metrics() if "loss" in m]
        ans, se = reasoning_answer_loss(run.arrays())
        rows.append({"gamma": job.tags["gamma"], "seed": job.tags["seed"],
                     "train_loss": run.summary["train_loss"],
                     "acc": run.summary.get("acc_reasoning", np.nan), "ans": ans, "ans_se": se,
                     "curve": np.array(curve)})
    return rows


def knees(rows, n_items):
    """Per seed: knee of reasoning accuracy and of (negated) reasoning answer loss."""
    out = {}
    for seed in sorted({r["seed"] for r in rows}):
        mine = sorted((r for r in rows if r["seed"] == seed), key=lambda r: r["gamma"])
        g = [r["gamma"] for r in mine]
        acc = np.array([r["acc"] for r in mine])
        best = int(np.nanargmax(acc))
        k_acc = knee_gamma(g, acc, binomial_se(acc[best], n_items))
        neg = -np.array([r["ans"] for r in mine])
        k_ans = knee_gamma(g, neg, mine[int(np.nanargmax(neg))]["ans_se"])
        out[seed] = {"acc": k_acc, "ans": k_ans}
    return out


def make(ctx):
    pairs = ctx.results("critical-init")
    rows = collect(pairs)
    cfg = pairs[0][0].cfg
    d = cfg.model.d_model
    theta = loss_threshold([r["train_loss"] for r in rows])
    for r in rows:
        r["plateau"] = plateau_steps(r["curve"][:, 0], r["curve"][:, 1], theta)
    seeds = sorted({r["seed"] for r in rows})
    gammas = sorted({r["gamma"] for r in rows})
    k = knees(rows, n_reasoning_items(cfg))

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
        fig, axes = plt.subplots(2, 2, figsize=(10, 7.5), constrained_layout=True)
        panels = [(axes[0, 0], "train_loss", "final training loss"),
                  (axes[0, 1], "plateau", f"steps to training loss ≤ θ = {theta:.2f}"),
                  (axes[1, 0], "acc", "reasoning accuracy (greedy)"),
                  (axes[1, 1], "ans", "loss on reasoning answer tokens")]
        for ax, key, label in panels:
            for seed, marker in zip(seeds, "os^v", strict=False):
                mine = sorted((r for r in rows if r["seed"] == seed), key=lambda r: r["gamma"])
                ax.plot([r["gamma"] for r in mine], [r[key] for r in mine], marker, ms=4,
                        color="0.45", mfc="none", label=f"seed {seed}")
                if key == "ans":
                    ax.errorbar([r["gamma"] for r in mine], [r["ans"] for r in mine],
                                [r["ans_se"] for r in mine], fmt="none", ecolor="0.6", lw=0.8)
            ax.plot(gammas, mean_of(key), "k-", lw=1.2, label="mean over seeds")
            ax.set_xlabel("γ (σ = d_in^−γ)")
            ax.set_ylabel(label)
        ax = axes[0, 1]
        fine = np.linspace(fastest, max(gammas), 100)
        for fit, color in zip(fits, ("tab:blue", "tab:red"), strict=True):
            ax.plot(fine, fit["predict"](fine), color=color, lw=1,
                    label=f"escape time, L = {fit['L']:g}, fit γ ≥ {fastest:g} "
                          f"(R² = {fit['r2']:.2f})")
        ax.set_ylim(0, np.nanmax(plateau) * 1.6)
        for ax, key in ((axes[1, 0], "acc"), (axes[1, 1], "ans")):
            vals = [k[s][key] for s in seeds]
            se = np.std(vals, ddof=1) / np.sqrt(len(vals)) if len(vals) > 1 else np.nan
            ax.axvspan(min(vals) - 0.01, max(vals) + 0.01, color="tab:green", alpha=0.2,
                       label=f"critical γ (knee) per seed: {', '.join(f'{v:g}' for v in vals)}"
                             f"\nmean {np.mean(vals):.2f} ± {se:.2f} (s.e.)")
        axes[1, 0].axhline(1 / 6, color="0.5", ls="--", lw=0.8)
        for ax in axes.flat:
            ax.legend(fontsize=7)
        fig.suptitle(f"d_model = {d}, {cfg.model.n_layers} layers, {cfg.train.steps} steps, "
                     f"seeds {seeds}; dashed: ≈ chance", fontsize=10)
        paths = ctx.save(fig)
    log.info("fig 9: θ %.3f; knees per seed %s; escape fits %s", theta, k,
             [(f["L"], round(f["r2"], 3), round(f["b"], 4)) for f in fits])
    for key in ("acc", "ans"):
        vals = np.array([k[s][key] for s in seeds])
        se = vals.std(ddof=1) / np.sqrt(len(vals)) if len(vals) > 1 else np.nan
        log.info("fig 9 critical γ (%s knee): %.3f ± %.3f (mean ± s.e. over %d seeds)", key,
                 vals.mean(), se, len(vals))
    log.info("fig 9 means per γ %s: train %s plateau %s acc %s ans %s", gammas,
             np.round(mean_of("train_loss"), 4).tolist(), np.round(plateau, 1).tolist(),
             np.round(mean_of("acc"), 3).tolist(), np.round(mean_of("ans"), 4).tolist())
    return paths
