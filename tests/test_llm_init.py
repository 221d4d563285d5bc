"""Init schemes: every matrix's empirical std against theory's σ, on our model and HF models."""

from __future__ import annotations

import math

import pytest
import torch

from smallinit.llm.config import ModelConfig
from smallinit.llm.model.init import (
    apply_init,
    init_table,
    matrix_table,
    truncated_std_factor,
)
from smallinit.llm.model.transformer import Transformer
from smallinit.theory.init_rules import matrix_std, parse_scheme, truncation

SCHEMES = ["gamma:1.0", "gamma:0.5,qk=1.0,mlp_out=0.8,attn_gate=0.7,depth", "nanogpt",
           "fixed:0.05", "megatron:0.02", "mitchell", "mup:32", "xavier", "kaiming"]
SIZES = dict(vocab_size=300, context=40, d_model=64, n_layers=3, n_heads=4, d_ff=192)


def check_stats(model, scheme_text: str, n_layers: int) -> int:
    """Every matrix: mean ≈ 0 and std ≈ σ·(truncation factor), within 5 standard errors
    (std of a sample std ≈ σ/√(2n)); returns how many matrices were checked."""
    scheme = parse_scheme(scheme_text)
    factor = truncated_std_factor(truncation(scheme))
    specs = matrix_table(model)
    for spec in specs:
        values = spec.param.detach()[spec.index].double().flatten()
        sigma = matrix_std(scheme, spec.part, spec.d_in, spec.d_out, n_layers=n_layers,
                           layer=spec.layer, residual_out=spec.residual_out) * factor
        n = values.numel()
        assert abs(values.std().item() / sigma - 1) < 5 / math.sqrt(2 * n), spec.name
        assert abs(values.mean().item()) < 5 * sigma / math.sqrt(n), spec.name
        if truncation(scheme) is not None:
            assert values.abs().max().item() <= truncation(scheme) * sigma / factor + 1e-12
    return len(specs)


def check_norms_and_biases(model) -> None:
    covered = {id(s.param) for s in matrix_table(model)}
    for name, p in model.named_parameters():
        if id(p) in covered:
            continue
        expected = 0.0 if name.endswith("bias") else 1.0
        assert torch.all(p == expected), name


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("variant", [
    {}, dict(norm="layernorm", positions="learned", mlp="gelu", bias=True, tie_embeddings=True),
    dict(gated_attention=True), dict(gated_attention=True, gate_kind="headwise")])
def test_own_model_matrix_stds_follow_the_rule(scheme, variant):
    model = Transformer(ModelConfig(**SIZES, **variant), scheme, seed=0)
    n = check_stats(model, scheme, SIZES["n_layers"])
    per_layer = 4 + (1 if variant.get("gated_attention") else 0) + \
        (2 if variant.get("mlp", "swiglu") == "swiglu" else 1) + 1
    extra = (1 if variant.get("positions") == "learned" else 0) + \
        (0 if variant.get("tie_embeddings") else 1)
    assert n == 1 + extra + 3 * per_layer
    check_norms_and_biases(model)


def test_parts_and_fan_in_of_our_model():
    model = Transformer(ModelConfig(**SIZES), "gamma:1.0")
    by_name = {s.name: s for s in matrix_table(model)}
    down = by_name["blocks.2.mlp.down.weight"]
    assert (down.part, down.d_in, down.d_out, down.layer, down.residual_out) == \
        ("mlp_out", 192, 64, 2, True)  # true fan-in of the down projection is d_ff
    assert by_name["blocks.0.attn.qkv.weight[k]"].part == "qk"
    assert by_name["blocks.0.attn.qkv.weight[v]"].part == "vo"
    assert by_name["blocks.0.attn.proj.weight"].residual_out
    assert by_name["head.weight"].d_in == 64 and by_name["tok_emb.weight"].d_in == 64
    # γ = 1: σ = 1/d_in exactly where it matters
    w = down.param.detach()
    assert abs(w.std().item() * 192 - 1) < 0.05


def test_depth_scaling_and_overrides():
    model = Transformer(ModelConfig(**SIZES), "gamma:0.5,qk=1.0,depth", seed=0)
    rows = {r["name"]: r for r in init_table(model, "gamma:0.5,qk=1.0,depth")}
    assert rows["blocks.0.attn.qkv.weight[q]"]["gamma_eff"] == pytest.approx(1.0)
    assert rows["blocks.0.attn.qkv.weight[v]"]["gamma_eff"] == pytest.approx(0.5)
    assert rows["blocks.0.attn.proj.weight"]["std"] == pytest.approx(64 ** -0.5 / math.sqrt(6))
    assert rows["blocks.0.mlp.up.weight[gate]"]["std"] == pytest.approx(64 ** -0.5)


