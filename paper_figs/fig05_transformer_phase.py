"""Figure 5: the transformer's FFN blocks on the phase diagram (docs/science.md §5, §7.5).

Theory layer (this file): (a) FFN phase coordinates under the γ rule and named schemes,
with d_model fixed and with proportional widths (the schemes at their effective γ for a
range of widths, and their width laws); (b) the effective γ of the FFN matrices against
width, showing how a fixed std drifts; (c) the predicted interval of the FFN's RD slope
S_w against γ for proportional widths. The measured LLM slopes are a separate layer on
panel (c) (see ``make``).

Measurement layer (:func:`draw_measured_layer`): on panel (c), the S_w that
``smallinit compare`` measures at each γ — the two-layer toy at (2γ, 0), and the
transformer's FFN input weights (and Q/K) per layer across widths — from the comparison
run of the figure's profile (computed through the run store when missing).
"""

from __future__ import annotations

import numpy as np

from smallinit.core.plotting import use_style
from smallinit.study.figure import Figure, single
from smallinit.theory import diagram
from smallinit.theory.init_rules import gamma_scheme, parse_scheme
from smallinit.theory.transformer import TransformerShape, ffn_blocks, ffn_point_from_rates

XLIM = (-0.1, 2.7)
YLIM = (-0.6, 1.4)
GAMMAS = (0.25, 0.5, 0.75, 1.0, 1.25)
WIDTHS = (128, 256, 512, 1024, 2048)
SCHEMES = ("nanogpt", "fixed", "mitchell", "mup", "xavier", "kaiming")
N_LAYERS = 4
COLORS = dict(
    zip(SCHEMES, ("#E69F00", "#56B4E9", "#009E73", "#CC79A7", "#0072B2", "#D55E00"), strict=True)
)


def _shape(width: int):
    # The plain FFN x ↦ W_down σ(W_up x) of docs/science.md §5 (d_ff = 4·d_model).
    return TransformerShape(d_model=width, n_layers=N_LAYERS, mlp="gelu")


def _first_block(width: int, scheme: str):
    return ffn_blocks(_shape(width), parse_scheme(scheme))[0]


def draw_diagram(ax) -> None:
    """Panel (a): γ-rule and named-scheme FFN points on the diagram."""
    diagram.draw_phase_regions(ax, XLIM, YLIM)
    for scaling, marker, fill in (("proportional", "D", "full"), ("fixed", "s", "none")):
        pts = np.array(
            [
                [float(v) for v in (p.gamma, p.gamma_prime)]
                for p in (_first_block(512, gamma_scheme(g))["width_law"][scaling] for g in GAMMAS)
            ]
        )
        ax.plot(
            pts[:, 0],
            pts[:, 1],
            ls=":",
            marker=marker,
            fillstyle=fill,
            color="black",
            ms=6,
            zorder=6,
            label=f"γ rule, γ = {GAMMAS[0]}…{GAMMAS[-1]}, "
            + ("d ∝ m" if scaling == "proportional" else "d fixed"),
        )
    for name in SCHEMES:
        at_size = np.array(
            [
                [float(p.gamma), float(p.gamma_prime)]
                for p in (_first_block(w, name)["at_size"]["proportional"] for w in WIDTHS)
            ]
        )
        ax.plot(
            at_size[:, 0],
            at_size[:, 1],
            "-o",
            ms=3,
            color=COLORS[name],
            zorder=5,
            label=f"{name}, d ∝ m, at d_model = {WIDTHS[0]}…{WIDTHS[-1]}",
        )
        law = _first_block(WIDTHS[0], name)["width_law"]["proportional"]
        ax.plot(
            [float(law.gamma)],
            [float(law.gamma_prime)],
            marker="*",
            ms=10,
            color=COLORS[name],
            zorder=6,
            ls="none",
        )
    ax.set_title("(a) FFN blocks (★: width law as m → ∞)")
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)


