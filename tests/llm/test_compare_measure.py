"""Transformer measurements with known answers: RD of FFN inputs and Q/K, amplitudes,
condensation, and the re-created θ(0) equal to the trainer's."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from smallinit.core.config import load_config
from smallinit.llm.analysis.ffn import ffn_neurons, initial_model, measure_layers
from smallinit.llm.model.transformer import Transformer
from smallinit.llm.run_config import ModelConfig, RunConfig

# known answers of the measurements (SVD, Gram, RD) through numpy's BLAS and LAPACK
pytestmark = pytest.mark.kernel_sensitive


def model(mlp="gelu", bias=False, seed=0, init="gamma:0.5"):
    cfg = ModelConfig(
        vocab_size=64, context=16, d_model=16, n_layers=2, n_heads=2, d_ff=32, mlp=mlp, bias=bias
    )
    return Transformer(cfg, init, seed=seed)


def clone(m):
    other = Transformer(m.cfg)
    other.load_state_dict(m.state_dict())
    return other


@pytest.mark.parametrize(
    "mlp,bias,width", [("gelu", False, 16), ("swiglu", False, 32), ("gelu", True, 17)]
)
def test_neuron_inputs_and_amplitudes(mlp, bias, width):
    m = model(mlp, bias)
    with torch.no_grad():
        if bias:
            m.blocks[1].mlp.up.bias.normal_()
    w, amp = ffn_neurons(m, 1)
    assert w.shape == (32, width)
    up = m.blocks[1].mlp.up.weight.detach().double().numpy()
    down = m.blocks[1].mlp.down.weight.detach().double().numpy()
    k = 5
    expect_w = np.concatenate([up[k], up[32 + k]]) if mlp == "swiglu" else up[k]
    if bias:
        expect_w = np.append(expect_w, m.blocks[1].mlp.up.bias[k].item())
    assert w[k] == pytest.approx(expect_w)
    # A_k = ‖W_down[:, k]‖·‖w_k‖
    assert amp[k] == pytest.approx(np.linalg.norm(down[:, k]) * np.linalg.norm(expect_w))


def test_rd_and_scores_with_known_answers():
    m0 = model()
    m = clone(m0)
    d = m.cfg.d_model
    with torch.no_grad():
        m.blocks[1].mlp.up.weight.mul_(1.5)  # RD = 0.5 exactly
        m.blocks[0].attn.qkv.weight[:d].mul_(3.0)  # only Q moves: RD = 2‖Q‖/‖(Q, K)‖
        m.blocks[0].mlp.down.weight.mul_(7.0)  # output weights: RD of inputs unchanged
    q = m0.blocks[0].attn.qkv.weight[:d].detach().double()
    k = m0.blocks[0].attn.qkv.weight[d : 2 * d].detach().double()
    expect_qk = 2 * q.norm().item() / math.hypot(q.norm().item(), k.norm().item())
    layers = measure_layers(m, m0, top_k=4, threshold=0.95)
    assert [lay["rd_ffn"] for lay in layers] == pytest.approx([0.0, 0.5])
    assert [lay["rd_qk"] for lay in layers] == pytest.approx([expect_qk, 0.0])
    up0 = m0.blocks[1].mlp.up.weight.detach().double()
    assert layers[1]["dw_rms"] == pytest.approx(0.5 * up0.pow(2).mean().sqrt().item())
    assert layers[0]["dw_rms"] == 0.0
    # scaling every row (or every amplitude) by the same factor leaves the score alone
    for lay in layers:
        assert lay["score"] == pytest.approx(lay["score_init"])
        assert lay["m"] == 32
    # random rows in d = 16: few neurons share a cap, score ≈ top_k/m = 1/8
    assert 0.1 < layers[0]["score_init"] < 0.35


def test_condensed_neurons_score_one():
    m0 = model()
    m = clone(m0)
    with torch.no_grad():
        up = m.blocks[0].mlp.up.weight
        direction = torch.randn(up.shape[1])
        scale = torch.rand(up.shape[0], 1) + 0.5
        up.copy_(scale * direction)  # every neuron on one orientation
        up[:3] = -up[:3]  # and three on the opposite one: two clusters
    layers = measure_layers(m, m0, top_k=4, threshold=0.95)
    assert layers[0]["score"] == pytest.approx(1.0)
    assert layers[0]["clusters"] == 2
    assert layers[1]["score"] == pytest.approx(layers[1]["score_init"])


def test_initial_model_is_the_trainers_theta0(tmp_path):
    from smallinit.llm.training.train import Dist, Trainer

    overrides = [
        "model.vocab_size=320",
        "model.context=16",
        "model.d_model=16",
        "model.n_layers=1",
        "model.n_heads=2",
        "model.mlp=gelu",
        "init=gamma:1.0",
        "data.synthetic_items=300",
        "data.synthetic_val_items=30",
        "data.synthetic_facts=10",
        f"data.cache_dir={tmp_path}",
        "seed=3",
    ]
    cfg = load_config(RunConfig, None, overrides)
    torch.manual_seed(123)  # the global RNG must not matter
    trainer_model = Trainer(cfg, Dist()).model
    again = initial_model(cfg).state_dict()
    for name, value in trainer_model.state_dict().items():
        assert torch.equal(value, again[name]), name
    other = initial_model(load_config(RunConfig, None, [*overrides, "seed=4"])).state_dict()
    assert not torch.equal(other["blocks.0.mlp.up.weight"], again["blocks.0.mlp.up.weight"])
