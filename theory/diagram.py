"""Drawing the phase diagram's theory: regions, boundary rays and named points (docs/science.md §2,
§7).

Everything drawn is computed by :mod:`.phase`: the regions are the half-planes of Δ's sign
clipped to the axes box, the boundary is :func:`phase.critical_rays`, the points are the
registry's coordinates. γ is horizontal and γ' vertical (docs/science.md §2). matplotlib is imported
by the functions that draw, so importing this module costs nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import sympy as sp

from . import phase

#: Region colours (light fills under everything, so overlays stay readable).
REGION_STYLE = {
    "linear": {"color": "#56B4E9", "alpha": 0.18},
    "condensed": {"color": "#D55E00", "alpha": 0.15},
}
Box = tuple[tuple[float, float], tuple[float, float]]


def _clip(poly: list[tuple[float, float]], a: float, b: float, c: float):
    """Sutherland–Hodgman: keep the part of a convex polygon with a·x + b·y ≤ c."""
    out: list[tuple[float, float]] = []
    for i, p in enumerate(poly):
        q = poly[(i + 1) % len(poly)]
        fp, fq = a * p[0] + b * p[1] - c, a * q[0] + b * q[1] - c
        if fp <= 0:
            out.append(p)
        if fp * fq < 0:
            s = fp / (fp - fq)
            out.append((p[0] + s * (q[0] - p[0]), p[1] + s * (q[1] - p[1])))
    return out


def condensed_polygon(xlim: Sequence[float], ylim: Sequence[float]):
    """The condensed region {γ ≥ 1, γ' ≤ γ − 1} (Δ ≥ 0, docs/science.md §2) inside the box."""
    box = [(xlim[0], ylim[0]), (xlim[1], ylim[0]), (xlim[1], ylim[1]), (xlim[0], ylim[1])]
    poly = _clip(box, -1.0, 0.0, -1.0)  # γ ≥ 1
    return _clip(poly, -1.0, 1.0, -1.0)  # γ' − γ ≤ −1


def draw_phase_regions(
    ax: Any, xlim: Sequence[float], ylim: Sequence[float], labels: bool = True
) -> None:
    """Shade the linear and condensed regions, draw the critical rays, label them."""
    from matplotlib.patches import Polygon

    ax.add_patch(
        Polygon(
            [(xlim[0], ylim[0]), (xlim[1], ylim[0]), (xlim[1], ylim[1]), (xlim[0], ylim[1])],
            closed=True,
            lw=0,
            zorder=0,
            **REGION_STYLE["linear"],
        )
    )
    ax.add_patch(
        Polygon(
            condensed_polygon(xlim, ylim),
            closed=True,
            lw=0,
            zorder=0.5,
            **REGION_STYLE["condensed"],
        )
    )
    far = max(xlim[1] - xlim[0], ylim[1] - ylim[0]) * 4
    for i, (start, direction) in enumerate(phase.critical_rays()):
        end = (start[0] + far * direction[0], start[1] + far * direction[1])
        ax.plot(
            [start[0], end[0]],
            [start[1], end[1]],
            color="black",
            lw=1.6,
            zorder=3,
            label="critical (Δ = 0)" if i == 0 else None,
        )
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_xlabel("γ  (κ = β1β2/α ~ m^-γ)")
    ax.set_ylabel("γ'  (κ' = β1/β2 ~ m^-γ')")
    if labels:
        ax.text(
            xlim[0] + 0.04 * (xlim[1] - xlim[0]),
            ylim[1] - 0.08 * (ylim[1] - ylim[0]),
            "linear (Δ < 0)",
            color="#0072B2",
            fontsize=9,
            zorder=5,
        )
        ax.text(
            xlim[1] - 0.04 * (xlim[1] - xlim[0]),
            ylim[0] + 0.05 * (ylim[1] - ylim[0]),
            "condensed (Δ > 0)",
            color="#D55E00",
            fontsize=9,
            ha="right",
            zorder=5,
        )


def scheme_points() -> list[tuple[str, float, float]]:
    """Fixed registry schemes as (label, γ, γ'); coincident points share one label."""
    merged: dict[tuple[float, float], list[str]] = {}
    for s in phase.SCHEMES.values():
        if s.param is None:
            g, gp = s.coordinates()
            merged.setdefault((float(g), float(gp)), []).append(s.label)
    return [(", ".join(names), g, gp) for (g, gp), names in merged.items()]


def family_curve(name: str, values: Iterable[float]) -> np.ndarray:
    """Coordinates of a registry family at parameter ``values`` (rows (γ, γ'))."""
    s = phase.scheme(name)
    if s.param is None:
        raise ValueError(f"scheme {name!r} is not a family")
    g, gp = s.coordinates()
    fg, fgp = sp.lambdify(s.param, g), sp.lambdify(s.param, gp)
    vals = np.asarray(list(values), dtype=float)
    return np.column_stack(
        [np.broadcast_to(fg(vals), vals.shape), np.broadcast_to(fgp(vals), vals.shape)]
    )


def draw_points(
    ax: Any,
    points: Iterable[tuple[str, float, float]],
    *,
    marker: str = "o",
    color: str = "black",
    offset: tuple[float, float] = (5, 5),
    fontsize: float = 8,
) -> None:
    """Markers with text labels beside them."""
    for label, g, gp in points:
        ax.plot([g], [gp], marker=marker, color=color, ms=6, zorder=6, ls="none")
        ax.annotate(
            label,
            (g, gp),
            xytext=offset,
            textcoords="offset points",
            fontsize=fontsize,
            zorder=7,
            color=color,
        )