def test_seeded_and_device_independent_draws():
    a = Transformer(ModelConfig(**SIZES), "gamma:1.0", seed=5)
    b = Transformer(ModelConfig(**SIZES), "gamma:1.0", seed=5)
    c = Transformer(ModelConfig(**SIZES), "gamma:1.0", seed=6)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters(),
                                  strict=True):
        assert torch.equal(pa, pb), name
        if pa.dim() == 2:
            assert not torch.equal(pa, pc), name


def test_tied_head_shares_the_embedding_draw():
    model = Transformer(ModelConfig(**SIZES, tie_embeddings=True), "gamma:1.0")
    assert model.head.weight is model.tok_emb.weight
    assert "head.weight" not in {s.name for s in matrix_table(model)}


# ----------------------------------------------------------------------------- Hugging Face
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()
HF = ModelConfig(**SIZES)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_hf_gpt2_matrix_stds_follow_the_rule(scheme):
    from smallinit.llm.model.hf import gpt2_from

    model = apply_init(gpt2_from(HF), scheme, seed=0)
    # wte, wpe, and per layer q, k, v, attn c_proj, c_fc, mlp c_proj (lm_head tied to wte)
    assert check_stats(model, scheme, 3) == 2 + 3 * 6
    check_norms_and_biases(model)


def test_hf_gpt2_conv1d_orientation():
    """GPT-2's Conv1D stores (in, out): the FFN down projection is (d_ff, d_model), so
    its fan-in is d_ff, and c_attn's q, k, v are column blocks."""
    from smallinit.llm.model.hf import gpt2_from

    model = apply_init(gpt2_from(HF), "gamma:1.0", seed=0)
    by_name = {s.name: s for s in matrix_table(model)}
    down = by_name["transformer.h.1.mlp.c_proj.weight"]
    assert tuple(down.param.shape) == (192, 64)
    assert (down.part, down.d_in, down.d_out, down.residual_out) == ("mlp_out", 192, 64, True)
    assert abs(down.param.detach().std().item() * 192 - 1) < 0.05
    q = by_name["transformer.h.0.attn.c_attn.weight[q]"]
    assert q.shape == (64, 64) and q.part == "qk"
    assert by_name["transformer.h.0.attn.c_attn.weight[v]"].part == "vo"
    assert by_name["transformer.h.0.attn.c_proj.weight"].residual_out


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("tied", [False, True])
def test_hf_llama_matrix_stds_follow_the_rule(scheme, tied):
    from smallinit.llm.model.hf import llama_from

    cfg = ModelConfig(**SIZES, tie_embeddings=tied)
    model = apply_init(llama_from(cfg), scheme, seed=0)
    # embed (+ lm_head unless tied), and per layer q, k, v, o, gate, up, down
    assert check_stats(model, scheme, 3) == (1 if tied else 2) + 3 * 7
    check_norms_and_biases(model)


@pytest.mark.parametrize("make", ["gpt2_from", "llama_from"])
def test_hf_records_orient_every_block_as_output_rows(make):
    """Same record type as our model's: every HF block read as (d_out, d_in) by rows_out
    (GPT-2's Conv1D blocks are stored transposed), with the roles of theory's table."""
    from smallinit.llm.model import hf

    model = getattr(hf, make)(ModelConfig(**SIZES))
    table = matrix_table(model)
    for spec in table:
        assert tuple(spec.rows_out.shape) == (spec.d_out, spec.d_in), spec.name
    kinds = [s.kind for s in table if s.layer == 1]
    ffn = ["mlp.up", "mlp.down"] if make == "gpt2_from" else ["mlp.gate", "mlp.up", "mlp.down"]
    assert kinds == ["attn.q", "attn.k", "attn.v", "attn.o", *ffn]
    if make == "gpt2_from":  # q is the first column block of c_attn
        q = next(s for s in table if s.kind == "attn.q" and s.layer == 0)
        w = model.transformer.h[0].attn.c_attn.weight
        assert torch.equal(q.rows_out, w[:, :SIZES["d_model"]].T)


def test_hf_llama_three_lines_and_forward():
    from transformers import LlamaConfig, LlamaForCausalLM

    from smallinit.llm import apply_init as apply

    model = apply(LlamaForCausalLM(LlamaConfig(
        vocab_size=300, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, bos_token_id=0, eos_token_id=0,
        pad_token_id=0)), "gamma:1.0")
    assert model.model.layers[0].mlp.down_proj.weight.std().item() == \
        pytest.approx(1 / 192, rel=0.05)
    out = model(torch.randint(0, 300, (1, 10), generator=torch.Generator().manual_seed(0))).logits
    assert out.shape == (1, 10, 300)
    # γ = 1 everywhere: logits tiny, next-token distribution ≈ uniform
    assert out.abs().max().item() < 0.5


