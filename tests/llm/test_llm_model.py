"""The transformer: shapes, causality, gated attention, ε knob, attention paths, RoPE, configs."""

from __future__ import annotations

import math

import pytest
import torch

from smallinit.core.config import load_config
from smallinit.core.errors import ConfigError
from smallinit.llm.model.layers import apply_rope, rope_tables
from smallinit.llm.model.transformer import Transformer
from smallinit.llm.run_config import ModelConfig, RunConfig

SMALL = dict(vocab_size=97, context=24, d_model=32, n_layers=2, n_heads=4)
VARIANTS = {
    "llama": {},
    "gpt2": dict(norm="layernorm", positions="learned", mlp="gelu", tie_embeddings=True, bias=True),
    "gated": dict(gated_attention=True),
    "gated-headwise": dict(gated_attention=True, gate_kind="headwise"),
}


def model_of(variant: str, scheme="gamma:0.5", **extra) -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig(**SMALL, **VARIANTS[variant], **extra), scheme, seed=1)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_forward_shapes_and_loss(variant):
    model = model_of(variant, scheme="gamma:1.0")
    idx, targets = torch.randint(0, 97, (2, 3, 24))
    logits, loss = model(idx, targets)
    assert logits.shape == (3, 24, 97)
    assert torch.isfinite(loss)
    # at γ = 1 the logits have variance ≈ d·σ_head² = 1/d: near-uniform, loss ≈ ln(vocab)
    assert abs(loss.item() - math.log(97)) < 0.1
    per_token = model.token_losses(idx, targets)
    assert per_token.shape == (3, 24)
    assert torch.allclose(per_token.mean(), loss, atol=1e-5)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_future_tokens_do_not_change_past_logits(variant):
    model = model_of(variant)
    idx = torch.randint(0, 97, (2, 24))
    changed = idx.clone()
    changed[:, 15:] = (changed[:, 15:] + 1 + torch.randint(0, 90, (2, 9))) % 97
    a, b = model(idx), model(changed)
    assert torch.allclose(a[:, :15], b[:, :15], atol=1e-6)
    assert not torch.allclose(a[:, 15:], b[:, 15:], atol=1e-3)  # the future did change


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_attention_weight_path_matches_sdpa(variant):
    model = model_of(variant, scheme="gamma:0.3")  # large init: non-trivial attention
    idx = torch.randint(0, 97, (2, 24))
    fast = model(idx)
    slow, _, weights = model(idx, need_weights=True)
    assert torch.allclose(fast, slow, atol=1e-5)
    assert len(weights) == 2 and weights[0].shape == (2, 4, 24, 24)
    w = weights[1]
    assert torch.allclose(w.sum(-1), torch.ones(2, 4, 24), atol=1e-5)
    assert torch.all(w.triu(1) == 0)  # no weight on future positions
    assert w[..., 1:, :].std() > 1e-3  # not all uniform


def test_gated_attention_with_neutral_gate_equals_plain_model():
    """Gate W_g = 0 gives sigmoid(0) = 1/2 on every head; doubling W_o undoes it exactly,
    so the gated model computes the plain model's function: the gate only multiplies."""
    plain = model_of("llama")
    gated = Transformer(ModelConfig(**SMALL, gated_attention=True))
    missing = gated.load_state_dict(plain.state_dict(), strict=False)
    assert sorted(missing.missing_keys) == [
        "blocks.0.attn.gate.weight",
        "blocks.1.attn.gate.weight",
    ]
    assert not missing.unexpected_keys
    with torch.no_grad():
        for block in gated.blocks:
            block.attn.gate.weight.zero_()
            block.attn.proj.weight.mul_(2.0)
    idx = torch.randint(0, 97, (2, 24))
    assert torch.allclose(gated(idx), plain(idx), atol=1e-5)
    with torch.no_grad():  # a non-neutral gate changes the function
        gated.blocks[0].attn.gate.weight.normal_(0, 1.0)
    assert not torch.allclose(gated(idx), plain(idx), atol=1e-3)


def test_gated_attention_off_builds_the_plain_model():
    a = Transformer(ModelConfig(**SMALL), "gamma:0.5", seed=3)
    b = Transformer(
        ModelConfig(**SMALL, gated_attention=False, gate_kind="headwise"), "gamma:0.5", seed=3
    )
    assert a.state_dict().keys() == b.state_dict().keys()
    idx = torch.randint(0, 97, (2, 24))
    assert torch.equal(a(idx), b(idx))


@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
def test_norm_eps_knob_reaches_every_norm(norm):
    """With inputs of scale 1e-4, mean(x²) = 1e-8: ε = 1e-5 dominates the denominator
    (output ≈ x/√ε, far below unit scale) while ε = 1e-12 normalizes to unit scale (docs/science.md
    §5)."""
    for eps in (1e-5, 1e-12):
        model = Transformer(ModelConfig(**SMALL, norm=norm, norm_eps=eps))
        norms = [m for m in model.modules() if isinstance(m, torch.nn.RMSNorm | torch.nn.LayerNorm)]
        assert len(norms) == 2 * 2 + 1
        assert all(m.eps == eps for m in norms)
        x = 1e-4 * torch.randn(4, 32, dtype=torch.float64)
        y = norms[0].double()(x)
        centered = x - x.mean(-1, keepdim=True) if norm == "layernorm" else x
        ms = centered.pow(2).mean(-1, keepdim=True)
        assert torch.allclose(y, centered / torch.sqrt(ms + eps), rtol=1e-6)
        rms_out = y.pow(2).mean().sqrt().item()
        if eps == 1e-5:
            assert rms_out < 0.05
        else:
            assert abs(rms_out - 1) < 0.01


