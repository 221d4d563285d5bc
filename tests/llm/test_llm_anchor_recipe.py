"""The anchor task's recipe ``zhang2024`` (docs/science.md §6.1): the model it builds computes
the authors' forward (written out here from the modules' own weights: post-LN blocks with
LayerNorm biases, one head of width d/2, a ReLU feed-forward of 3·d, a head with a bias),
the optimizer decays every parameter and warms up from lr/10, the new model and train
fields are key-neutral at their defaults, and such a model is refused by the export."""

import math

import pytest
import torch
import torch.nn.functional as F

from smallinit.core.config import config_to_dict, override
from smallinit.core.errors import ConfigError
from smallinit.core.runs import config_key
from smallinit.llm.model.export import hf_family
from smallinit.llm.model.fastlayers import FAST_PARTS
from smallinit.llm.model.layers import PLAIN_PARTS
from smallinit.llm.model.transformer import Transformer
from smallinit.llm.run_config import ModelConfig, RunConfig, TrainConfig
from smallinit.llm.training.anchor import KIND, VERSION, AnchorConfig, zhang2024_recipe
from smallinit.llm.training.train import lr_at, make_optimizer
from tests.llm.test_llm_anchor_postln import layer_norm, randomize_norms


def recipe_config(d_model=16, n_layers=2) -> AnchorConfig:
    base = AnchorConfig()
    return AnchorConfig(
        recipe="zhang2024", model=override(base.model, {"d_model": d_model, "n_layers": n_layers})
    )


def authors_forward(model, idx):
    """Post-LN blocks as the authors' GPT computes them: LN(x + W_o Attn(x)), then
    LN(h + W₂ ReLU(W₁ h)), no final norm, logits h Wᵀ + b."""
    B, T = idx.shape
    x = model.tok_emb.weight[idx] + model.pos_emb.weight[:T]
    for b in model.blocks:
        a = b.attn.proj.weight.shape[1]
        q, k, v = (x @ b.attn.qkv.weight.T).split(a, dim=-1)  # one head of width a
        scores = q @ k.transpose(-1, -2) / math.sqrt(a)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        h = layer_norm(x + (scores.softmax(-1) @ v) @ b.attn.proj.weight.T, b.norm1)
        x = layer_norm(h + F.relu(h @ b.mlp.up.weight.T) @ b.mlp.down.weight.T, b.norm2)
    return x @ model.head.weight.T + model.head.bias


@pytest.mark.parametrize("parts", [PLAIN_PARTS, FAST_PARTS], ids=["plain", "fast"])
def test_recipe_model_computes_the_authors_forward(parts):
    cfg = recipe_config().model
    assert (cfg.n_heads, cfg.attn_width, cfg.ffn_dim, cfg.vocab_size) == (1, 8, 48, 201)
    model = Transformer(cfg, "gamma:0.5", seed=1, parts=parts)
    gen = torch.Generator().manual_seed(2)
    randomize_norms(model, gen)
    with torch.no_grad():
        model.head.bias.copy_(0.5 * torch.randn(model.head.bias.shape, generator=gen))
    idx = torch.randint(1, 100, (3, 9), generator=gen)
    targets = torch.randint(1, 100, (3, 9), generator=gen)
    with torch.no_grad():
        want = authors_forward(model, idx)
        torch.testing.assert_close(model(idx), want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(model(idx, need_weights=True)[0], want, rtol=1e-5, atol=1e-5)
        _, loss = model(idx, targets)  # the training path (the fast head defers to the bias)
    torch.testing.assert_close(loss, F.cross_entropy(want.flatten(0, 1), targets.flatten()))
    names = {n for n, _ in model.named_parameters()}
    assert "head.bias" in names and "blocks.0.norm1.bias" in names
    assert not any(n.endswith("qkv.bias") or n.endswith("up.bias") for n in names)
    # the γ rule reads the true fan-ins: W_O's is the attention width d/2, W₂'s is 3·d
    fan_in = {m.kind: m.d_in for m in model.matrices() if m.layer == 0}
    assert fan_in["attn.o"] == 8 and fan_in["mlp.down"] == 48 and fan_in["attn.q"] == 16


def test_recipe_optimizer_decays_every_parameter_and_warms_up_from_a_tenth():
    cfg = recipe_config()
    run = RunConfig(model=cfg.model, train=cfg.train)
    model = Transformer(cfg.model, "gamma:0.5")
    opt = make_optimizer(model, run, torch.device("cpu"))
    decayed = [p for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]]
    assert len(decayed) == len(list(model.parameters()))
    assert opt.param_groups[0]["betas"] == (0.9, 0.999)
    t = cfg.train
    assert lr_at(1, run) == pytest.approx(t.lr * (0.1 + 0.9 / t.warmup))
    assert lr_at(t.warmup, run) == pytest.approx(t.lr)
    assert lr_at(t.steps, run) == pytest.approx(t.min_lr_ratio * t.lr)
    plain = RunConfig()  # the default: matrices and embeddings only, warmup from 0
    groups = make_optimizer(Transformer(plain.model), plain, torch.device("cpu")).param_groups
    assert all(p.dim() >= 2 for p in groups[0]["params"]) and groups[1]["weight_decay"] == 0
    assert lr_at(1, plain) == plain.train.lr * 1 / plain.train.warmup  # the same bits as before


