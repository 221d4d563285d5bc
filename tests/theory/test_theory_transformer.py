"""Transformer mapping (docs/science.md §5): per-matrix σ and γ_eff, FFN coordinates, RMSNorm."""

import math

import pytest
import sympy as sp

from smallinit.theory import transformer as T
from smallinit.theory.init_rules import (
    PARTS,
    SCHEMES,
    InitScheme,
    effective_gamma_expr,
    matrix_std,
    matrix_std_expr,
)

R = sp.Rational


def test_general_ffn_rate_map():
    g_down, g_up = T._g_down, T._g_up
    assert T.ffn_rate_map("fixed") == (g_down, g_down)
    assert T.ffn_rate_map("proportional") == (g_down + g_up, g_down - g_up)


@pytest.mark.parametrize(
    "gamma,prop_regime",
    [("0.25", "linear"), ("0.5", "critical"), ("0.75", "condensed"), ("1.0", "condensed")],
)
def test_gamma_rule_ffn_in_both_width_scalings(gamma, prop_regime):
    g = R(gamma)
    shape = T.TransformerShape(d_model=256, mlp="gelu")
    (block,) = T.ffn_blocks(shape, InitScheme("gamma", gamma=float(gamma)))
    for view in ("width_law", "at_size"):  # identical for a pure power law
        fixed, prop = block[view]["fixed"], block[view]["proportional"]
        assert (fixed.gamma, fixed.gamma_prime) == (g, g)  # d fixed → (γ, γ)
        assert fixed.regime == "linear"
        assert (prop.gamma, prop.gamma_prime) == (2 * g, 0)  # proportional → (2γ, 0)
        assert prop.regime == prop_regime
        assert prop.delta == 2 * g - 1


def test_named_scheme_width_laws():
    shape = T.TransformerShape(d_model=512, mlp="gelu", n_layers=6)

    def law(name, scaling):
        p = T.ffn_blocks(shape, InitScheme(name))[0]["width_law"][scaling]
        return p.gamma, p.gamma_prime

    assert law("nanogpt", "proportional") == (0, 0)  # a fixed std has rate 0
    assert law("xavier", "fixed") == (1, 0) == law("xavier", "proportional")
    for name in ("kaiming", "mitchell", "mup"):
        assert law(name, "fixed") == (R(1, 2), R(1, 2))
        assert law(name, "proportional") == (1, 0)


def test_matrices_table():
    shape = T.TransformerShape(d_model=768, d_ff=3072, n_layers=12, mlp="gelu")
    rows = {r["name"]: r for r in T.matrices(shape, InitScheme("gamma", gamma=1.0))}
    assert rows["blocks.*.mlp.down"]["d_in"] == 3072  # the true fan-in (docs/science.md §1)
    assert rows["embedding"]["d_in"] == 768 and rows["head"]["d_in"] == 768
    assert rows["blocks.*.mlp.down"]["sigma"] == pytest.approx(1 / 3072)
    assert all(r["gamma_eff"] == 1 for r in rows.values())
    nano = {r["name"]: r for r in T.matrices(shape, InitScheme("nanogpt"))}
    assert float(nano["blocks.*.attn.q"]["gamma_eff"]) == pytest.approx(0.589, abs=1e-3)
    assert nano["blocks.*.attn.o"]["sigma"] == pytest.approx(0.02 / math.sqrt(24))
    mitchell = {r["name"] for r in T.matrices(shape, InitScheme("mitchell"))}
    assert {f"blocks.{i}.mlp.down" for i in range(12)} <= mitchell  # σ varies per layer
    assert "blocks.*.mlp.up" in mitchell


def test_optional_matrices():
    shape = T.TransformerShape(d_model=128, gated_attention=True, tie_embeddings=True)
    names = {r["name"] for r in T.matrices(shape, InitScheme("gamma", gamma=0.5))}
    assert "blocks.*.attn.gate" in names and "blocks.*.mlp.gate" in names
    assert "head" not in names
    assert T.TransformerShape(d_model=256).ffn_dim == 704  # swiglu default, as in llm
    assert T.TransformerShape(d_model=256, mlp="gelu").ffn_dim == 1024


def test_exact_sigma_rule_agrees_with_the_float_rule():
    for name in SCHEMES:
        scheme = (
            InitScheme(name, gamma=0.75, overrides=(("qk", 1.25),))
            if name == "gamma"
            else InitScheme(name)
        )
        for part in PARTS:
            for layer in (0, 2):
                kw = {"n_layers": 3, "layer": layer, "residual_out": part in ("vo", "mlp_out")}
                exact = matrix_std_expr(scheme, part, 96, 384, **kw)
                assert float(exact) == pytest.approx(
                    matrix_std(scheme, part, 96, 384, **kw), rel=1e-12
                )
    assert effective_gamma_expr(sp.Integer(768) ** R(-1, 2), 768) == R(1, 2)