def draw_gamma_eff(ax) -> None:
    """Panel (b): γ_eff of W_up (solid) and W_down (dashed) against d_model."""
    for name in SCHEMES:
        blocks = [_first_block(w, name) for w in WIDTHS]
        ax.plot(
            WIDTHS,
            [float(b["gamma_eff_up"]) for b in blocks],
            "-o",
            ms=3,
            color=COLORS[name],
            label=name,
        )
        ax.plot(
            WIDTHS, [float(b["gamma_eff_down"]) for b in blocks], "--", ms=3, color=COLORS[name]
        )
    ax.axhline(0.5, color="black", lw=0.8, ls=":")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("d_model (d_ff = 4·d_model)")
    ax.set_ylabel("γ_eff = −ln σ / ln d_in")
    ax.set_title("(b) effective γ: W_up solid, W_down dashed")
    ax.legend(fontsize=6)


def draw_theory_layer(ax) -> None:
    """Panel (c): predicted S_w interval of the FFN (proportional widths) against γ."""
    gammas = np.linspace(0.0, 1.5, 121)
    lo, hi = [], []
    for g in gammas:
        point = ffn_point_from_rates(g, g, "proportional")
        lo.append(float(point.slope[0]))
        hi.append(float(point.slope[1]))
    lo, hi = np.array(lo), np.array(hi)
    top, bottom = 1.5, -1.5
    ax.fill_between(
        gammas,
        np.where(np.isinf(lo), bottom, lo),
        np.where(np.isinf(hi), top, hi),
        color="#999999",
        alpha=0.3,
        lw=0,
        label="predicted S_w (≤ Δ linear, ≥ Δ/2 condensed)",
    )
    ax.plot(gammas, 2 * gammas - 1, color="black", lw=1, label="Δ = 2γ − 1")
    upper = gammas >= 0.5
    ax.plot(gammas[upper], (2 * gammas[upper] - 1) / 2, color="black", lw=1, ls="--", label="Δ/2")
    ax.axvline(0.5, color="black", lw=0.8, ls=":")
    ax.set_ylim(bottom, top)
    ax.set_xlabel("γ (γ rule, d_ff = r·d_model)")
    ax.set_ylabel("S_w = d ln RD / d ln m")
    ax.set_title("(c) FFN input-weight RD slope")
    ax.legend(fontsize=6, loc="upper left")


def measured_records(ctx) -> list[dict]:
    """The comparison table of ``ctx.profile`` (run or reused through ``ctx.store``)."""
    return single(ctx.results("compare")).read_json("table.json")["records"]


def draw_measured_layer(ax, records: list[dict]) -> None:
    """Panel (c), measured: toy S_w (black circles) and the transformer's per-layer slopes
    of W_up (filled squares) and Q/K (open triangles), shifted slightly in γ per layer."""

    def values(key, layer=None):
        vals = [r[key] if layer is None else r[key][layer] for r in records]
        return np.array([np.nan if v is None else v for v in vals], dtype=float)

    gammas = values("gamma")
    shown = [values("toy_S_w")]
    ax.plot(
        gammas, shown[0], "o", color="black", ms=7, zorder=8, label="toy two-layer net at (2γ, 0)"
    )
    n_layers = len(records[0]["llm_S_w"]) if records else 0
    colors = ("#D55E00", "#0072B2", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")
    for layer in range(n_layers):
        x = gammas + 0.02 * (layer + 1)
        color = colors[layer % len(colors)]
        shown += [values("llm_S_w", layer), values("llm_S_w_qk", layer)]
        ax.plot(
            x,
            shown[-2],
            "s",
            color=color,
            ms=5,
            zorder=9,
            label=f"transformer FFN W_up, layer {layer}",
        )
        ax.plot(
            x,
            shown[-1],
            "^",
            color=color,
            fillstyle="none",
            ms=5,
            zorder=9,
            label=f"transformer Q/K, layer {layer}",
        )
    finite = np.concatenate(shown)
    finite = finite[np.isfinite(finite)]
    if finite.size:
        lo, hi = ax.get_ylim()
        ax.set_ylim(min(lo, finite.min() - 0.2), max(hi, finite.max() + 0.2))
    ax.legend(fontsize=6, loc="upper left")


def make(ctx):
    import matplotlib.pyplot as plt

    with use_style():
        fig, (ax_a, ax_b, ax_c) = plt.subplots(1, 3, figsize=(15, 5.4))
        draw_diagram(ax_a)
        draw_gamma_eff(ax_b)
        draw_theory_layer(ax_c)
        draw_measured_layer(ax_c, measured_records(ctx))
        return ctx.save(fig)


FIGURE = Figure(
    number=5, caption=__doc__, make=make, title="Transformer FFN blocks on the phase diagram"
)
