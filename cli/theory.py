"""``smallinit theory ...``: tables of exact results.

Handlers import the sympy-based modules inside themselves, so ``smallinit --help`` stays
fast. Every command prints a readable table, or the same content as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
from fractions import Fraction
from typing import Any

from smallinit.cli.util import (
    add_command,
    add_group,
    add_json_option,
    finite_float,
    float_list,
    positive_float,
    positive_int,
    positive_int_list,
    print_json,
)

# ----------------------------------------------------------------------------- helpers
#: Largest |value| and exponent accepted on the command line: an exact rational with a
#: million-digit numerator would make sympy's exact arithmetic run for hours.
EXACT_LIMIT = 10**6
EXPONENT_LIMIT = 30


def exact_number(text: str) -> Fraction:
    """A number read exactly: ``0.5``, ``1/2``, ``-0.25`` or ``1e-3``, with
    |value| <= 1e6 and a decimal exponent of at most 30 digits' scale."""
    cleaned = text.strip()
    mantissa, _, exponent = cleaned.lower().partition("e")
    try:
        if exponent and abs(int(exponent)) > EXPONENT_LIMIT:
            raise argparse.ArgumentTypeError(
                f"{text!r} is out of range; use numbers between -1e6 and 1e6 with "
                f"exponents of at most {EXPONENT_LIMIT}"
            )
        value = Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number; give e.g. 0.5, 1/2 or 1e-3"
        ) from None
    if abs(value) > EXACT_LIMIT or value.denominator > 10**EXPONENT_LIMIT:
        raise argparse.ArgumentTypeError(
            f"{text!r} is out of range; use numbers between -1e6 and 1e6 with at most "
            f"{EXPONENT_LIMIT} decimal places"
        )
    return value


