"""The prepared GPU check (smallinit.study.gpu_check) in its CPU dry mode, and its goal judge."""

import json

import pytest

from smallinit.llm.model.transformer import Transformer
from smallinit.llm.run_config import ModelConfig
from smallinit.llm.training import throughput
from smallinit.study import gpu_check


def test_dry_run_writes_one_json_with_every_part(tmp_path):
    assert gpu_check.main([str(tmp_path), "--dry"]) == 0
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert result["dry"] is True and "goals" not in result
    eager = result["throughput"]["eager"]
    assert eager["tokens_per_s"] > 0 and eager["mfu"] is None  # no listed peak on a CPU
    run = result["full_run"]
    assert run["steps"] == 3 and run["val_loss"] > 0


@pytest.mark.parametrize("tie", [False, True])
def test_flops_per_token_counts_every_matmul_of_the_built_model_once(tie):
    """6 × (every parameter a token is multiplied by: all but the lookup tables, a tied
    table counted once as the head) + 12·L·d·T, the same count as the full profile's plan."""
    cfg = ModelConfig(vocab_size=100, context=16, d_model=32, n_layers=2, n_heads=2,
                      positions="learned", tie_embeddings=tie)
    model = Transformer(cfg)
    lookups = model.pos_emb.weight.numel() + (0 if tie else model.tok_emb.weight.numel())
    matmul = model.num_params() - lookups
    assert throughput.flops_per_token(cfg) == 6 * matmul + 12 * 2 * 32 * 16


def test_goals_judge_each_measured_value():
    result = {"kernels": {"grouped_step": {"speedup_vs_loop": 3.5, "speedup_vs_padded": 1.1},
                          "cosine_gram": [{"throughput_ratio": 0.9},
                                          {"throughput_ratio": 0.65}]},
              "throughput": {"eager": {"mfu": 0.30}, "compiled": {"mfu": 0.47}}}
    g = gpu_check.goals(result)
    assert g["grouped_vs_loop"]["met"] and not g["grouped_vs_padded"]["met"]
    assert g["gram_vs_cublas"]["measured"] == 0.65 and not g["gram_vs_cublas"]["met"]
    assert g["mfu"]["measured"] == 0.47 and g["mfu"]["met"]
    assert gpu_check.goals({})["mfu"]["met"] is None
