"""Fig 6: the anchor-task phase diagram over (γ, depth) and (γ, weight decay) (docs/science.md §6).

First file: share of the unseen pair (4, 3) answered inferentially (x − 10), symmetrically
(x − 6) and otherwise, per cell (mean over the n seeds written in the cell); hatched cells
reached less than 90% accuracy on the seen pairs' held-out (x, position) combinations, so
their (4, 3) answers say little about how they solved the task. Bottom row: every seed's
symmetric and inferential share per γ on the line of the grid the two anchor claims read
(:func:`smallinit.study.claims.anchor_line`); the title gives both claims as ``smallinit claims``
judges them (:func:`smallinit.study.claims.judge`, the share rule of docs/science.md §13: mean
share with its 95% t CI, the one-sided p of mean > 0.5, n seeds, verdict). Second file
(``_mechanism``): two
contrasting models (the profile's ``scan.mechanism_gammas``) — cosine similarity of the
anchor embeddings, the cosine Gram of the first layer's query rows W_Q^(1) (condensation
score in the title) and where the last position attends (x, a1, a2, rest) in every layer.
Source: Zhang et al., NeurIPS 2024, arXiv 2405.05409.
"""

from __future__ import annotations

import logging

import matplotlib.pyplot as plt
import numpy as np

from smallinit.core.plotting import use_style
from smallinit.study import claims
from smallinit.study.experiments.anchor_scan import format_table, scan_table, seed_shares
from smallinit.study.figure import Figure

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
    ys = sorted(
        {
            r["layers"] if panel == "depth" else r["weight_decay"]
            for r in rows
            if r["panel"] == panel
        }
    )
    gammas, share = _grid(rows, panel, key, ys)
    _, fit = _grid(rows, panel, "acc_seen_test", ys)
    _, n = _grid([dict(r, n=r["seeds"] - r["failed"]) for r in rows], panel, "n", ys)
    im = ax.imshow(share, origin="lower", cmap=cmap, vmin=0, vmax=1, aspect="auto")
    ax.grid(False)
    for i in range(len(ys)):
        for j in range(len(gammas)):
            if np.isnan(share[i, j]):
                ax.text(j, i, "failed", ha="center", va="center", fontsize=7)
                continue
            if not fit[i, j] >= FIT_THRESHOLD:
                ax.add_patch(
                    plt.Rectangle(
                        (j - 0.5, i - 0.5),
                        1,
                        1,
                        fill=False,
                        hatch="///",
                        edgecolor="0.4",
                        linewidth=0,
                    )
                )
            ax.text(
                j,
                i,
                f"{share[i, j]:.2f}\n({fit[i, j]:.2f})\nn={int(n[i, j])}",
                ha="center",
                va="center",
                fontsize=6.5,
                color="white" if share[i, j] > 0.6 else "black",
            )
    ax.set_xticks(range(len(gammas)), [f"{g:g}" for g in gammas])
    ax.set_yticks(range(len(ys)), [f"{y:g}" for y in ys])
    ax.set_xlabel("γ (σ = d_in^−γ)")
    ax.set_ylabel(ylabel)
    return im


ANCHOR_CLAIMS = ("anchor-large-init-symmetric", "anchor-small-init-inferential")


def _seed_panel(ax, shares, verdicts):
    """Every seed's symmetric and inferential share per γ (dots), the mean (bar), 0.5."""
    gammas = sorted(shares)
    for k, (key, color, what) in enumerate(
        (
            ("share_symmetric", "tab:orange", "symmetric"),
            ("share_inferential", "tab:blue", "inferential"),
        )
    ):
        for j, g in enumerate(gammas):
            vals = shares[g][key]
            x = j + (k - 0.5) * 0.3 + np.linspace(-0.06, 0.06, len(vals))
            ax.scatter(
                x, vals, s=18, color=color, alpha=0.8, zorder=3, label=what if j == 0 else None
            )
            ax.hlines(
                vals.mean(),
                j + (k - 0.5) * 0.3 - 0.12,
                j + (k - 0.5) * 0.3 + 0.12,
                color=color,
                linewidth=2,
            )
    ax.axhline(0.5, color="0.5", linestyle="--", linewidth=0.8)
    ax.set_xticks(range(len(gammas)), [f"γ = {g:g}\nn = {len(shares[g]['seed'])}" for g in gammas])
    ax.set_ylim(-0.05, 1.05)
    ax.set_ylabel("share of (4, 3) answers")
    ax.legend(loc="upper center", fontsize=7, ncol=2)
    ax.set_title(
        "\n".join(f"{c}: {j.label('mean share', 2)}" for c, j in verdicts.items()), fontsize=7.5
    )


