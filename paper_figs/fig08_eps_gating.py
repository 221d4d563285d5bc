"""Fig 8: the two restraining settings, RMSNorm ε and attention sinks (docs/science.md §5).

A 2 × 2 of RMSNorm ε (standard, relaxed) × gated attention (off, on), each at γ = 0.5,
1 and 2 (beyond both settings' γ_ε), smallest model of the sweep, traced runs. ε is chosen
by theory: the small model (width d) gets the ε with the same saturation threshold
γ_ε = ln(1/ε)/(2 ln d) as a width-2048 model at ε = 1e-5 (standard) or 1e-12 (relaxed),
so it sits on the same side of saturation as the large model would.

Top left: held-out loss per setting and γ; top right: the gap L(γ = 1) − L(γ = 0.5) per
setting for the held-out loss and for the loss on reasoning answer tokens (negative: small
init is better); bars are means over seeds, dots single seeds (lighter lines below: the
later seeds). The titles carry the two claims of docs/science.md §13 this figure tests,
computed by :mod:`smallinit.study.claims` (the numbers ``smallinit claims`` prints):
``eps-restrains``, g(relaxed ε) − g(standard ε) without gate, and ``sinks-restrain``,
g(gated) − g(not gated) at standard ε, with g = L(γ = 0.5) − L(γ = 1) per seed (effect,
95% CI, one-sided p, n, verdict). Rows 2–4, one column per
setting, over training (log-spaced probes on a fixed held-out batch): share of RMSNorm
inputs with mean(x²) < ε (saturation), mean attention on position 0 of queries past the
4th (sink; dotted: uniform causal attention), max/median |residual|.
"""

from __future__ import annotations

import logging
import math

import matplotlib.pyplot as plt
import numpy as np

from smallinit.core.plotting import use_style
from smallinit.llm.analysis.critical import reasoning_answer_loss
from smallinit.llm.training.probes import trajectory
from smallinit.study import claims
from smallinit.study.figure import Figure
from smallinit.theory.transformer import rmsnorm_gamma_threshold

log = logging.getLogger(__name__)
SETTINGS = [("standard", False), ("standard", True), ("relaxed", False), ("relaxed", True)]


def setting_label(eps_setting, gated, eps):
    return f"ε {eps_setting} ({eps:.2g}), gate {'on' if gated else 'off'}"


def gaps(rows):
    """Per setting and seed: L(γ=1) − L(γ=0.5) for the held-out loss, the reasoning
    answer-token loss (with its s.e. over tokens) and reasoning accuracy."""
    out = {}
    for key in SETTINGS:
        for seed in sorted({r["seed"] for r in rows}):
            by_g = {
                r["gamma"]: r
                for r in rows
                if (r["eps_setting"], r["gated"]) == key and r["seed"] == seed
            }
            if 0.5 in by_g and 1.0 in by_g:
                a, b = by_g[1.0], by_g[0.5]
                out.setdefault(key, []).append(
                    {
                        "seed": seed,
                        "val": a["val_loss"] - b["val_loss"],
                        "ans": a["ans"] - b["ans"],
                        "ans_se": math.hypot(a["ans_se"], b["ans_se"]),
                        "acc": a["acc"] - b["acc"],
                    }
                )
    return out


def gap_mean(g, key, what):
    vals = [v[what] for v in g.get(key, [])]
    return float(np.mean(vals)) if vals else np.nan


GAP_SERIES = (
    ("val", "tab:blue", "held-out loss"),
    ("ans", "tab:orange", "reasoning answer tokens"),
)


def gap_series(g):
    """The gap bars to draw, (key, colour, label, mean gap per setting of SETTINGS): a series
    with no finite gap in any setting (a corpus that scores no reasoning answers) gets no bars
    and no legend entry."""
    series = [
        (what, color, label, [gap_mean(g, s, what) for s in SETTINGS])
        for what, color, label in GAP_SERIES
    ]
    return [row for row in series if np.isfinite(row[3]).any()]