def test_recipe_replaces_its_settings_and_keeps_the_runs_own():
    cfg = override(
        recipe_config(d_model=32, n_layers=3),
        {"model.n_heads": 4, "model.mlp": "gelu", "train.lr": 5e-4, "train.weight_decay": 0.1},
    )
    model, train = zhang2024_recipe(cfg.model)
    assert all(getattr(cfg.model, k) == v for k, v in model.items())
    assert all(getattr(cfg.train, k) == v for k, v in train.items())
    assert (cfg.model.d_model, cfg.model.n_layers, cfg.model.attn_dim) == (32, 3, 16)
    assert (cfg.train.lr, cfg.train.weight_decay) == (5e-4, 0.1)  # the run's own


def test_new_fields_are_key_neutral_and_the_recipe_gets_its_own_key():
    plain = AnchorConfig()
    for section, fields in (
        (config_to_dict(plain), ("recipe",)),
        (config_to_dict(plain.model), ("attn_dim", "norm_bias", "head_bias")),
        (config_to_dict(plain.train), ("warmup_from", "decay_all")),
    ):
        assert not set(fields) & set(section)
    same = override(
        plain, {"model.attn_dim": None, "train.decay_all": False, "recipe": "smallinit"}
    )
    assert config_key(KIND, same, VERSION) == config_key(KIND, plain, VERSION)
    assert config_key(KIND, AnchorConfig(recipe="zhang2024"), VERSION) != config_key(
        KIND, plain, VERSION
    )


def test_attention_width_equal_to_the_model_is_the_plain_model():
    """attn_dim = d_model builds the same parameters and numbers as leaving it out."""
    kw = dict(vocab_size=32, context=8, d_model=16, n_layers=1, n_heads=2)
    a, b = (
        Transformer(ModelConfig(**kw, **x), "gamma:0.5", seed=0) for x in ({}, {"attn_dim": 16})
    )
    idx = torch.randint(0, 32, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(a(idx), b(idx))


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(attn_dim=0), "model.attn_dim=0 is not allowed"),
        (dict(attn_dim=12, n_heads=8), "model.attn_dim=12 is not divisible by model.n_heads=8"),
        (dict(attn_dim=12, n_heads=4), "model.attn_dim/n_heads=3 is odd"),
    ],
)
def test_bad_attention_widths_are_refused(kw, message):
    with pytest.raises(ConfigError, match=message):
        ModelConfig(**kw)
    assert ModelConfig(attn_dim=24, n_heads=4).head_dim == 6


def test_warmup_from_outside_the_unit_interval_is_refused():
    with pytest.raises(ConfigError, match="train.warmup_from=1.5 is not allowed"):
        TrainConfig(warmup_from=1.5)


def test_export_refuses_what_no_hugging_face_class_computes():
    with pytest.raises(
        ConfigError,
        match="model.norm_position=post.*model.attn_dim=8.*"
        "model.head_bias=True.*model.norm_bias=True",
    ):
        hf_family(override(recipe_config().model, {"mlp": "gelu"}))
    assert hf_family(ModelConfig(attn_dim=256, norm_bias=False)) == "llama"


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"bias": True, "norm": "layernorm", "mlp": "gelu", "positions": "learned"},
        {"bias": True, "gated_attention": True},
        {"norm_position": "post", "norm": "layernorm"},
        "recipe",
    ],
    ids=["default", "gpt2 biases", "swiglu biases and gate", "post-LN", "recipe"],
)
def test_parameter_count_of_the_plan_is_the_built_models(fields):
    """The memory and FLOP plan's P (llm/training/memory.py) counts every parameter the
    model builds: norm and head biases of the recipe, linear biases, post-LN's missing
    final norm."""
    from smallinit.llm.training.memory import param_count

    base = ModelConfig(vocab_size=97, context=9, d_model=32, n_layers=2, n_heads=2)
    cfg = override(base, zhang2024_recipe(base)[0] if fields == "recipe" else fields)
    built = sum(p.numel() for p in Transformer(cfg).parameters())
    assert param_count(cfg) == built