@pytest.mark.parametrize(
    "d,spec,exact", [(256, 1.04, 1.038103), (512, 0.92, 0.922758), (2048, 0.76, 0.754984)]
)
def test_rmsnorm_threshold_spec_values(d, spec, exact):
    value = T.rmsnorm_gamma_threshold(d, 1e-5)
    assert value == pytest.approx(exact, abs=1e-6)  # ln(1e5) / (2 ln d)
    # docs/science.md §5 quotes these to two decimals (0.754984 appears there as 0.76)
    assert value == pytest.approx(spec, abs=0.0051)


def test_rmsnorm_symbolic_threshold_and_matching():
    g, dd, e = sp.symbols("gamma d epsilon", positive=True)
    assert sp.simplify(T.gamma_eps_expr() - sp.log(1 / e) / (2 * sp.log(dd))) == 0
    # at γ = γ_ε the embedding RMS² equals ε
    assert T.saturation_ratio(512, T.rmsnorm_gamma_threshold(512, 1e-5), 1e-5) == pytest.approx(1.0)
    eps_small = T.matching_eps(256, 2048, 1.0, 1e-5)
    assert T.saturation_ratio(256, 1.0, eps_small) == pytest.approx(
        T.saturation_ratio(2048, 1.0, 1e-5)
    )
    assert T.rmsnorm_output_rms(2048, 1.0, 1e-5) < 0.2 < 0.99 < T.rmsnorm_output_rms(256, 0.5, 1e-5)


@pytest.mark.parametrize(
    "call,fragment",
    [
        (lambda: T.TransformerShape(d_model=0), "d_model=0"),
        (lambda: T.TransformerShape(d_model=-4), "d_model=-4"),
        (lambda: T.TransformerShape(d_model=96, n_heads=5), "does not divide"),
        (lambda: T.TransformerShape(d_model=64, mlp="moe"), "mlp='moe'"),
        (
            lambda: T.TransformerShape(d_model=64, gated_attention=True, gate_kind="headwise"),
            "needs n_heads",
        ),
        (lambda: T.TransformerShape(d_model=64, gate_kind="rowwise"), "gate_kind='rowwise'"),
        (lambda: T.TransformerShape(d_model=64, positions="learned"), "needs context"),
        (lambda: T.TransformerShape(d_model=64, positions="alibi"), "positions='alibi'"),
        (lambda: T.default_ffn_dim(64, "moe"), "mlp='moe'"),
        (lambda: T.rmsnorm_gamma_threshold(256, 0), "eps=0"),
        (lambda: T.rmsnorm_gamma_threshold(256, -1e-5), "eps=-1e-05"),
        (lambda: T.rmsnorm_gamma_threshold(1, 1e-5), "d=1"),
        (lambda: T.saturation_ratio(256, "abc", 1e-5), "gamma='abc'"),
        (lambda: T.report(T.TransformerShape(64), "gamma:abc"), "not a number"),
    ],
)
def test_bad_inputs_are_one_line_errors(call, fragment):
    with pytest.raises(ValueError, match=fragment) as err:
        call()
    assert "\n" not in str(err.value)


def test_report_is_plain_data():
    import json

    rep = T.report(T.TransformerShape(d_model=256, mlp="gelu"), "gamma:1.0")
    text = json.dumps(rep, allow_nan=False)
    assert rep["ffn"][0]["width_law"]["proportional"]["regime"] == "condensed"
    assert "silu" not in text and rep["assumptions"][1]["holds"] == "no"


def test_default_ffn_dim_rule():
    assert T.default_ffn_dim(256, "swiglu") == 704  # 8/3·256 = 682.7 → next multiple of 64
    assert T.default_ffn_dim(96, "swiglu") == 256
    assert T.default_ffn_dim(100, "gelu") == 400 == T.default_ffn_dim(100, "relu")
    for d in (64, 100, 256, 1000):  # a SwiGLU MLP keeps ≈ the parameters of a 4·d one
        ff = T.default_ffn_dim(d, "swiglu")
        assert ff % 64 == 0 and 8 * d / 3 <= ff < 8 * d / 3 + 64


def test_heads_are_not_invented_and_matter_only_for_a_headwise_gate():
    plain = T.report(T.TransformerShape(d_model=128), "gamma:1.0")
    assert plain["shape"]["n_heads"] is None
    sigmas = {
        n: [
            r["sigma"]
            for r in T.matrices(T.TransformerShape(d_model=128, n_heads=n), InitScheme("xavier"))
        ]
        for n in (None, 2, 8)
    }
    assert sigmas[None] == sigmas[2] == sigmas[8]
    head = T.TransformerShape(d_model=128, n_heads=8, gated_attention=True, gate_kind="headwise")
    (gate,) = [r for r in T.matrices(head, InitScheme("xavier")) if r["kind"] == "attn.gate"]
    assert (gate["d_in"], gate["d_out"]) == (128, 8)
    learned = T.TransformerShape(d_model=128, positions="learned", context=64)
    (pos,) = [r for r in T.matrices(learned, InitScheme("gamma")) if r["kind"] == "positions"]
    assert (pos["part"], pos["d_in"], pos["d_out"]) == ("embedding", 128, 64)
