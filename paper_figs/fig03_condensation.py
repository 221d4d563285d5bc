"""Figure 3: condensation maps (orientation θ_k vs amplitude A_k) across a (γ, γ') grid, and
initial-condensation cosine heatmaps for activations of multiplicity p = 1, 2, 3 (docs/science.md
§7.3)."""

from __future__ import annotations

from smallinit.core.plotting import use_style
from smallinit.study.figure import Figure, outputs, single
from smallinit.toy import condense


def make(ctx):
    import matplotlib.pyplot as plt

    maps = ctx.results("condense")
    cfg, cmap = maps.specs[0].config, outputs(single(maps))
    inits = [outputs(run) for run in ctx.results("initial-condensation").runs]
    with use_style():
        G, Gp = len(cfg.gammas), len(cfg.gamma_primes)
        fig = plt.figure(figsize=(10, 6.5), layout="constrained")
        sub = fig.subfigures(1, 2, width_ratios=[1.4, 1])
        axes = sub[0].subplots(Gp, G, sharex=True, squeeze=False)
        for i, g in enumerate(cfg.gammas):
            for j, gp in enumerate(cfg.gamma_primes):
                ax = axes[Gp - 1 - j, i]
                theta, amp = condense.orientation_amplitude(cmap["a"][i, j], cmap["W"][i, j])
                ax.plot(theta, amp / amp.max(), ".", ms=2)
                ax.set_title(f"γ={g}, γ'={gp}: score {cmap['score'][i, j]:.2f}", fontsize=7)
                ax.tick_params(labelsize=6)
        sub[0].supxlabel("orientation θ = atan2(b, w)", fontsize=8)
        sub[0].supylabel("amplitude |a|‖w‖ (max 1)", fontsize=8)
        axes2 = sub[1].subplots(len(inits), 1, squeeze=False)[:, 0]  # one per activation
        for ax, r in zip(axes2, inits, strict=True):
            im = ax.imshow(r["gram_reordered"], vmin=-1, vmax=1, cmap="RdBu_r")
            ax.set_title(
                f"{r['activation']} (p={r['p']}): {r['clusters']} directions "
                f"(≤ 2p = {2 * r['p']}?)",
                fontsize=7,
            )
            ax.set_xticks([])
            ax.set_yticks([])
        sub[1].colorbar(im, ax=axes2, shrink=0.6, label="cosine")
        return ctx.save(fig)


FIGURE = Figure(
    number=3, caption=__doc__, make=make, title="Condensation maps and initial condensation"
)