def test_unknown_model_is_rejected():
    with pytest.raises(ValueError, match="does not know how to read"):
        apply_init(torch.nn.Linear(3, 3), "gamma:1.0")


# ----------------------------------------------------------------------------- theory agrees
AGREE_SIZES = [
    dict(vocab_size=300, context=40, d_model=64, d_ff=192, n_heads=4, n_layers=3),
    dict(vocab_size=200, context=16, d_model=96, n_heads=2, n_layers=2),  # swiglu default d_ff
    dict(vocab_size=128, context=24, d_model=48, n_heads=3, n_layers=2, mlp="gelu",
         norm="layernorm", positions="learned", tie_embeddings=True, bias=True),
    dict(vocab_size=100, context=16, d_model=64, n_heads=8, n_layers=4, gated_attention=True,
         gate_kind="headwise"),
    dict(vocab_size=50, context=12, d_model=32, d_ff=100, n_heads=2, n_layers=2, mlp="gelu",
         gated_attention=True, tie_embeddings=True, positions="learned"),
]
AGREE_SCHEMES = ["gamma:1.0", "gamma:0.25", "gamma:0.75,vo=0.5",
                 "gamma:0.5,qk=1.0,mlp_out=0.8,attn_gate=0.7,embedding=0.3,head=1.2,depth",
                 "gamma:1.0,depth", "nanogpt", "fixed:0.05", "megatron:0.02", "mitchell",
                 "mup:32", "xavier", "kaiming"]


def theory_shape(cfg: ModelConfig):
    """The theory shape of a model config; n_heads only where a σ depends on it."""
    from smallinit.theory.transformer import TransformerShape

    headwise = cfg.gated_attention and cfg.gate_kind == "headwise"
    return TransformerShape(
        d_model=cfg.d_model, d_ff=cfg.d_ff, n_heads=cfg.n_heads if headwise else None,
        n_layers=cfg.n_layers, vocab=cfg.vocab_size, mlp=cfg.mlp,
        gated_attention=cfg.gated_attention, tie_embeddings=cfg.tie_embeddings,
        gate_kind=cfg.gate_kind, positions=cfg.positions, context=cfg.context)


def test_agreement_covers_every_scheme():
    from smallinit.theory.init_rules import SCHEMES as ALL_SCHEMES

    assert {parse_scheme(s).name for s in AGREE_SCHEMES} == set(ALL_SCHEMES)


@pytest.mark.parametrize("sizes", AGREE_SIZES)
@pytest.mark.parametrize("scheme", AGREE_SCHEMES)
def test_model_table_agrees_with_theory_transformer_table(sizes, scheme):
    """Matrix by matrix, the model's declared table and theory's formula table give the same
    (part, d_in, d_out, σ) for every (kind, layer): two readings of docs/science.md §1 and of
    the d_ff default that must not drift apart."""
    from smallinit.theory.transformer import matrices

    cfg = ModelConfig(**sizes)
    model = Transformer(cfg)
    for spec in model.matrices():  # the declarations describe the tensors as built
        assert tuple(spec.rows_out.shape) == spec.shape == (spec.d_out, spec.d_in), spec.name
    ours = {}
    for r in init_table(model, scheme):
        assert (r["kind"], r["layer"]) not in ours
        ours[(r["kind"], r["layer"])] = (r["part"], r["d_in"], r["d_out"], r["std"])
    theirs = {}
    for row in matrices(theory_shape(cfg), parse_scheme(scheme)):
        for layer in row["layers"] or [0]:
            assert (row["kind"], layer) not in theirs
            theirs[(row["kind"], layer)] = (row["part"], row["d_in"], row["d_out"],
                                            float(row["sigma"]))
    assert ours == theirs


def test_reference_values_recorded_before_the_table():
    """Weights (sha256 of their bytes), init_table rows and the traced / FFN measurements of
    the code before the matrix table (tests/data/make_matrix_reference.py) are unchanged."""
    import importlib.util
    import json
    from pathlib import Path

    data = Path(__file__).parent / "data"
    spec = importlib.util.spec_from_file_location("make_matrix_reference",
                                                  data / "make_matrix_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    want = json.loads((data / "matrix_reference.json").read_text())
    got = json.loads(json.dumps(module.compute(), default=float))
    for key in want:
        assert got[key] == want[key], key
