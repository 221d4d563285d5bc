"""Fig 6: the anchor-task phase diagram over (γ, depth) and (γ, weight decay) (docs/science.md §6).

First file: share of the unseen pair (4, 3) answered inferentially (x − 10), symmetrically
(x − 6) and otherwise, per cell (mean over the profile's seeds); hatched cells reached less
than 90% accuracy on the seen pairs' held-out (x, position) combinations, so their (4, 3)
answers say little about how they solved the task. Second file (``_mechanism``): two
contrasting models (the profile's ``scan.mechanism_gammas``) — cosine similarity of the
anchor embeddings, the cosine Gram of the first layer's query rows W_Q^(1) (condensation
score in the title) and where the last position attends (x, a1, a2, rest) in every layer.
Source: Zhang et al., NeurIPS 2024, arXiv 2405.05409.
"""

from __future__ import annotations

import logging

import matplotlib.pyplot as plt
import numpy as np

from smallinit.llm.experiments.anchor import format_table, scan_table
from smallinit.plotting import use_style

NUMBER = 6
TITLE = "Anchor task: inferential vs symmetric solutions over (γ, depth) and (γ, λ)"
FIT_THRESHOLD = 0.9
log = logging.getLogger(__name__)


def _grid(rows, panel, key, ys):
    gammas = sorted({r["gamma"] for r in rows if r["panel"] == panel})
    grid = np.full((len(ys), len(gammas)), np.nan)
    for r in rows:
        if r["panel"] != panel:
            continue
        y = r["layers"] if panel == "depth" else r["weight_decay"]
        grid[ys.index(y), gammas.index(r["gamma"])] = r[key]
    return gammas, grid


def _heatmap(ax, rows, panel, key, ylabel, cmap):
    ys = sorted({r["layers"] if panel == "depth" else r["weight_decay"]
                 for r in rows if r["panel"] == panel})
    gammas, share = _grid(rows, panel, key, ys)
    _, fit = _grid(rows, panel, "acc_seen_test", ys)
    im = ax.imshow(share, origin="lower", cmap=cmap, vmin=0, vmax=1, aspect="auto")
    ax.grid(False)
    for i in range(len(ys)):
        for j in range(len(gammas)):
            if np.isnan(share[i, j]):
                ax.text(j, i, "failed", ha="center", va="center", fontsize=7)
                continue
            if not fit[i, j] >= FIT_THRESHOLD:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///",
                                           edgecolor="0.4", linewidth=0))
            ax.text(j, i, f"{share[i, j]:.2f}\n({fit[i, j]:.2f})", ha="center", va="center",
                    fontsize=7, color="white" if share[i, j] > 0.6 else "black")
    ax.set_xticks(range(len(gammas)), [f"{g:g}" for g in gammas])
    ax.set_yticks(range(len(ys)), [f"{y:g}" for y in ys])
    ax.set_xlabel("γ (σ = d_in^−γ)")
    ax.set_ylabel(ylabel)
    return im


def _phase_figure(rows, base, n_seeds):
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5), constrained_layout=True)
    wd = base.train.weight_decay
    for col, (key, cmap, what) in enumerate((("share_inferential", "Blues", "inferential"),
                                             ("share_symmetric", "Oranges", "symmetric"),
                                             ("share_other", "Greys", "other"))):
        im = _heatmap(axes[0, col], rows, "depth", key, "layers", cmap)
        axes[0, col].set_title(f"{what} share on (4, 3), λ = {wd:g}")
        _heatmap(axes[1, col], rows, "wd", key, "weight decay λ", cmap)
        depth = next((r["layers"] for r in rows if r["panel"] == "wd"), base.model.n_layers)
        axes[1, col].set_title(f"{what} share on (4, 3), {depth} layers")
        fig.colorbar(im, ax=axes[:, col], shrink=0.6, label=f"{what} share")
    seeds = "1 seed" if n_seeds == 1 else f"mean of {n_seeds} seeds"
    fig.suptitle(f"Anchor task, d_model = {base.model.d_model}, {base.task.n_train} samples, "
                 f"{base.train.steps} steps, {seeds}. Cell: share of (4, 3) answers "
                 f"(seen-pair held-out accuracy); hatched: accuracy < {FIT_THRESHOLD:.0%}",
                 fontsize=9)
    return fig


def _mechanism_figure(runs, gammas):
    fig, axes = plt.subplots(len(runs), 3, figsize=(10, 3.2 * len(runs)),
                             constrained_layout=True, squeeze=False)
    names = ["x", "a1", "a2", "rest"]
    for row, run, gamma in zip(axes, runs, gammas, strict=True):
        if not run.done:
            for ax in row:
                ax.axis("off")
            row[0].set_title(f"γ = {gamma:g}: run failed ({run.status().get('reason')})")
            continue
        a, s = run.arrays(), run.summary
        for ax in row:
            ax.grid(False)
        im = row[0].imshow(a["emb_cos_anchors"], vmin=-1, vmax=1, cmap="RdBu_r")
        row[0].set_xticks(range(4), ["1", "2", "3", "4"])
        row[0].set_yticks(range(4), ["1", "2", "3", "4"])
        row[0].set_title(f"γ = {gamma:g}: anchor embedding cosine")
        fig.colorbar(im, ax=row[0], shrink=0.8)
        im = row[1].imshow(a["wq_cos"], vmin=-1, vmax=1, cmap="RdBu_r")
        row[1].set_title(f"W_Q^(1) row cosine; condensation {s['wq_condensation']:.2f} "
                         f"(random ≈ {s['wq_condensation_baseline']:.2f})", fontsize=8)
        row[1].set_xticks([])
        row[1].set_yticks([])
        fig.colorbar(im, ax=row[1], shrink=0.8)
        attn = a["attn_last"].mean(axis=1)  # (L, 4): averaged over heads
        im = row[2].imshow(attn, vmin=0, vmax=1, cmap="viridis", aspect="auto",
                           origin="lower")
        row[2].set_xticks(range(4), names)
        row[2].set_yticks(range(attn.shape[0]), [str(i + 1) for i in range(attn.shape[0])])
        row[2].set_ylabel("layer")
        row[2].set_title("last position's attention on (4, 3) inputs", fontsize=8)
        for i in range(attn.shape[0]):
            for j in range(4):
                row[2].text(j, i, f"{attn[i, j]:.2f}", ha="center", va="center", fontsize=7,
                            color="white" if attn[i, j] < 0.6 else "black")
        fig.colorbar(im, ax=row[2], shrink=0.8)
        sub = (f"inferential {s['share_inferential']:.2f}, symmetric "
               f"{s['share_symmetric']:.2f}, seen {s['acc_seen_test']:.2f}")
        row[0].set_ylabel(sub, fontsize=7)
    return fig


def make(ctx):
    results = ctx.results("anchor-scan")
    rows = scan_table(results)
    log.info("anchor scan (%s profile):\n%s", ctx.profile, format_table(rows))
    mech = [(job, run) for job, run in results if job.tags["panel"] == "mechanism"]
    base = mech[0][0].config  # the profile's run config at its first seed
    seeds = {job.tags["seed"] for job, _ in results if job.tags["panel"] != "mechanism"}
    with use_style():
        paths = ctx.save(_phase_figure(rows, base, len(seeds)))
        paths += ctx.save(_mechanism_figure([r for _, r in mech],
                                            [j.tags["gamma"] for j, _ in mech]),
                          suffix="_mechanism")
    return paths
