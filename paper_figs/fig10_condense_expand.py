"""Fig 10: condense, then expand — weight geometry over training at γ = 0.5 and γ = 1
(docs/science.md §5).

Traced runs (fig 8's standard-ε, ungated cell, smallest model): at log-spaced steps,
through ``smallinit.kernels.measure_all``, the effective rank exp(H(σ/Σσ)) (Roy & Vetterli
2007), the top singular-value share σ₁/Σσ and the number of cosine clusters (leader
clustering at cos ≥ 0.95) and the mean |cos| between rows of the token embedding, W_Q, W_K
and the FFN input (gate) weights, per layer (lighter lines: the second seed). The claim to
test: with small init the matrices first collapse onto few directions (rank and cluster
count fall, top share rises), then spread out. The title carries the
``condense-then-expand`` record of docs/science.md §13 (:mod:`smallinit.study.claims`): per
seed c = min(drop, rebound) of the mean relative effective rank at γ = 1 minus the same at
γ = 0.5 (effect, 95% CI, one-sided p, n, verdict), and each run's c.
"""

from __future__ import annotations

import logging

import matplotlib.pyplot as plt
import numpy as np

from smallinit.core.plotting import use_style
from smallinit.llm.training.probes import trajectory
from smallinit.study import claims
from smallinit.study.figure import Figure

log = logging.getLogger(__name__)
GROUPS = [("emb", "token embedding"), ("q", "W_Q"), ("k", "W_K"), ("ffn_in", "FFN input (gate)")]
METRICS = [
    ("effective_rank", "effective rank"),
    ("top_singular_share", "σ₁ / Σσ"),
    ("cluster_count", "cosine clusters (≥ 0.95)"),
    ("mean_abs_cosine", "mean |cos| of rows"),
]


def names_for(weights: dict, group: str) -> list[str]:
    return [n for n in weights if n == group or n.endswith("." + group)]


def summarize(tr) -> dict:
    """Per matrix and metric: value at init, extreme (min rank/clusters, max share) and its
    step, and the final value — the numbers the condense-then-expand claim is about."""
    out = {}
    steps = tr["steps"]
    for name, ms in tr["weights"].items():
        for metric, series in ms.items():
            grows = metric in ("top_singular_share", "mean_abs_cosine")
            i = int(np.argmax(series) if grows else np.argmin(series))
            out[(name, metric)] = (series[0], series[i], int(steps[i]), series[-1])
    return out


def make(ctx):
    pairs = ctx.results("condense-expand")
    runs = [(job, trajectory(run)) for job, run in pairs.done()]
    judged = claims.judge("condense-then-expand", pairs, ctx.profile)
    c = claims.condensations(pairs)
    colors = {0.5: "tab:blue", 1.0: "tab:red"}
    styles = ["-", "--", ":", "-."]
    with use_style():
        fig, axes = plt.subplots(
            len(METRICS), len(GROUPS), figsize=(14, 11), constrained_layout=True
        )
        for col, (group, title) in enumerate(GROUPS):
            for row, (metric, label) in enumerate(METRICS):
                ax = axes[row, col]
                first_seed = min(job.tags["seed"] for job, _ in runs)
                for job, tr in runs:
                    first = job.tags["seed"] == first_seed
                    for name, ls in zip(names_for(tr["weights"], group), styles, strict=False):
                        layer = name.split(".")[0] if "." in name else ""
                        ax.plot(
                            tr["steps"] + 1,
                            tr["weights"][name][metric],
                            ls,
                            marker="o",
                            ms=2.5,
                            color=colors.get(job.tags["gamma"], "k"),
                            alpha=1.0 if first else 0.35,
                            label=f"γ = {job.tags['gamma']:g} {layer}" if first else None,
                        )
                ax.set_xscale("log")
                if row == 0:
                    ax.set_title(title, fontsize=9)
                if col == 0:
                    ax.set_ylabel(label)
                if row == len(METRICS) - 1:
                    ax.set_xlabel("training step + 1")
                if row == 0 and col in (0, 1):
                    ax.legend(fontsize=6)
        cfg = pairs[0][0].config
        seeds = sorted({j.tags["seed"] for j, _ in runs})
        per_run = ", ".join(
            f"γ {g:g} seed {s}: {v:.3f}"
            for (s, g), v in sorted(c.items(), key=lambda kv: (kv[0][1], kv[0][0]))
        )
        fig.suptitle(
            f"d_model = {cfg.model.d_model}, {cfg.model.n_layers} layers, "
            f"{cfg.train.steps} steps, n = {len(seeds)} seeds {seeds} (lighter: "
            f"later seeds), RMSNorm ε = {cfg.model.norm_eps:.2g}\n"
            f"condense-then-expand, c(γ = 1) − c(γ = 0.5): {judged.label('Δc')}\n"
            f"c = min(drop, rebound) of the mean relative effective rank: {per_run}",
            fontsize=9,
        )
        paths = ctx.save(fig)
    log.info("fig 10 condense-then-expand %s; c %s", judged.label("Δc"), c)
    for job, tr in runs:
        for (name, metric), (v0, ext, at, end) in summarize(tr).items():
            log.info(
                "fig 10 γ=%g seed %d %s %s: init %.3f extreme %.3f at step %d final %.3f",
                job.tags["gamma"],
                job.tags["seed"],
                name,
                metric,
                v0,
                ext,
                at,
                end,
            )
    return paths


FIGURE = Figure(
    number=10,
    caption=__doc__,
    make=make,
    title="Condense then expand: effective rank, top share and clusters over training",
)
