"""Fig 12: does the gain of small init grow with model size? (docs/science.md §5, §13)

The gain g = L(γ = 0.5) − L(γ = 1) of the held-out loss (> 0: small init better) against
d_model, one panel per setting of RMSNorm ε (standard, relaxed; per size chosen as fig 8
does, imitating a width-``d_large`` model) × gated attention (off, on). Dots: single seeds;
line: mean over seeds. Each panel's title gives the least-squares slope of g against
ln d_model over seeds (:func:`smallinit.study.claims.scaling_slopes`, judged by
:func:`smallinit.study.claims.directional`: effect, 95% CI, one-sided p, n) — for relaxed ε with
the gate on this is the ``relaxed-scaling`` record of ``smallinit claims``.
"""

from __future__ import annotations

import logging

import matplotlib.pyplot as plt
import numpy as np

from smallinit.core.plotting import use_style
from smallinit.study import claims
from smallinit.study.figure import Figure

log = logging.getLogger(__name__)
SETTINGS = [("standard", False), ("standard", True), ("relaxed", False), ("relaxed", True)]


def per_size(pairs) -> dict[int, dict[int, float]]:
    """g per size and seed (the held-out loss gain of :func:`smallinit.study.claims.gains`)."""
    sizes = sorted({j.tags["size"] for j, _ in pairs})
    return {d: claims.gains([(j, r) for j, r in pairs if j.tags["size"] == d]) for d in sizes}


def make(ctx):
    results = ctx.results("gain-scaling")
    if not results.specs:
        log.info("fig 12: profile %s has no gain-scaling runs; nothing drawn", ctx.profile)
        return []
    done = results.done()
    with use_style():
        fig, axes = plt.subplots(
            2, 2, figsize=(10, 7.5), sharex=True, sharey=True, constrained_layout=True
        )
        for ax, (eps_setting, gated) in zip(axes.flat, SETTINGS, strict=True):
            mine = [
                (j, r)
                for j, r in done
                if (j.tags["eps_setting"], j.tags["gated"]) == (eps_setting, gated)
            ]
            g = per_size(mine)
            sizes = sorted(g)
            for d in sizes:
                vals = list(g[d].values())
                ax.plot([d] * len(vals), vals, "o", color="0.4", mfc="none", ms=5)
            means = [np.mean(list(g[d].values())) if g[d] else np.nan for d in sizes]
            n = max((len(v) for v in g.values()), default=0)
            ax.plot(sizes, means, "k-", lw=1.3, label=f"mean over seeds (n = {n}); dots: seeds")
            ax.axhline(0, color="0.6", lw=0.8, ls="--")
            judged = claims.directional(claims.scaling_slopes(mine))
            eps = sorted({j.tags["eps"] for j, _ in mine})
            ax.set_title(
                f"ε {eps_setting} ({', '.join(f'{e:.2g}' for e in eps)}), gate "
                f"{'on' if gated else 'off'}\nslope dg/d ln d: {judged.label('b')}",
                fontsize=8,
            )
            ax.set_xscale("log")
            ax.set_xticks(sizes, [str(d) for d in sizes])
            ax.minorticks_off()
            ax.legend(fontsize=7)
            log.info(
                "fig 12 %s gate=%s: g per size %s; slope %s",
                eps_setting,
                gated,
                {d: {s: round(v, 4) for s, v in g[d].items()} for d in sizes},
                judged.label("b"),
            )
        for ax in axes[1]:
            ax.set_xlabel("d_model")
        for ax in axes[:, 0]:
            ax.set_ylabel("g = L(γ = 0.5) − L(γ = 1), held-out (nats/token)")
        cfg = results.specs[0].config
        fig.suptitle(
            f"gain against size, {cfg.train.steps} steps × {cfg.train.batch_size} "
            f"sequences at every size; ε imitating d = "
            f"{results.specs[0].tags['d_large']}",
            fontsize=10,
        )
        return ctx.save(fig)


FIGURE = Figure(
    number=12,
    caption=__doc__,
    make=make,
    title="Gain of γ = 1 over γ = 0.5 against model size under ε × gated attention",
)