def test_rope_scores_depend_only_on_relative_position():
    cos, sin = rope_tables(32, 8, 10000.0)
    q, k = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)

    def score(i, j):
        qi = apply_rope(q.float().expand(32, 8), cos, sin)[i]
        kj = apply_rope(k.float().expand(32, 8), cos, sin)[j]
        return float(qi @ kj)

    assert score(5, 2) == pytest.approx(score(20, 17), abs=1e-4)
    assert score(5, 2) != pytest.approx(score(5, 4), abs=1e-3)
    rotated = apply_rope(q.float().expand(32, 8), cos, sin)
    assert torch.allclose(rotated.norm(dim=-1), q.float().norm().expand(32), atol=1e-5)


def test_sequence_longer_than_context_is_rejected():
    model = model_of("llama")
    with pytest.raises(ValueError, match="exceeds model.context=24"):
        model(torch.zeros(1, 25, dtype=torch.long))


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.n_heads=5", "not divisible by model.n_heads=5"),
        ("model.norm=batchnorm", "model.norm='batchnorm' is not allowed"),
        ("model.norm_eps=0", "model.norm_eps=0"),
        ("model.d_modle=64", "unknown key config.model.d_modle"),
        ("init=gamma:abc", "init='gamma:abc'"),
        ("init=xavierr", "not known"),
        ("train.lr=-1", "train.lr=-1"),
        ("train.checkpoint_every=15", "not a multiple of train.log_every"),
        ("data.corpus=wiki", "data.corpus='wiki' is not allowed"),
        ("model.vocab_size=70000", "must be <= 65536"),
    ],
)
def test_bad_config_values_give_clear_errors(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load_config(RunConfig, None, [override])


def test_default_d_ff_by_mlp_kind():
    assert ModelConfig(d_model=256, mlp="gelu").ffn_dim == 1024
    assert ModelConfig(d_model=256).ffn_dim == 704  # 8/3·256 = 682.7, up to a multiple of 64
    assert ModelConfig(d_model=256, d_ff=500).ffn_dim == 500


def test_bf16_autocast_step_tracks_fp32():
    """The GPU path's bf16 autocast (exercised on CPU): same loss to bf16 precision."""
    from smallinit.llm.run_config import RunConfig
    from smallinit.llm.training.train import autocast

    model = model_of("llama")
    idx, targets = torch.randint(0, 97, (2, 4, 24))
    cfg = load_config(RunConfig, None, ["train.precision=bf16"])
    with autocast(cfg, torch.device("cpu")):
        _, loss_bf16 = model(idx, targets)
    _, loss_fp32 = model(idx, targets)
    assert loss_bf16.dtype == torch.float32  # the loss is computed in fp32 from bf16 logits
    assert abs(loss_bf16.item() - loss_fp32.item()) < 0.05
    fp32_cfg = load_config(RunConfig, None, ["train.precision=auto", "train.device=cpu"])
    assert not isinstance(autocast(fp32_cfg, torch.device("cpu")), torch.autocast)


# ----------------------------------------------------------------------------- matrix table
def _scaled_output(model, kind: str, factor: float, x: torch.Tensor) -> torch.Tensor:
    """Block 0's attention or MLP output after scaling the table's ``kind`` block."""
    from smallinit.llm.model.matrices import one

    with torch.no_grad():
        one(model.matrices(), kind, 0).weight.mul_(factor)
        block = model.blocks[0]
        if kind.startswith("attn."):
            return block.attn(x, (model.rope_cos, model.rope_sin))[0]
        return block.mlp(x)


@pytest.mark.parametrize(
    "kind,linear",
    [
        ("attn.v", True),
        ("attn.o", True),
        ("attn.q", False),
        ("attn.k", False),
        ("mlp.up", True),
        ("mlp.down", True),
        ("mlp.gate", False),
    ],
)
def test_table_blocks_are_the_matrices_the_forward_pass_uses(kind, linear):
    """The declared slices of the fused tensors play the roles they are named for: the
    output is linear in W_V, W_O, W_up (SwiGLU: silu(W_gate x) ⊙ W_up x) and W_down, and not
    in W_Q, W_K, W_gate (no biases, no gate)."""
    x = torch.randn(2, 7, SMALL["d_model"], generator=torch.Generator().manual_seed(0))
    base = _scaled_output(model_of("llama"), kind, 1.0, x)
    doubled = _scaled_output(model_of("llama"), kind, 2.0, x)
    assert torch.allclose(doubled, 2 * base, rtol=1e-5, atol=1e-7) == linear


def test_table_lists_every_weight_matrix_once_in_module_order():
    model = model_of("gated")
    table = model.matrices()
    names = [s.name for s in table]
    assert names[:2] == ["tok_emb.weight", "blocks.0.attn.qkv.weight[q]"]
    assert names[-1] == "head.weight"
    weights = {id(p) for n, p in model.named_parameters() if p.dim() == 2}
    assert {id(s.param) for s in table} == weights
    assert [s.kind for s in table if s.layer == 1] == [
        "attn.q",
        "attn.k",
        "attn.v",
        "attn.o",
        "attn.gate",
        "mlp.gate",
        "mlp.up",
        "mlp.down",
    ]
    tied = model_of("gpt2").matrices()
    assert [s.kind for s in tied if s.layer == 0][:2] == ["embedding", "positions"]
    assert "head" not in {s.kind for s in tied}


def test_init_does_not_import_the_model():
    import ast
    from pathlib import Path

    import smallinit.llm.model.init as init

    tree = ast.parse(Path(init.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "smallinit.llm.model.transformer" not in imported