def make(ctx):
    pairs = ctx.results("eps-gating")
    rows = []
    for job, run in pairs.done():
        ans, se = reasoning_answer_loss(run.arrays())
        rows.append(
            {
                **job.tags,
                "val_loss": run.summary["val_loss"],
                "ans": ans,
                "ans_se": se,
                "acc": run.summary.get("acc_reasoning", np.nan),
                "trace": trajectory(run),
            }
        )
    gammas = sorted({r["gamma"] for r in rows})
    eps_of = {r["eps_setting"]: r["eps"] for r in rows}
    d = pairs[0][0].config.model.d_model
    colors = dict(
        zip(gammas, plt.get_cmap("plasma")(np.linspace(0, 0.8, len(gammas))), strict=True)
    )
    g = gaps(rows)
    n_seeds = {s: len(v) for s, v in g.items()}
    eps_claim = claims.judge("eps-restrains", pairs, ctx.profile)
    sink_claim = claims.judge("sinks-restrain", pairs, ctx.profile)
    with use_style():
        fig = plt.figure(figsize=(14, 12), constrained_layout=True)
        grid = fig.add_gridspec(4, 4)
        ax = fig.add_subplot(grid[0, :2])
        width = 0.8 / len(gammas)
        for j, gamma in enumerate(gammas):
            xs = np.arange(4) + (j - (len(gammas) - 1) / 2) * width
            per = [
                [
                    r["val_loss"]
                    for r in rows
                    if (r["eps_setting"], r["gated"]) == s and r["gamma"] == gamma
                ]
                for s in SETTINGS
            ]
            ax.bar(
                xs,
                [np.mean(v) if v else np.nan for v in per],
                width,
                color=colors[gamma],
                label=f"γ = {gamma:g}",
            )
            for x, v in zip(xs, per, strict=True):
                ax.plot([x] * len(v), v, "k.", ms=3)
        lo = np.nanmin([r["val_loss"] for r in rows])
        ax.set_ylim(lo - 0.05, None)
        ax.set_xticks(
            range(4),
            [setting_label(e, gt, eps_of.get(e, np.nan)).replace(", ", "\n") for e, gt in SETTINGS],
            fontsize=7,
        )
        ax.set_ylabel("held-out loss")
        ax.legend(fontsize=7)
        ax = fig.add_subplot(grid[0, 2:])
        x = np.arange(4)
        series = gap_series(g)
        width = 0.8 / max(len(series), 1)
        for k, (what, color, label, means) in enumerate(series):
            shift = (k - (len(series) - 1) / 2) * width
            ax.bar(
                x + shift,
                means,
                width,
                color=color,
                alpha=0.8,
                label=f"{label} (mean over n = "
                f"{'/'.join(str(n_seeds.get(s, 0)) for s in SETTINGS)} seeds; dots: seeds)",
            )
            for i, s in enumerate(SETTINGS):
                vals = [v[what] for v in g.get(s, [])]
                ax.plot([i + shift] * len(vals), vals, "k.", ms=4)
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xticks(
            x,
            [setting_label(e, gt, eps_of.get(e, np.nan)).replace(", ", "\n") for e, gt in SETTINGS],
            fontsize=7,
        )
        ax.set_ylabel("L(γ = 1) − L(γ = 0.5)")
        ax.legend(fontsize=7)
        ax.set_title(
            "eps-restrains, g(relaxed) − g(standard), gate off: "
            f"{eps_claim.label('Δg')}\nsinks-restrain, g(gated) − g(not gated), "
            f"standard ε: {sink_claim.label('Δg')}",
            fontsize=8,
        )
        diag = [
            ("saturation", "RMSNorm saturation share"),
            ("sink", "sink mass (pos. 0)"),
            ("resid_ratio", "max/median |residual|"),
        ]
        for col, setting in enumerate(SETTINGS):
            for row, (key, label) in enumerate(diag, start=1):
                ax = fig.add_subplot(grid[row, col])
                for r in rows:
                    if (r["eps_setting"], r["gated"]) != setting or key not in r["trace"]:
                        continue
                    tr = r["trace"]
                    first = r["seed"] == min(x["seed"] for x in rows)
                    ax.plot(
                        tr["steps"] + 1,
                        tr[key],
                        "o-",
                        ms=3,
                        color=colors[r["gamma"]],
                        alpha=1.0 if first else 0.4,
                        label=f"γ = {r['gamma']:g}" if first else None,
                    )
                    if key == "sink":
                        ax.axhline(tr["uniform_sink"][0], color="0.5", ls=":", lw=0.8)
                        ax.set_ylim(0, max(ax.get_ylim()[1], 1.5 * tr["uniform_sink"][0]))
                ax.set_xscale("log")
                if key == "resid_ratio":
                    ax.set_yscale("log")
                    ax.set_xlabel("training step + 1")
                if col == 0:
                    ax.set_ylabel(label)
                if row == 1:
                    eps = eps_of.get(setting[0], np.nan)
                    threshold = (
                        f"{rmsnorm_gamma_threshold(d, eps):.2f}"
                        if np.isfinite(eps)
                        else "— (no finished run)"
                    )
                    ax.set_title(setting_label(*setting, eps) + f"\nγ_ε = {threshold}", fontsize=8)
                    ax.set_ylim(-0.03, 1.03)
                    ax.legend(fontsize=6)
        fig.suptitle(
            f"ε × gated attention, d_model = {d} imitating d = "
            f"{pairs[0][0].tags['d_large']} (ε 1e-5 / 1e-12)",
            fontsize=10,
        )
        paths = ctx.save(fig)
    log.info(
        "fig 8 eps-restrains %s; sinks-restrain %s", eps_claim.label("Δg"), sink_claim.label("Δg")
    )
    for s, per_seed in g.items():
        for v in per_seed:
            log.info(
                "fig 8 %s seed %d: gap val %.4f, answer %.4f ± %.4f, acc %.3f",
                s,
                v["seed"],
                v["val"],
                v["ans"],
                v["ans_se"],
                v["acc"],
            )
    for r in rows:
        tr = r["trace"]
        log.info(
            "fig 8 %s gate=%s γ=%g seed %d: val %.4f sat0 %.2f satEnd %.2f sinkEnd %.3f "
            "residEnd %.1f",
            r["eps_setting"],
            r["gated"],
            r["gamma"],
            r["seed"],
            r["val_loss"],
            tr["saturation"][0],
            tr["saturation"][-1],
            tr["sink"][-1],
            tr["resid_ratio"][-1],
        )
    return paths


FIGURE = Figure(
    number=8,
    caption=__doc__,
    make=make,
    title="RMSNorm ε × gated attention at γ = 0.5 and γ = 1, with saturation and sink diagnostics",
)
