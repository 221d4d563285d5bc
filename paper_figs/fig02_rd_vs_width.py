"""Figure 2: RD of the input weights versus width at γ' = 0 for γ ∈ {0.5, 1, 1.75}
(docs/science.md §7.2), fitted slopes S_w in the legend, theory's interval alongside."""

from __future__ import annotations

from smallinit.core.plotting import use_style
from smallinit.study.figure import Figure, single
from smallinit.theory import phase


def make(ctx):
    import numpy as np

    results = ctx.results("rd-vs-width")
    cfg, arrays = results.specs[0].config, single(results).arrays()
    widths = cfg.widths
    rd, slopes = arrays["rd"][:, 0], arrays["S_w"][:, 0]
    import matplotlib.pyplot as plt

    with use_style():
        fig, ax = plt.subplots(figsize=(5, 4.6), layout="constrained")
        for i, g in enumerate(cfg.gammas):
            med = np.nanmedian(rd[i], axis=-1)
            lo, hi = (float(v) for v in phase.slope_interval(g, 0))
            ax.loglog(widths, rd[i], "o", alpha=0.3, color=f"C{i}")
            ax.loglog(
                widths,
                med,
                "-o",
                label=f"γ={g}: S_w={slopes[i]:+.2f} ({phase.classify(g, 0)}, "
                f"theory [{lo:g}, {hi:g}])",
                color=f"C{i}",
            )
        ax.set_xlabel("width m")
        ax.set_ylabel("RD of input weights at t*")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2))
        ax.set_title("RD vs width, γ' = 0 (median of seeds)")
        return ctx.save(fig)


FIGURE = Figure(number=2, caption=__doc__, make=make, title="RD vs width at γ' = 0")
