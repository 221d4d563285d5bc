"""Figure 1: the two-layer ReLU phase diagram (docs/science.md §2, §7.1).

Theory layer (this file): the linear and condensed regions, the critical rays Δ = 0 and the
named initializations, all computed by :mod:`smallinit.theory` (γ horizontal, γ' vertical).
The simulated S_w heatmap of the toy phase scan is a separate layer drawn on the same axes
(see ``make``).
"""

from __future__ import annotations

import numpy as np

from smallinit.core.plotting import use_style
from smallinit.study.figure import Figure, single
from smallinit.theory import diagram

#: Axes box: covers the toy scan's full grid (γ in [0, 2], γ' in [-1, 1]).
XLIM = (-0.1, 2.25)
YLIM = (-1.15, 1.15)


def draw_theory_layer(ax) -> None:
    """Regions, boundary rays, named points and the one-parameter families."""
    diagram.draw_phase_regions(ax, XLIM, YLIM)
    diag = diagram.family_curve("e_diagonal", np.linspace(-1.5, 1.5, 2))
    ax.plot(
        diag[:, 0],
        diag[:, 1],
        ls="--",
        color="#009E73",
        lw=1.2,
        zorder=2,
        label="(1, β, 1) and γ-rule FFN, d fixed: γ' = γ",
    )
    gammas = np.array([0.25, 0.5, 0.75, 1.0])
    prop = diagram.family_curve("gamma_ffn_proportional", gammas)
    ax.plot(
        prop[:, 0],
        prop[:, 1],
        ls="none",
        marker="D",
        ms=5,
        color="#CC79A7",
        zorder=5,
        label="γ-rule FFN, d ∝ m: (2γ, 0), γ = 0.25…1",
    )
    diagram.draw_points(ax, diagram.scheme_points())
    ax.legend(loc="upper right", fontsize=7, frameon=True, framealpha=0.9)
    ax.set_title("Two-layer ReLU phase diagram (theory)")


def draw_simulation_layer(ax, ctx):
    """The toy phase scan's S_w (median over seeds) as a heatmap over the theory layer, its
    zero level (where the measured slope changes sign) as a black line; the profile's
    ``toy-scan`` experiment. Any grid its config accepts is drawn: a zero level needs at
    least two values of γ and of γ' (a point or a line of the grid shows its colours only)."""
    arrays = single(ctx.results("toy-scan")).arrays()
    g, gp, s_w = arrays["gammas"], arrays["gamma_primes"], arrays["S_w"]
    lim = float(np.nanmax(np.abs(s_w)))
    mesh = ax.pcolormesh(
        g, gp, s_w.T, shading="nearest", cmap="RdBu_r", vmin=-lim, vmax=lim, alpha=0.55, zorder=1.5
    )
    if min(s_w.shape) >= 2:
        ax.contour(g, gp, s_w.T, levels=[0.0], colors="black", linewidths=1.6, zorder=3)
    ax.figure.colorbar(mesh, ax=ax, label="simulated S_w = d ln RD / d ln m (black: S_w = 0)")
    ax.set_title("Two-layer ReLU phase diagram: theory and simulated S_w")


def make(ctx):
    import matplotlib.pyplot as plt

    with use_style():
        fig, ax = plt.subplots(figsize=(6.4, 5.0))
        draw_theory_layer(ax)
        draw_simulation_layer(ax, ctx)
        return ctx.save(fig)


FIGURE = Figure(
    number=1, caption=__doc__, make=make, title="Phase diagram of the two-layer ReLU network"
)
