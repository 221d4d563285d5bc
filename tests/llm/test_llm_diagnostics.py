"""Diagnostics (saturation, sink, residual ratio) and fig 10's weight measurements on
inputs whose answers are known by construction."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from smallinit.core.config import load_config
from smallinit.llm.analysis.diagnostics import (
    collect,
    max_median_ratio,
    saturation_fraction,
    sink_mass,
    uniform_sink_mass,
)
from smallinit.llm.model.transformer import Transformer
from smallinit.llm.run_config import ModelConfig
from smallinit.llm.training.probes import measure_model, probe_steps, tracked_matrices


def _rows_with_mean_square(ms: list[float], d: int = 16) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(len(ms), d, generator=g, dtype=torch.float64)
    x = x / x.pow(2).mean(-1, keepdim=True).sqrt()  # mean(x²) = 1 exactly
    return x * torch.tensor(ms, dtype=torch.float64).sqrt()[:, None]


def test_saturation_fraction_counts_vectors_below_eps():
    x = _rows_with_mean_square([1e-7, 1e-6, 2e-6, 1.0])
    assert saturation_fraction(x, 1e-5) == pytest.approx(0.75)
    assert saturation_fraction(x, 1.5e-6) == pytest.approx(0.5)
    assert saturation_fraction(x, 1e-12) == 0.0
    assert saturation_fraction(x.reshape(2, 2, 16), 10.0) == 1.0  # leading axes pooled


def test_sink_mass_of_hand_built_attention():
    T = 8
    w = torch.zeros(2, T, T)
    for t in range(T):  # half the mass on key 0, the rest on the diagonal (key 0 at t = 0)
        w[:, t, 0] += 0.5
        w[:, t, t] += 0.5
    assert sink_mass(w, skip=4) == pytest.approx(0.5)
    assert sink_mass(w, skip=0) == pytest.approx((1.0 + 0.5 * (T - 1)) / T)
    causal = torch.tril(torch.ones(T, T))
    uniform = causal / causal.sum(-1, keepdim=True)
    assert sink_mass(uniform, skip=3) == pytest.approx(np.mean([1 / (t + 1) for t in range(3, T)]))
    assert uniform_sink_mass(T, 3) == pytest.approx(sink_mass(uniform, skip=3))
    with pytest.raises(ValueError):
        sink_mass(uniform, skip=T)


def test_max_median_ratio():
    assert max_median_ratio(torch.tensor([1.0, -2.0, 3.0, 4.0, -100.0])) == pytest.approx(100 / 3)
    assert max_median_ratio(np.ones((3, 3))) == 1.0


def _tiny_model(**model) -> Transformer:
    cfg = load_config(
        ModelConfig,
        None,
        [
            f"{k}={v}"
            for k, v in {
                "vocab_size": 64,
                "context": 16,
                "d_model": 16,
                "n_layers": 2,
                "n_heads": 2,
                **model,
            }.items()
        ],
    )
    torch.manual_seed(0)
    return Transformer(cfg)


def test_collect_saturation_follows_embedding_scale_and_eps():
    idx = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    for eps, expect in ((1e-5, 1.0), (1e-12, 0.0)):
        model = _tiny_model(norm_eps=eps)
        with torch.no_grad():  # every embedding row has mean(x²) = 1e-8
            model.tok_emb.weight.copy_(_rows_with_mean_square([1e-8] * 64).float())
        out = collect(model, idx)
        assert out["saturation_per_norm"][0] == expect  # block 0's first norm sees embeddings
        assert len(out["saturation_per_norm"]) == 2 * 2 + 1


def test_collect_sink_of_zero_query_key_is_uniform():
    model = _tiny_model()
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight[: 2 * 16].zero_()  # q = k = 0: uniform causal attention
    idx = torch.randint(0, 64, (3, 16), generator=torch.Generator().manual_seed(2))
    out = collect(model, idx, skip=4)
    assert out["sink"] == pytest.approx(uniform_sink_mass(16, 4), rel=1e-5)
    assert all(r >= 1 for r in out["resid_ratio_per_layer"])
    assert model.training  # the mode is restored


def test_weight_measures_of_known_rank():
    model = _tiny_model()
    g = torch.Generator().manual_seed(3)
    u, _ = torch.linalg.qr(torch.randn(64, 2, generator=g))
    v, _ = torch.linalg.qr(torch.randn(16, 2, generator=g))
    with torch.no_grad():
        model.tok_emb.weight.copy_(u @ v.T * 5.0)  # rank 2, equal singular values
        q = model.blocks[0].attn.qkv.weight[:16]
        q.copy_(torch.randn(1, 16, generator=g).abs().expand(16, 16))  # 16 equal rows
    m = measure_model(model)
    assert m["emb"]["effective_rank"] == pytest.approx(2.0, rel=1e-4)
    assert m["emb"]["top_singular_share"] == pytest.approx(0.5, rel=1e-4)
    assert m["L0.q"]["effective_rank"] == pytest.approx(1.0, rel=1e-4)
    assert m["L0.q"]["cluster_count"] == 1
    assert m["L1.q"]["effective_rank"] > 8  # an untouched random 16×16 matrix
    names = set(tracked_matrices(model))
    assert names == {"emb", "L0.q", "L0.k", "L0.ffn_in", "L1.q", "L1.k", "L1.ffn_in"}
    assert tracked_matrices(model)["L0.ffn_in"].shape == (model.cfg.ffn_dim, 16)


def test_probe_steps_log_spaced():
    assert probe_steps(1000, 1) == [0, 1, 10, 100, 1000]
    steps = probe_steps(300)
    assert steps[0] == 0 and steps[-1] == 300 and steps == sorted(set(steps))
    ratios = np.diff(np.log(steps[2:]))
    assert np.all(ratios < math.log(3)) and len(steps) >= 10


def test_batched_probe_equals_per_matrix_measurements():
    """measure_model's batched measure_stack calls give exactly measure_all of each tracked
    matrix (the CPU path), and the tracked matrices are the table's blocks."""
    from smallinit.kernels import measure_all

    model = Transformer(
        ModelConfig(
            vocab_size=61, context=16, d_model=16, n_layers=3, n_heads=2, d_ff=40, mlp="gelu"
        ),
        "gamma:0.75",
        seed=2,
    )
    tracked = tracked_matrices(model)
    got = measure_model(model)
    assert list(got) == list(tracked)
    for name, w in tracked.items():
        assert got[name] == measure_all(w.detach().float().numpy()), name
    d = model.cfg.d_model
    torch.testing.assert_close(
        tracked["L2.k"], model.blocks[2].attn.qkv.weight[d : 2 * d], rtol=0, atol=0
    )
    assert tracked["L1.ffn_in"] is not None and tracked["L1.ffn_in"].shape == (40, d)