def part_gamma(text: str) -> tuple[str, float]:
    """``PART=GAMMA`` for a per-part γ override."""
    part, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r} is not PART=GAMMA (e.g. qk=1.0)")
    return part.strip(), float(exact_number(value))


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """Columns padded to their widest cell; numbers right-aligned."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)
    ]
    numeric = [all(_is_number(r[i]) for r in cells) and cells for i in range(len(headers))]

    def fmt(row: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if numeric[i] else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()

    lines = [fmt(headers), fmt(["-" * w for w in widths])]
    lines += [fmt(r) for r in cells]
    return "\n".join(lines)


def _is_number(text: str) -> bool:
    try:
        Fraction(text)
    except (ValueError, ZeroDivisionError):
        return False
    return True


def _g(value: float) -> str:
    return f"{value:.4g}"


# ----------------------------------------------------------------------------- classify
REGIME_WORDS = {
    "linear": "relative change of the input weights → 0 as m → ∞ (kernel-like)",
    "critical": "relative change O(1) (e.g. mean field)",
    "condensed": "relative change → ∞; neurons gather on a few orientations",
}


def cmd_classify(args: argparse.Namespace) -> int:
    from smallinit.theory import phase

    tol = phase.DEFAULT_TOL if args.tol is None else args.tol
    point = phase.PhasePoint.at(args.gamma, args.gamma_prime, tol=tol)
    data = {**point.as_dict(), "tol": tol}
    if args.json:
        print_json(data)
        return 0
    print(f"γ = {data['gamma']}, γ' = {data['gamma_prime']}")
    print(f"Δ = γ − 1 − max(γ', 0) = {data['delta']}")
    within = point.regime == "critical" and not point.delta.is_zero
    print(
        f"regime: {point.regime} ({REGIME_WORDS[point.regime]})"
        + (f" [|Δ| <= tol = {tol:g}]" if within else "")
    )
    print(f"predicted slope S_w = d ln RD / d ln m: {point.slope_text()}")
    return 0


# ----------------------------------------------------------------------------- schemes
def _scheme_rows(param: Fraction | None) -> list[dict[str, Any]]:
    import sympy as sp

    from smallinit.theory import phase
    from smallinit.theory.exact import show

    rows = []
    for s in phase.SCHEMES.values():
        if param is not None:
            s = s.at(param)
        g, gp = s.coordinates()
        row = {
            "name": s.name,
            "label": s.label,
            "alpha": sp.sstr(s.alpha),
            "beta1": sp.sstr(s.beta1),
            "beta2": sp.sstr(s.beta2),
            "scaling": "d = m/r" if s.scaling == "proportional" else "d fixed",
            "gamma": show(g),
            "gamma_prime": show(gp),
            "source": s.source,
        }
        if s.param is None:
            point = s.point()
            row.update(delta=show(point.delta), regime=point.regime, slope=point.slope_text())
        else:
            row.update(
                delta=sp.sstr(sp.simplify(phase.delta(g, gp))),
                regime="; ".join(
                    f"{regime}: {phase.describe_set(where, s.param)}"
                    for where, regime in s.regimes()
                ),
                slope="by regime",
            )
        rows.append(row)
    return rows


def cmd_schemes(args: argparse.Namespace) -> int:
    rows = _scheme_rows(args.param)
    if args.json:
        print_json(rows)
        return 0
    print(
        table(
            ["scheme", "α", "β1", "β2", "widths", "γ", "γ'", "Δ", "regime", "S_w"],
            [
                [
                    r["label"],
                    r["alpha"],
                    r["beta1"],
                    r["beta2"],
                    r["scaling"],
                    r["gamma"],
                    r["gamma_prime"],
                    r["delta"],
                    r["regime"],
                    r["slope"],
                ]
                for r in rows
            ],
        )
    )
    return 0


# ----------------------------------------------------------------------------- transformer
def _init_scheme(args: argparse.Namespace):
    from smallinit.theory.init_rules import InitScheme, parse_scheme

    if args.scheme is not None:
        if args.gamma is not None or args.override or args.depth_scaling:
            raise ValueError(
                "give either --scheme or --gamma (with --override and --depth-scaling), not both"
            )
        return parse_scheme(args.scheme)
    if args.gamma is None:
        raise ValueError("give --gamma G (the γ rule) or --scheme NAME (e.g. nanogpt)")
    return InitScheme(
        "gamma",
        gamma=float(args.gamma),
        overrides=tuple(args.override or ()),
        depth_scaling=args.depth_scaling,
    )


def cmd_transformer(args: argparse.Namespace) -> int:
    from smallinit.theory import transformer

    shape = transformer.TransformerShape(
        d_model=args.d_model,
        d_ff=args.d_ff,
        n_heads=args.n_heads,
        n_layers=args.n_layers,
        vocab=args.vocab,
        mlp=args.mlp,
        gated_attention=args.gated_attention,
        tie_embeddings=args.tie_embeddings,
    )
    rep = transformer.report(shape, _init_scheme(args), eps=args.eps)
    if args.json:
        print_json(rep)
        return 0
    s = rep["shape"]
    heads = f" n_heads={s['n_heads']}" if s["n_heads"] is not None else ""
    print(
        f"transformer d_model={s['d_model']} d_ff={s['d_ff']}{heads} "
        f"n_layers={s['n_layers']} vocab={s['vocab']} mlp={s['mlp']}; "
        f"init {rep['scheme']}"
    )
    print()
    print(
        table(
            ["matrix", "part", "d_in", "d_out", "σ", "γ_eff"],
            [
                [r["name"], r["part"], r["d_in"], r["d_out"], _g(r["sigma"]), r["gamma_eff"]]
                for r in rep["matrices"]
            ],
        )
    )
    print()
    print(
        "FFN blocks on the phase diagram (m = d_ff hidden units, d = d_model inputs, α = 1; "
        "'width law': the scheme's σ as widths grow, 'at size': γ_eff as the rates)"
    )
    rows = []
    for block in rep["ffn"]:
        for view, label in (("width_law", "width law"), ("at_size", "at size")):
            for scaling, scaling_label in (("fixed", "d fixed"), ("proportional", "d ∝ m")):
                p = block[view][scaling]
                rows.append(
                    [
                        block["name"],
                        label,
                        scaling_label,
                        p["gamma"],
                        p["gamma_prime"],
                        p["delta"],
                        p["regime"],
                        p["slope"],
                    ]
                )
    print(table(["block", "view", "widths", "γ", "γ'", "Δ", "regime", "S_w"], rows))
    norm = rep["rmsnorm"]
    print()
    print(
        f"RMSNorm: γ_ε(d={s['d_model']}, ε={norm['eps']:g}) = {norm['gamma_eps']:.4f}; "
        f"embedding σ²/ε = {norm['embedding_rms2_over_eps']:.4g}; "
        f"norm output RMS at init = {norm['output_rms']:.4f}"
    )
    print()
    print("Luo et al.'s assumptions for this FFN:")
    for a in rep["assumptions"]:
        print(f"  [{a['holds']}] {a['assumption']}: {a['note']}")
    return 0


# ----------------------------------------------------------------------------- eps
def cmd_eps(args: argparse.Namespace) -> int:
    from smallinit.theory import transformer as tr

    widths = args.d_model
    data: dict[str, Any] = {"eps": args.eps, "thresholds": [], "points": []}
    for d in widths:
        data["thresholds"].append(
            {"d_model": d, "gamma_eps": tr.rmsnorm_gamma_threshold(d, args.eps)}
        )
        for g in args.gamma:
            ratio = tr.saturation_ratio(d, g, args.eps)  # ValueError outside floats
            point = {
                "d_model": d,
                "gamma": g,
                "rms2": ratio * args.eps,
                "ratio": ratio,
                "output_rms": tr.rmsnorm_output_rms(d, g, args.eps),
            }
            point["state"] = "normalizing" if point["ratio"] > 1 else "saturated"
            if args.match_d_model is not None:
                point["match_eps"] = tr.matching_eps(d, args.match_d_model, g, args.eps)
            data["points"].append(point)
    if args.json:
        print_json(data)
        return 0
    print(f"RMSNorm saturation threshold γ_ε = ln(1/ε)/(2 ln d), ε = {args.eps:g}")
    print(
        table(
            ["d_model", "γ_ε"],
            [[t["d_model"], f"{t['gamma_eps']:.4f}"] for t in data["thresholds"]],
        )
    )
    print()
    headers = ["d_model", "γ", "d^-2γ", "d^-2γ/ε", "output RMS", "state"]
    if args.match_d_model is not None:
        headers.append(f"ε matching d={args.match_d_model}")
    rows = []
    for p in data["points"]:
        row = [
            p["d_model"],
            _g(p["gamma"]),
            _g(p["rms2"]),
            _g(p["ratio"]),
            f"{p['output_rms']:.4f}",
            p["state"],
        ]
        if args.match_d_model is not None:
            row.append(_g(p["match_eps"]))
        rows.append(row)
    print(table(headers, rows))
    return 0


# ----------------------------------------------------------------------------- multiplicity
def cmd_multiplicity(args: argparse.Namespace) -> int:
    from smallinit.theory import condensation

    rows = condensation.multiplicity_table()
    if args.json:
        print_json(rows)
        return 0
    print(
        table(
            ["activation", "σ(x)", "p", "σ^(p)(0)", "note"],
            [
                [
                    r["activation"],
                    r["formula"],
                    r["p"] if r["covered"] else "-",
                    r["leading"] or "-",
                    r["note"],
                ]
                for r in rows
            ],
        )
    )
    return 0


# ----------------------------------------------------------------------------- register
def register(subparsers) -> None:
    commands = add_group(
        subparsers,
        "theory",
        help="exact phase diagram, closed forms and the transformer mapping",
        description="Exact results derived with sympy (docs/science.md §2-§5). Numbers are "
        "read exactly (0.1 is 1/10; 1/2 is allowed). A negative value needs '=': "
        "--gamma-prime=-1/2.",
    )
    p = add_command(
        commands,
        "classify",
        cmd_classify,
        help="regime and predicted S_w interval of a point (γ, γ')",
        description="Δ(γ, γ') = γ − 1 − max(γ', 0) decides the regime of the two-layer ReLU "
        "net (docs/science.md §2): linear Δ < 0, critical Δ = 0, condensed Δ > 0. The predicted RD "
        "slope is S_w ≤ Δ (linear), S_w ≥ Δ/2 (condensed), 0 (critical).",
    )
    p.add_argument(
        "--gamma",
        type=exact_number,
        required=True,
        metavar="G",
        help="γ = lim −ln κ / ln m (horizontal axis)",
    )
    p.add_argument(
        "--gamma-prime",
        type=exact_number,
        required=True,
        metavar="G2",
        help="γ' = lim −ln κ' / ln m (vertical axis)",
    )
    p.add_argument(
        "--tol",
        type=finite_float,
        default=None,
        metavar="T",
        help="|Δ| <= T counts as critical, so that a γ derived by float "
        "arithmetic (1.1 − 1 = 0.10000000000000009) does not classify by "
        "rounding noise; 0 classifies exactly (default: 1e-09, "
        "smallinit.theory.phase.DEFAULT_TOL)",
    )
    add_json_option(p)

    p = add_command(
        commands,
        "schemes",
        cmd_schemes,
        help="the named initializations on the phase diagram",
        description="LeCun, He, Xavier, NTK, mean field, the E et al. diagonal family and "
        "the γ rule for an FFN (d fixed, d ∝ m): (α, β1, β2) in m and d, and the coordinates "
        "derived from them as m → ∞ (docs/science.md §2, §5). Families are shown with the regime "
        "as a function of their parameter unless --param is given.",
    )
    p.add_argument(
        "--param",
        type=exact_number,
        default=None,
        metavar="V",
        help="evaluate the one-parameter families at this value (γ, or s)",
    )
    add_json_option(p)

    p = add_command(
        commands,
        "transformer",
        cmd_transformer,
        help="σ and γ_eff of every matrix; FFN blocks on the phase diagram",
        description="For a transformer's sizes and an init scheme: every weight matrix's σ "
        "and effective γ = −ln σ / ln d_in (docs/science.md §1), each FFN block's phase-diagram "
        "coordinates with d_model fixed and with proportional widths, the predicted regime "
        "and S_w interval, and the RMSNorm saturation threshold (docs/science.md §5).",
    )
    p.add_argument("--d-model", type=positive_int, required=True, metavar="D", help="model width")
    p.add_argument(
        "--d-ff",
        type=positive_int,
        default=None,
        metavar="F",
        help="FFN width (default: 4·d_model for gelu/relu, 8/3·d_model rounded "
        "up to 64 for swiglu, as in smallinit llm)",
    )
    p.add_argument(
        "--n-heads",
        type=positive_int,
        default=None,
        metavar="H",
        help="attention heads (default: d_model/64, at least 1)",
    )
    p.add_argument("--n-layers", type=positive_int, default=4, metavar="L", help="blocks")
    p.add_argument("--vocab", type=positive_int, default=4096, metavar="V", help="vocabulary size")
    p.add_argument("--mlp", choices=("swiglu", "gelu", "relu"), default="swiglu", help="FFN kind")
    p.add_argument(
        "--gated-attention", action="store_true", help="add the attention gate W_g (part attn_gate)"
    )
    p.add_argument("--tie-embeddings", action="store_true", help="no separate LM head")
    p.add_argument(
        "--gamma", type=exact_number, default=None, metavar="G", help="the γ rule σ = d_in^-γ"
    )
    p.add_argument(
        "--override",
        type=part_gamma,
        action="append",
        metavar="PART=G",
        help="per-part γ (embedding, qk, vo, attn_gate, mlp, mlp_out, head; q or "
        "k alone, qk being both); repeatable",
    )
    p.add_argument(
        "--depth-scaling", action="store_true", help="residual-output projections / √(2·n_layers)"
    )
    p.add_argument(
        "--scheme",
        default=None,
        metavar="NAME",
        help="a named scheme instead of --gamma: nanogpt, fixed[:STD], "
        "megatron[:STD], mitchell, mup[:BASE], xavier, kaiming, or "
        "gamma:G[,PART=G...][,depth]",
    )
    p.add_argument("--eps", type=positive_float, default=1e-5, metavar="E", help="RMSNorm ε")
    add_json_option(p)

    p = add_command(
        commands,
        "eps",
        cmd_eps,
        help="RMSNorm saturation threshold γ_ε and the ε that matches another width",
        description="With embeddings at std d^-γ, mean(x²) ≈ d^-2γ, and RMSNorm stops "
        "normalizing once d^-2γ ≲ ε, i.e. γ ≳ γ_ε = ln(1/ε)/(2 ln d) (docs/science.md §5). "
        "--match-d-model gives the ε at which a width-d_model model has the same "
        "d^-2γ/ε as that width at --eps.",
    )
    p.add_argument(
        "--d-model", type=positive_int_list, required=True, metavar="D[,D...]", help="model widths"
    )
    p.add_argument("--eps", type=positive_float, default=1e-5, metavar="E", help="RMSNorm ε")
    p.add_argument(
        "--gamma",
        type=float_list,
        default=[0.5, 1.0],
        metavar="G[,G...]",
        help="γ values for the saturation table",
    )
    p.add_argument(
        "--match-d-model",
        type=positive_int,
        default=None,
        metavar="D",
        help="the (larger) width whose saturation at --eps is to be matched",
    )
    add_json_option(p)

    p = add_command(
        commands,
        "multiplicity",
        cmd_multiplicity,
        help="multiplicity p of the activations (initial condensation)",
        description="p = min{k ≥ 1: σ^(k)(0) ≠ 0}, from one-sided limits (docs/science.md "
        "§3). With small init a layer condenses onto at most 2p orientations. ReLU is not "
        "covered.",
    )
    add_json_option(p)
