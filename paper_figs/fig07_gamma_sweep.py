"""Fig 7: held-out loss, reasoning and memorization versus γ across model sizes (docs/science.md
§5).

Every size trains for the same steps × batch × context tokens. Top: held-out loss against
γ (σ = d_in^−γ) per size, with the ``nanogpt`` and ``fixed:0.02`` baselines drawn at their
effective γ, γ_eff = −ln 0.02 / ln d (docs/science.md §1); the best γ per size (minimum of a
parabola through the grid minimum and its neighbours) against size. Bottom: greedy answer accuracy
on held-out reasoning items (arith, anchor, logic pooled; logic is yes/no, so chance is
≈ 1/6 of the pool), the loss on reasoning answer tokens, and fact (memorization) accuracy.
"""

from __future__ import annotations

import logging
import math

import matplotlib.pyplot as plt
import numpy as np

from smallinit.llm.analysis.critical import reasoning_answer_loss
from smallinit.plotting import use_style

NUMBER = 7
TITLE = "LLM loss, reasoning and memorization versus γ across model sizes"
log = logging.getLogger(__name__)


def best_gamma(gammas, losses) -> float:
    """Vertex of the parabola through the grid minimum and its two neighbours (the grid
    minimum itself at an edge)."""
    g, y = np.asarray(gammas, float), np.asarray(losses, float)
    if not np.isfinite(y).any():
        return float("nan")
    i = int(np.nanargmin(y))
    if i == 0 or i == len(g) - 1:
        return float(g[i])
    a, b, _ = np.polyfit(g[i - 1:i + 2], y[i - 1:i + 2], 2)
    return float(-b / (2 * a)) if a > 0 else float(g[i])


def collect(pairs):
    rows = []
    for job, run in pairs.done():
        s = run.summary
        ans, ans_se = reasoning_answer_loss(run.arrays())
        d = job.tags["size"]
        gamma = job.tags["gamma"]
        rows.append({"size": d, "init": job.tags["init"], "seed": job.tags["seed"],
                     "gamma": gamma, "gamma_eff": -math.log(0.02) / math.log(d)
                     if gamma is None else gamma, "val_loss": s["val_loss"],
                     "acc_reasoning": s.get("acc_reasoning", np.nan),
                     "acc_fact": s.get("acc_fact", np.nan), "answer_loss": ans,
                     "answer_se": ans_se})
    return rows


def _series(rows, size, key, seed=None):
    pts = sorted((r["gamma"], r[key]) for r in rows if r["size"] == size
                 and r["gamma"] is not None and (seed is None or r["seed"] == seed))
    g = sorted({p[0] for p in pts})
    return np.array(g), np.array([np.mean([v for gg, v in pts if gg == x]) for x in g])


def make(ctx):
    pairs = ctx.results("gamma-sweep")
    rows = collect(pairs)
    sizes = sorted({r["size"] for r in rows})
    colors = plt.get_cmap("viridis")(np.linspace(0, 0.85, len(sizes)))
    marks = {"nanogpt": "s", "fixed:0.02": "D"}
    seeds = sorted({r["seed"] for r in rows})
    with use_style():
        fig, axes = plt.subplots(2, 3, figsize=(13, 7.5), constrained_layout=True)
        panels = [(axes[0, 0], "val_loss", "held-out loss (nats/token)"),
                  (axes[1, 0], "acc_reasoning", "reasoning accuracy (greedy)"),
                  (axes[1, 1], "answer_loss", "loss on reasoning answer tokens"),
                  (axes[1, 2], "acc_fact", "memorization accuracy (facts)")]
        best = {}
        for ax, key, label in panels:
            for size, color in zip(sizes, colors, strict=True):
                g, y = _series(rows, size, key)
                ax.plot(g, y, "o-", color=color, label=f"d = {size}", ms=4)
                for init, mark in marks.items():
                    base = [r for r in rows if r["size"] == size and r["init"] == init]
                    if base:
                        ax.plot(base[0]["gamma_eff"], np.mean([r[key] for r in base]), mark,
                                color=color, mfc="none", ms=7)
                if key == "val_loss":
                    best[size] = {seed: best_gamma(*_series(rows, size, key, seed))
                                  for seed in seeds}
                    ax.axvline(np.nanmean(list(best[size].values())), color=color, lw=0.8,
                               ls=":")
            ax.set_xlabel("γ (σ = d_in^−γ)")
            ax.set_ylabel(label)
        axes[1, 0].axhline(1 / 6, color="0.5", ls="--", lw=0.8)
        axes[1, 0].text(0.99, 1 / 6, "≈ chance (logic yes/no guessed)", fontsize=7,
                        ha="right", va="bottom", transform=axes[1, 0].get_yaxis_transform())
        axes[0, 0].legend(fontsize=7, title="□ nanogpt, ◇ fixed 0.02 at γ_eff", title_fontsize=7)
        ax = axes[0, 1]
        for size, color in zip(sizes, colors, strict=True):
            g, y = _series(rows, size, "val_loss")
            ax.plot(g, y - np.nanmin(y), "o-", color=color, ms=4, label=f"d = {size}")
        ax.set_ylim(-0.01, 0.15)
        ax.set_xlabel("γ")
        ax.set_ylabel("held-out loss − best of its size")
        ax.set_title("zoom near the optimum", fontsize=9)
        ax = axes[0, 2]
        ax.plot(sizes, [np.nanmean(list(best[s].values())) for s in sizes], "ko-",
                label="mean over seeds")
        for seed, marker in zip(seeds, "s^v", strict=False):
            ax.plot(sizes, [best[s][seed] for s in sizes], marker, color="0.5", mfc="none",
                    label=f"seed {seed}")
        ax.legend(fontsize=7)
        ax.set_xscale("log")
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.minorticks_off()
        ax.set_xlabel("d_model")
        ax.set_ylabel("best γ (parabolic vertex of the held-out loss)")
        steps = pairs[0][0].cfg.train.steps
        tokens = steps * pairs[0][0].cfg.train.batch_size * pairs[0][0].cfg.model.context
        fig.suptitle(f"γ sweep, {steps} steps ({tokens:,} tokens) per run; curves: mean over "
                     f"seeds {seeds}", fontsize=10)
        paths = ctx.save(fig)
    for size in sizes:
        for seed in seeds:
            base = {r["init"]: r for r in rows if r["size"] == size and r["seed"] == seed}

            def show(init, key, base=base):
                return base[init][key] if init in base else np.nan

            log.info("fig 7 d=%d seed %d best γ %.3f; val loss γ=0.5 %.4f γ=1 %.4f nanogpt "
                     "%.4f fixed %.4f; acc_reasoning γ=0.5 %.3f γ=1 %.3f; acc_fact γ=0.5 %.3f "
                     "γ=1 %.3f", size, seed, best[size][seed], show("gamma:0.5", "val_loss"),
                     show("gamma:1", "val_loss"), show("nanogpt", "val_loss"),
                     show("fixed:0.02", "val_loss"), show("gamma:0.5", "acc_reasoning"),
                     show("gamma:1", "acc_reasoning"), show("gamma:0.5", "acc_fact"),
                     show("gamma:1", "acc_fact"))
    return paths
