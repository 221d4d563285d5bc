"""Figure 4: lazy versus rich in the diagonal linear network (docs/science.md §4, §7.4).

Theory layer (this file): (a) the shape of Q_α for one coordinate, from |β| (α → 0, ℓ1)
to β² (α → ∞, ℓ2); (b) the distance of argmin Q_α s.t. Xβ = y to the minimum-ℓ1 and
minimum-ℓ2 interpolants across α, on a planted sparse problem, for depth 2 and 3. The
diagonal network trained by gradient descent from init α is a separate layer on panel (b)
(see ``make``); it must use :data:`PROBLEM` so both layers solve the same regression.
"""

from __future__ import annotations

import numpy as np

from smallinit.core.errors import ConfigError
from smallinit.core.plotting import use_style
from smallinit.study.figure import Figure, outputs
from smallinit.theory import lazy_rich

#: The regression of panel (b): arguments of theory.lazy_rich.planted_sparse_problem.
PROBLEM = {"n": 10, "dim": 40, "k": 3, "seed": 0}
ALPHAS = np.logspace(-3, 2, 41)
SHAPE_ALPHAS = (0.01, 0.1, 1.0, 10.0)


def draw_q_shape(ax) -> None:
    """Q_α(β)/Q_α(1) for one coordinate against the |β| and β² limits."""
    beta = np.linspace(-2, 2, 401)
    for a in SHAPE_ALPHAS:
        values = np.array([lazy_rich.Q_alpha([b], a) for b in beta])
        ax.plot(beta, values / lazy_rich.Q_alpha([1.0], a), label=f"α = {a:g}")
    ax.plot(beta, np.abs(beta), color="black", ls=":", lw=1, label="|β| (α → 0)")
    ax.plot(beta, beta**2, color="black", ls="--", lw=1, label="β² (α → ∞)")
    ax.set_xlabel("β")
    ax.set_ylabel("Q_α(β) / Q_α(1)")
    ax.set_ylim(0, 4.2)
    ax.set_title("(a) Q_α interpolates between ℓ1 and ℓ2")
    ax.legend(fontsize=7)


def theory_curves(depth: int) -> dict[str, np.ndarray]:
    """Relative distances of argmin Q^D_α to the ℓ1 and ℓ2 interpolants, over ALPHAS."""
    X, y, _ = lazy_rich.planted_sparse_problem(**PROBLEM)
    l1, l2 = lazy_rich.min_l1_interpolant(X, y), lazy_rich.min_l2_interpolant(X, y)
    sols = np.array([lazy_rich.solve_q_alpha(X, y, a, depth=depth) for a in ALPHAS])
    return {
        "to_l1": np.linalg.norm(sols - l1, axis=1) / np.linalg.norm(l1),
        "to_l2": np.linalg.norm(sols - l2, axis=1) / np.linalg.norm(l2),
    }


def draw_theory_layer(ax) -> None:
    """Panel (b): argmin Q_α's distance to the ℓ1 and ℓ2 solutions across α."""
    for depth, ls in ((2, "-"), (3, "--")):
        curves = theory_curves(depth)
        ax.plot(ALPHAS, curves["to_l1"], color="#D55E00", ls=ls, label=f"to min-ℓ1, D = {depth}")
        ax.plot(ALPHAS, curves["to_l2"], color="#0072B2", ls=ls, label=f"to min-ℓ2, D = {depth}")
    ax.set_xscale("log")
    ax.set_xlabel("initialization scale α")
    ax.set_ylabel("relative distance of argmin Q_α")
    ax.set_title("(b) rich (small α) to lazy (large α)")
    ax.legend(fontsize=7)


def draw_simulation_layer(ax, ctx) -> None:
    """Gradient descent on the diagonal net from init α (toy, on PROBLEM) as points on the
    theory curves: its distance to the ℓ1 and ℓ2 interpolants, depth 2 and 3, every 4th α
    of ALPHAS at the quick profile (all at full): the profile's ``diagonal`` experiment."""
    for (job, run), marker in zip(ctx.results("diagonal"), ("o", "s", "^", "v"), strict=False):
        cfg, depth = job.config, job.config.depth
        if {k: getattr(cfg, k) for k in PROBLEM} != PROBLEM:
            raise ConfigError(
                f"the profile's diagonal problem {cfg} is not the theory layer's {PROBLEM}"
            )
        r = outputs(run)
        ok = r["residual"] <= cfg.tol * 1.0001  # interpolates: its solution is comparable
        ax.plot(
            r["alphas"][ok],
            r["dist_l1"][ok],
            marker,
            color="#D55E00",
            mfc="none",
            ms=5,
            label=f"trained net, D = {depth}",
        )
        ax.plot(r["alphas"][ok], r["dist_l2"][ok], marker, color="#0072B2", mfc="none", ms=5)
        if (~ok).any():
            ax.plot(
                r["alphas"][~ok],
                r["dist_l1"][~ok],
                "x",
                color="grey",
                ms=5,
                label=f"D = {depth}: step budget hit, not interpolating",
            )
            ax.plot(r["alphas"][~ok], r["dist_l2"][~ok], "x", color="grey", ms=5)
    ax.legend(fontsize=7)


def make(ctx):
    import matplotlib.pyplot as plt

    with use_style():
        fig, (ax_a, ax_b) = plt.subplots(1, 2, figsize=(10, 4.2))
        draw_q_shape(ax_a)
        draw_theory_layer(ax_b)
        draw_simulation_layer(ax_b, ctx)
        return ctx.save(fig)


FIGURE = Figure(
    number=4, caption=__doc__, make=make, title="Lazy versus rich: argmin Q_alpha across alpha"
)
