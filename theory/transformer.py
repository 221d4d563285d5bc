"""From the toy to the transformer: every matrix's σ and γ_eff, the FFN blocks on the phase
diagram, and RMSNorm saturation (docs/science.md §5).

FFN as a two-layer net (docs/science.md §5): x ↦ W_down σ(W_up x) has m = d_ff hidden units, input
weights W_up (fan-in d = d_model, std β2) and output weights W_down (fan-in d_ff, std β1),
α = 1. Under the γ rule β1 = d_ff^{−γ}, β2 = d_model^{−γ}, and :func:`phase.coordinates` gives

    d_model fixed as d_ff → ∞:      (γ, γ')  = (γ, γ)       always linear (Δ = −1 for γ ≥ 0)
    d_ff = r·d_model, both → ∞:     (γ, γ')  = (2γ, 0)      critical at γ = 1/2,
                                                             condensed for γ > 1/2.

With separate rates g_down (W_down) and g_up (W_up) the general map is (g_down, g_down) and
(g_down + g_up, g_down − g_up) (:func:`ffn_rate_map`). Two views are reported per FFN block:

* width law: the scheme's own σ(d_in, d_out) as the widths grow (a fixed std has rate 0:
  asymptotically (0, 0), linear);
* at this size: the exponents γ_eff = −ln σ / ln d_in of the model at hand used as the
  rates (what a γ-rule model with the same σ at this size would be).

RMSNorm (docs/science.md §5): y = x/√(mean(x²) + ε). Embeddings at std d^{−γ} give mean(x²) ≈
d^{−2γ}, and the norm stops normalizing once d^{−2γ} ≲ ε, i.e. γ ≳ γ_ε = ln(1/ε)/(2 ln d)
(:func:`rmsnorm_gamma_threshold`; ε = 1e-5: 1.04 at d = 256, 0.92 at 512, 0.76 at 2048).
A small model (d_s) reproduces a large one's (d_l, ε_l) saturation by matching d^{−2γ}/ε:
ε_s = ε_l (d_l/d_s)^{2γ} (:func:`matching_eps`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import sympy as sp

from . import phase
from .condensation import multiplicity
from .exact import positive_float, positive_int, rate_value, show, to_exact
from .init_rules import (
    InitScheme,
    effective_gamma_expr,
    matrix_std,
    matrix_std_expr,
    parse_scheme,
    sigma_part,
)

MLPS = ("swiglu", "gelu", "relu")
POSITIONS = ("rope", "learned")
GATE_KINDS = ("elementwise", "headwise")


def default_ffn_dim(d_model: int, mlp: str) -> int:
    """The d_ff used when none is given (the one rule; ``smallinit.llm``'s ModelConfig calls
    it): 4·d_model for a one-matrix MLP (gelu, relu), and for SwiGLU 8/3·d_model rounded up
    to a multiple of 64, which keeps the parameter count of a 4·d MLP with two input matrices
    (Shazeer 2020; the Llama sizes)."""
    if mlp not in MLPS:
        raise ValueError(f"mlp={mlp!r} is not allowed; choose one of {', '.join(MLPS)}")
    if mlp == "swiglu":
        return 64 * -(-(8 * d_model) // (3 * 64))
    return 4 * d_model


@dataclasses.dataclass(frozen=True)
class TransformerShape:
    """The sizes that decide every fan-in, as in ``smallinit.llm``'s ModelConfig: d_ff by
    :func:`default_ffn_dim` unless given; untied embeddings; RoPE (no position table) unless
    ``positions="learned"`` (then a ``context`` × d_model table).

    ``n_heads`` has no default: no σ depends on it except the headwise attention gate's
    fan-out (d_model → n_heads), so it is required only for ``gate_kind="headwise"`` and
    otherwise only checked to divide d_model when given (and echoed in the report)."""

    d_model: int
    d_ff: int | None = None
    n_heads: int | None = None
    n_layers: int = 4
    vocab: int = 4096
    mlp: str = "swiglu"
    gated_attention: bool = False
    tie_embeddings: bool = False
    gate_kind: str = "elementwise"
    positions: str = "rope"
    context: int | None = None

    def __post_init__(self) -> None:
        positive_int(self.d_model, "d_model")
        if self.d_model < 2:
            raise ValueError(
                f"d_model={self.d_model} is not allowed; it must be >= 2 "
                "(γ_eff = −ln σ / ln d_in needs d_in > 1)"
            )
        if self.d_ff is not None and positive_int(self.d_ff, "d_ff") < 2:
            raise ValueError(f"d_ff={self.d_ff} is not allowed; it must be >= 2")
        positive_int(self.n_layers, "n_layers")
        positive_int(self.vocab, "vocab")
        if self.n_heads is not None:
            positive_int(self.n_heads, "n_heads")
            if self.d_model % self.n_heads:
                raise ValueError(f"n_heads={self.n_heads} does not divide d_model={self.d_model}")
        if self.mlp not in MLPS:
            raise ValueError(f"mlp={self.mlp!r} is not allowed; choose one of {', '.join(MLPS)}")
        if self.gate_kind not in GATE_KINDS:
            raise ValueError(
                f"gate_kind={self.gate_kind!r} is not allowed; choose one of "
                f"{', '.join(GATE_KINDS)}"
            )
        if self.gated_attention and self.gate_kind == "headwise" and self.n_heads is None:
            raise ValueError("gate_kind='headwise' needs n_heads (the gate's fan-out)")
        if self.positions not in POSITIONS:
            raise ValueError(
                f"positions={self.positions!r} is not allowed; choose one of {', '.join(POSITIONS)}"
            )
        if self.positions == "learned" and self.context is None:
            raise ValueError("positions='learned' needs context (the table's row count)")
        if self.context is not None:
            positive_int(self.context, "context")

    @property
    def ffn_dim(self) -> int:
        return self.d_ff if self.d_ff is not None else default_ffn_dim(self.d_model, self.mlp)


@dataclasses.dataclass(frozen=True)
class MatrixKind:
    """One matrix of every block (``in_blocks``) or of the model, by role ``kind`` (the
    vocabulary ``smallinit.llm``'s model declares its matrices with)."""

    kind: str
    part: str
    d_in: int
    d_out: int
    residual_out: bool = False
    in_blocks: bool = True

    @property
    def key(self) -> str:
        """Display name, with {i} for the block index."""
        return f"blocks.{{i}}.{self.kind}" if self.in_blocks else self.kind


def matrix_kinds(shape: TransformerShape) -> list[MatrixKind]:
    """Every kind of weight matrix of a pre-norm decoder with these sizes (docs/science.md
    §1, §5): embeddings, per block W_Q, W_K, W_V, W_O, the attention gate, the MLP's input
    matrices (SwiGLU: gate and up) and W_down, and an untied head."""
    d, ff = shape.d_model, shape.ffn_dim
    kinds = [MatrixKind("embedding", "embedding", d, shape.vocab, in_blocks=False)]
    if shape.positions == "learned":
        assert shape.context is not None  # the shape's check: learned positions need it
        kinds.append(MatrixKind("positions", "embedding", d, shape.context, in_blocks=False))
    kinds += [
        MatrixKind("attn.q", "qk", d, d),
        MatrixKind("attn.k", "qk", d, d),
        MatrixKind("attn.v", "vo", d, d),
        MatrixKind("attn.o", "vo", d, d, residual_out=True),
    ]
    if shape.gated_attention:
        gate_out = d if shape.gate_kind == "elementwise" else shape.n_heads
        assert gate_out is not None  # the shape's check: a headwise gate needs n_heads
        kinds.append(MatrixKind("attn.gate", "attn_gate", d, gate_out))
    if shape.mlp == "swiglu":
        kinds.append(MatrixKind("mlp.gate", "mlp", d, ff))
    kinds.append(MatrixKind("mlp.up", "mlp", d, ff))
    kinds.append(MatrixKind("mlp.down", "mlp_out", ff, d, residual_out=True))
    if not shape.tie_embeddings:
        kinds.append(MatrixKind("head", "head", d, shape.vocab, in_blocks=False))
    return kinds


def _layer_groups(values: dict[int, Any]) -> list[tuple[list[int], Any]]:
    """Group block indices with equal values, in order of first appearance."""
    groups: dict[Any, list[int]] = {}
    for layer, value in values.items():
        groups.setdefault(value, []).append(layer)
    return [(layers, value) for value, layers in groups.items()]


def _block_name(key: str, layers: list[int], n_layers: int) -> str:
    if len(layers) == n_layers:
        return key.replace("{i}", "*")
    return key.replace("{i}", ",".join(map(str, layers)))


def _exact_or_float(expr: sp.Expr) -> Any:
    return expr if expr.is_Rational else float(expr)


def matrices(shape: TransformerShape, scheme: InitScheme) -> list[dict[str, Any]]:
    """Every weight matrix with its part, fan-in d_in, fan-out d_out, σ and γ_eff (exact
    where it is). Blocks whose matrices share σ are listed once (``blocks.*``)."""
    rows = []
    for kind in matrix_kinds(shape):
        layers = range(shape.n_layers) if kind.in_blocks else [0]
        part = sigma_part(kind.part, kind.kind)  # q or k for the query and key matrices
        sigmas = {
            i: matrix_std(
                scheme,
                part,
                kind.d_in,
                kind.d_out,
                n_layers=shape.n_layers,
                layer=i,
                residual_out=kind.residual_out,
            )
            for i in layers
        }
        for group, sigma in _layer_groups(sigmas):
            expr = matrix_std_expr(
                scheme,
                part,
                kind.d_in,
                kind.d_out,
                n_layers=shape.n_layers,
                layer=group[0],
                residual_out=kind.residual_out,
            )
            g_eff = effective_gamma_expr(expr, kind.d_in)
            rows.append(
                {
                    "name": _block_name(kind.key, group, shape.n_layers)
                    if kind.in_blocks
                    else kind.key,
                    "kind": kind.kind,
                    "part": kind.part,
                    "d_in": kind.d_in,
                    "d_out": kind.d_out,
                    "layers": group if kind.in_blocks else [],
                    "residual_out": kind.residual_out,
                    "sigma": sigma,
                    "gamma_eff": _exact_or_float(g_eff),
                }
            )
    return rows


# ----------------------------------------------------------------------------- FFN mapping
_g_down, _g_up = sp.symbols("g_down g_up", real=True)


@functools.lru_cache(maxsize=4)
def ffn_rate_map(scaling: str) -> tuple[sp.Expr, sp.Expr]:
    """(γ, γ') of an FFN with σ_down = d_ff^{−g_down}, σ_up = d_model^{−g_up}, α = 1,
    derived with :func:`phase.coordinates` (symbols :data:`_g_down`, :data:`_g_up`)."""
    return phase.coordinates(1, phase.m**-_g_down, phase.d**-_g_up, scaling)


def ffn_point_from_rates(g_down: Any, g_up: Any, scaling: str) -> phase.PhasePoint:
    """The phase point of an FFN block with these rates (exact for exact rates)."""
    g, gp = ffn_rate_map(scaling)
    subs = {_g_down: to_exact(g_down, "g_down"), _g_up: to_exact(g_up, "g_up")}
    return phase.PhasePoint.at(g.subs(subs), gp.subs(subs))


def _width_law_point(
    scheme: InitScheme, shape: TransformerShape, layer: int, scaling: str
) -> phase.PhasePoint:
    m, d = phase.m, phase.d
    beta1 = matrix_std_expr(
        scheme, "mlp_out", m, d, n_layers=shape.n_layers, layer=layer, residual_out=True
    )
    beta2 = matrix_std_expr(scheme, "mlp", d, m, n_layers=shape.n_layers, layer=layer)
    return phase.PhasePoint.at(*phase.coordinates(1, beta1, beta2, scaling))


def ffn_blocks(shape: TransformerShape, scheme: InitScheme) -> list[dict[str, Any]]:
    """For each FFN block (blocks with equal σ grouped): its rates and phase points.

    ``width_law`` / ``at_size`` map scaling ("fixed", "proportional") to a
    :class:`phase.PhasePoint` (coordinates, Δ, regime, predicted S_w interval).
    """
    d, ff = shape.d_model, shape.ffn_dim
    per_layer = {}
    for i in range(shape.n_layers):
        up = matrix_std_expr(scheme, "mlp", d, ff, n_layers=shape.n_layers, layer=i)
        down = matrix_std_expr(
            scheme, "mlp_out", ff, d, n_layers=shape.n_layers, layer=i, residual_out=True
        )
        per_layer[i] = (up, down)
    out = []
    for layers, (up, down) in _layer_groups(per_layer):
        g_up = effective_gamma_expr(up, d)
        g_down = effective_gamma_expr(down, ff)
        out.append(
            {
                "name": _block_name("blocks.{i}.mlp", layers, shape.n_layers),
                "layers": layers,
                "m": ff,
                "d": d,
                "sigma_up": float(up),
                "sigma_down": float(down),
                "gamma_eff_up": _exact_or_float(g_up),
                "gamma_eff_down": _exact_or_float(g_down),
                "width_law": {
                    s: _width_law_point(scheme, shape, layers[0], s) for s in phase.SCALINGS
                },
                "at_size": {
                    s: ffn_point_from_rates(_exact_or_float(g_down), _exact_or_float(g_up), s)
                    for s in phase.SCALINGS
                },
            }
        )
    return out


def luo_assumptions(shape: TransformerShape) -> list[dict[str, str]]:
    """Which hypotheses of Luo et al.'s phase diagram hold for this FFN (docs/science.md §5)."""
    act = {"swiglu": "silu", "gelu": "gelu", "relu": "relu"}[shape.mlp]
    if act == "relu":
        act_note = "ReLU, as in the theorem"
    else:
        act_note = (
            f"{act} is not 1-homogeneous (multiplicity p = {multiplicity(act)}, "
            "docs/science.md §3); the diagram is used as an approximation"
        )
    return [
        {
            "assumption": "two-layer form x ↦ W_down σ(W_up x) with m = d_ff",
            "holds": "no" if shape.mlp == "swiglu" else "yes",
            "note": "SwiGLU multiplies σ(W_gate x) by W_up x (a product of two input layers)"
            if shape.mlp == "swiglu"
            else "one block of the residual stream",
        },
        {
            "assumption": "ReLU activation",
            "holds": "yes" if act == "relu" else "no",
            "note": act_note,
        },
        {
            "assumption": "i.i.d. Gaussian init, α = 1",
            "holds": "yes",
            "note": "σ per matrix from init_rules (mitchell truncates at ±3σ)",
        },
        {
            "assumption": "scalar output",
            "holds": "no",
            "note": f"d_model = {shape.d_model} outputs share the hidden layer",
        },
        {
            "assumption": "input dimension d fixed as m → ∞",
            "holds": "fixed d only",
            "note": "the proportional map (d = m/r) extrapolates the theorem",
        },
        {
            "assumption": "gradient flow on squared loss with fixed inputs",
            "holds": "no",
            "note": "AdamW on cross-entropy; the FFN inputs are normalized hidden states that "
            "move during training",
        },
    ]


# ----------------------------------------------------------------------------- RMSNorm
def gamma_eps_expr() -> sp.Expr:
    """γ_ε solved from d^{−2γ} = ε: ln(1/ε)/(2 ln d) (docs/science.md §5)."""
    g, dd, eps = sp.symbols("gamma d epsilon", positive=True)
    # Take logarithms: −2γ ln d = ln ε, linear in γ.
    (sol,) = sp.solve(sp.expand_log(sp.log(dd ** (-2 * g)) - sp.log(eps), force=True), g)
    return sp.simplify(sol)


def _width(value: Any, name: str = "d") -> float:
    out = positive_float(value, name)
    if out <= 1:
        raise ValueError(f"{name}={value!r} is not allowed; the width must be > 1")
    return out


def _eps(value: Any) -> float:
    return positive_float(value, "eps")


def rmsnorm_gamma_threshold(d: Any, eps: Any) -> float:
    """γ_ε(d, ε) = ln(1/ε)/(2 ln d): above it the embedding RMS² d^{−2γ} is below ε."""
    return math.log(1 / _eps(eps)) / (2 * math.log(_width(d)))


def saturation_ratio(d: Any, gamma: Any, eps: Any) -> float:
    """d^{−2γ}/ε: ≫ 1 the norm normalizes, ≪ 1 ε dominates (saturated). Computed from its
    logarithm; ValueError when it is outside the float range (|γ| too large for this d)."""
    d_value, g, eps_value = _width(d), float(rate_value(gamma, "gamma")), _eps(eps)
    log_ratio = -2 * g * math.log(d_value) - math.log(eps_value)
    if not -700 < log_ratio < 700:
        raise ValueError(
            f"d^-2γ/ε for d={d}, gamma={gamma}, eps={eps} is about "
            f"e^{log_ratio:.0f}, outside the float range; choose a smaller |γ|"
        )
    return math.exp(log_ratio)


def rmsnorm_output_rms(d: Any, gamma: Any, eps: Any) -> float:
    """RMS of RMSNorm's output at init, √(s/(s + ε)) with s = d^{−2γ}: 1 when normalizing,
    → 0 when saturated (1/√(1 + 1/ratio))."""
    return 1 / math.sqrt(1 + 1 / saturation_ratio(d, gamma, eps))


def matching_eps(d_small: Any, d_large: Any, gamma: Any, eps_large: Any) -> float:
    """ε for a width-d_small model with the same d^{−2γ}/ε as width d_large at ε_large:
    ε_small = ε_large · (d_large/d_small)^{2γ}."""
    g = float(rate_value(gamma, "gamma"))
    log_eps = math.log(_eps(eps_large)) + 2 * g * math.log(
        _width(d_large, "d_large") / _width(d_small, "d_small")
    )
    if not -700 < log_eps < 700:
        raise ValueError(
            f"the matching eps for d_small={d_small}, d_large={d_large}, "
            f"gamma={gamma}, eps_large={eps_large} is about e^{log_eps:.0f}, "
            "outside the float range; choose a smaller |γ|"
        )
    return math.exp(log_eps)


# ----------------------------------------------------------------------------- report
def report(shape: TransformerShape, scheme: InitScheme | str, eps: Any = 1e-5) -> dict[str, Any]:
    """Everything ``smallinit theory transformer`` prints, as plain data (``scheme`` may be
    a string that :func:`init_rules.parse_scheme` reads, e.g. ``"gamma:1.0"``)."""
    scheme = parse_scheme(scheme) if isinstance(scheme, str) else scheme
    for part, g in [("gamma", scheme.gamma), *scheme.overrides]:
        rate_value(g, "gamma" if part == "gamma" else f"gamma of {part}")
    rows = matrices(shape, scheme)
    emb = next(r for r in rows if r["part"] == "embedding")
    eps_value = _eps(eps)
    ffn = []
    for block in ffn_blocks(shape, scheme):
        entry = {
            k: (show(v) if isinstance(v, sp.Basic) else v)
            for k, v in block.items()
            if k not in ("width_law", "at_size")
        }
        for view in ("width_law", "at_size"):
            entry[view] = {s: p.as_dict() for s, p in block[view].items()}
        ffn.append(entry)
    return {
        "shape": {**dataclasses.asdict(shape), "d_ff": shape.ffn_dim},
        "scheme": scheme.describe(),
        "matrices": [
            {**r, "gamma_eff": show(r["gamma_eff"]), "gamma_eff_value": float(r["gamma_eff"])}
            for r in rows
        ],
        "ffn": ffn,
        "assumptions": luo_assumptions(shape),
        "rmsnorm": {
            "eps": eps_value,
            "gamma_eps": rmsnorm_gamma_threshold(shape.d_model, eps_value),
            "embedding_rms2_over_eps": emb["sigma"] ** 2 / eps_value,
            "output_rms": 1 / math.sqrt(1 + eps_value / emb["sigma"] ** 2),
        },
    }