def _phase_figure(rows, base, n_seeds, shares, verdicts):
    mosaic = [
        ["depth_inferential", "depth_symmetric", "depth_other"],
        ["wd_inferential", "wd_symmetric", "wd_other"],
        ["seeds", "seeds", "seeds"],
    ]
    fig, axd = plt.subplot_mosaic(
        mosaic, figsize=(13, 9.5), constrained_layout=True, height_ratios=[1, 1, 0.9]
    )
    wd = base.train.weight_decay
    depth = next((r["layers"] for r in rows if r["panel"] == "wd"), base.model.n_layers)
    for key, cmap, what in (
        ("share_inferential", "Blues", "inferential"),
        ("share_symmetric", "Oranges", "symmetric"),
        ("share_other", "Greys", "other"),
    ):
        top, bottom = axd[f"depth_{what}"], axd[f"wd_{what}"]
        im = _heatmap(top, rows, "depth", key, "layers", cmap)
        top.set_title(f"{what} share on (4, 3), λ = {wd:g}")
        _heatmap(bottom, rows, "wd", key, "weight decay λ", cmap)
        bottom.set_title(f"{what} share on (4, 3), {depth} layers")
        fig.colorbar(im, ax=[top, bottom], shrink=0.6, label=f"{what} share")
    _seed_panel(axd["seeds"], shares, verdicts)
    axd["seeds"].set_xlabel(
        f"per seed, {base.model.n_layers} layers, λ = {wd:g} "
        "(dots: seeds; bars: mean; dashed: majority)"
    )
    seeds = "1 seed" if n_seeds == 1 else f"mean of {n_seeds} seeds"
    norm = f"{base.model.norm_position}-{base.model.norm}"
    fig.suptitle(
        f"Anchor task, d_model = {base.model.d_model}, {base.model.n_heads} head(s), "
        f"{norm}, {base.task.n_train} samples, {base.train.steps} steps, {seeds}. "
        f"Cell: share of (4, 3) answers (seen-pair held-out accuracy), n seeds; "
        f"hatched: accuracy < {FIT_THRESHOLD:.0%}",
        fontsize=9,
    )
    return fig


def _mechanism_figure(runs, gammas):
    fig, axes = plt.subplots(
        len(runs), 3, figsize=(10, 3.2 * len(runs)), constrained_layout=True, squeeze=False
    )
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
        row[1].set_title(
            f"W_Q^(1) row cosine; condensation {s['wq_condensation']:.2f} "
            f"(random ≈ {s['wq_condensation_baseline']:.2f})",
            fontsize=8,
        )
        row[1].set_xticks([])
        row[1].set_yticks([])
        fig.colorbar(im, ax=row[1], shrink=0.8)
        attn = a["attn_last"].mean(axis=1)  # (L, 4): averaged over heads
        im = row[2].imshow(attn, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="lower")
        row[2].set_xticks(range(4), names)
        row[2].set_yticks(range(attn.shape[0]), [str(i + 1) for i in range(attn.shape[0])])
        row[2].set_ylabel("layer")
        row[2].set_title("last position's attention on (4, 3) inputs", fontsize=8)
        for i in range(attn.shape[0]):
            for j in range(4):
                row[2].text(
                    j,
                    i,
                    f"{attn[i, j]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if attn[i, j] < 0.6 else "black",
                )
        fig.colorbar(im, ax=row[2], shrink=0.8)
        sub = (
            f"inferential {s['share_inferential']:.2f}, symmetric "
            f"{s['share_symmetric']:.2f}, seen {s['acc_seen_test']:.2f}"
        )
        row[0].set_ylabel(sub, fontsize=7)
    return fig


def make(ctx):
    results = ctx.results("anchor-scan")
    rows = scan_table(results)
    log.info("anchor scan (%s profile):\n%s", ctx.profile, format_table(rows))
    mech = [(job, run) for job, run in results if job.tags["panel"] == "mechanism"]
    base = mech[0][0].config  # the profile's run config at its first seed
    seeds = {job.tags["seed"] for job, _ in results if job.tags["panel"] != "mechanism"}
    layers, weight_decay = claims.anchor_line(results.specs)
    panel = "depth" if weight_decay == base.train.weight_decay else "wd"
    shares = seed_shares(results, panel, layers, weight_decay)
    verdicts = {c: claims.judge(c, results, ctx.profile) for c in ANCHOR_CLAIMS}
    for c, j in verdicts.items():
        log.info("%s: %s", c, j.label("mean share", 2))
    with use_style():
        paths = ctx.save(_phase_figure(rows, base, len(seeds), shares, verdicts))
        paths += ctx.save(
            _mechanism_figure([r for _, r in mech], [j.tags["gamma"] for j, _ in mech]),
            suffix="_mechanism",
        )
    return paths


FIGURE = Figure(
    number=6,
    caption=__doc__,
    make=make,
    title="Anchor task: inferential vs symmetric solutions over (γ, depth) and (γ, λ)",
)
