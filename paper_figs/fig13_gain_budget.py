"""Fig 13: the gain of small init against the training budget, beside theory's escape time
(docs/science.md §4.3, §13.1).

Left panels, one per size of fig 7: the held-out gain g(t) = L(γ = 0.5) − L(γ = 1) at every
step the runs recorded their held-out loss (thin lines: seeds, thick: their mean; each γ at
its own learning rate where the profile chooses them). Below 0, small init is still paying
for its plateau; the step where the mean crosses 0 is where it starts to win. Right panel:
that crossing step per seed against theory's extra escape time of γ = 1 over γ = 0.5,
ΔT(d) = T₂(1, d) − T₂(0.5, d) = 0.5·ln d / c for an L = 2-homogeneous model started at
ε = d^−γ (:func:`smallinit.theory.escape.escape_time_gamma`, c = 1), with the least-squares
line a + b·ΔT over seeds and sizes and its R² (theory predicts the shape, b > 0; the rate c
is not known). The title gives ``small-init-pays-then-wins`` as ``smallinit claims`` judges
it. Profiles that record the held-out loss only at the end draw the end point alone.
"""

from __future__ import annotations

import logging

import matplotlib.pyplot as plt
import numpy as np

from smallinit.core.plotting import use_style
from smallinit.study import claims
from smallinit.study.figure import Figure
from smallinit.theory.escape import escape_time_gamma

log = logging.getLogger(__name__)


def curve(run) -> dict[int, float]:
    """A run's held-out loss by step: its records along training and the final one."""
    out = {
        r["step"]: float(r["val_loss"])
        for r in run.metrics()
        if "val_loss" in r and isinstance(r.get("step"), int)
    }
    out[int(run.summary["steps"])] = float(run.summary["val_loss"])
    return out


def gains_along(pairs) -> dict[int, dict[int, float]]:
    """g_s(t) per seed: L(γ 0.5) − L(γ 1) at the steps both runs of a seed recorded."""
    by = {(j.tags["seed"], j.tags["gamma"]): r for j, r in pairs if r.done}
    out = {}
    for s in sorted({k[0] for k in by}):
        if (s, 0.5) in by and (s, 1.0) in by:
            a, b = curve(by[(s, 0.5)]), curve(by[(s, 1.0)])
            out[s] = {t: a[t] - b[t] for t in sorted(set(a) & set(b))}
    return out


def crossing(g: dict[int, float]) -> float:
    """The first step where g turns from negative to positive (linear between records);
    NaN when it never is negative first or never turns positive."""
    steps = sorted(g)
    for t0, t1 in zip(steps, steps[1:], strict=False):
        if g[t0] < 0 <= g[t1]:
            return t0 + (t1 - t0) * (-g[t0]) / (g[t1] - g[t0])
    return float("nan")


def extra_escape(d: int) -> float:
    """ΔT(d) = T₂(1, d) − T₂(0.5, d) (module doc)."""
    return escape_time_gamma(2, 1.0, d) - escape_time_gamma(2, 0.5, d)


def make(ctx):
    results = ctx.results("gamma-sweep")
    plain = [
        (j, r)
        for j, r in results.done()
        if j.tags.get("gamma") in claims.COMPARED and j.tags.get("arm", "plain") == "plain"
    ]
    sizes = sorted({j.tags["size"] for j, _ in plain})
    if not sizes:
        log.info("fig 13: profile %s has no γ 0.5 / 1 runs; nothing drawn", ctx.profile)
        return []
    judged = claims.judge("small-init-pays-then-wins", results, ctx.profile)
    with use_style():
        fig, axes = plt.subplots(
            1, len(sizes) + 1, figsize=(3.4 * (len(sizes) + 1), 3.6), constrained_layout=True
        )
        points = []
        for ax, d in zip(axes[:-1], sizes, strict=True):
            g = gains_along([(j, r) for j, r in plain if j.tags["size"] == d])
            for s, gs in g.items():
                ax.plot(list(gs), list(gs.values()), color="0.55", lw=0.8, marker=".", ms=3)
                points.append((d, s, crossing(gs)))
            steps = sorted(set.intersection(*(set(gs) for gs in g.values()))) if g else []
            mean = [np.mean([g[s][t] for s in g]) for t in steps]
            ax.plot(steps, mean, "k-", lw=1.8, label=f"mean over seeds (n = {len(g)})")
            ax.axhline(0, color="tab:red", lw=0.8, ls="--")
            ax.set_title(f"d_model {d}", fontsize=9)
            ax.set_xlabel("training step")
            ax.legend(fontsize=7)
            log.info(
                "fig 13 d=%d: g(t) per seed %s",
                d,
                {s: {t: round(v, 4) for t, v in gs.items()} for s, gs in g.items()},
            )
        axes[0].set_ylabel("g(t) = L(γ 0.5) − L(γ 1), held-out (nats/token)")
        ax = axes[-1]
        x = np.array([extra_escape(d) for d, _, _ in points])
        y = np.array([t for _, _, t in points])
        ok = np.isfinite(y)
        ax.plot(
            x[ok],
            y[ok],
            "o",
            color="0.3",
            mfc="none",
            ms=5,
            label=f"crossing step, seeds (n = {int(ok.sum())} of {len(y)})",
        )
        if ok.sum() >= 2 and np.ptp(x[ok]) > 0:
            b, a = np.polyfit(x[ok], y[ok], 1)
            pred = a + b * x[ok]
            ss = np.sum((y[ok] - y[ok].mean()) ** 2)
            r2 = 1 - np.sum((y[ok] - pred) ** 2) / ss if ss > 0 else float("nan")
            grid = np.linspace(x.min(), x.max(), 20)
            ax.plot(
                grid, a + b * grid, "k--", lw=1, label=f"a + b·ΔT: b = {b:.3g} steps, R² = {r2:.2f}"
            )
        ax.set_xlabel("theory's extra escape time ΔT(d) = 0.5·ln d  (1/c)")
        ax.set_ylabel("step where g turns positive")
        ax.set_title("where small init starts to win", fontsize=9)
        ax.legend(fontsize=7)
        fig.suptitle(f"{judged.label('end gain', 3)}; {judged.detail}", fontsize=8)
        return ctx.save(fig)


FIGURE = Figure(
    number=13,
    caption=__doc__,
    make=make,
    title="Gain of small init against the training budget, beside theory's escape time",
)
