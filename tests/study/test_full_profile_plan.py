"""The full profile, planned and checked before any GPU sees it: every transformer of every
figure is built on the meta device (no memory, no compute), its parameters must be what
the plan says, its training step must fit one H200, and the whole profile one H200-day."""

from __future__ import annotations

import json

import pytest
import torch

from smallinit.llm.model.transformer import Transformer
from smallinit.llm.run_config import ModelConfig
from smallinit.llm.training import cost as cost_mod
from smallinit.study import experiments

GIB = 2**30


@pytest.fixture(scope="module")
def full_plan():
    return experiments.plan("full")


def distinct_transformers(rows):
    """(kind, key) -> (job config, plan cost) for every transformer run of the plan."""
    jobs = {}
    for number in sorted({r["figure"] for r in rows}):
        for experiment in experiments.of_figure(number):
            for job in experiments.specs(experiment.name, "full") + experiment.inner("full"):
                jobs.setdefault(job.ident, job)
    costs = {(r["kind"], r["key"]): r["cost"] for r in rows if r["cost"] is not None}
    assert set(costs) <= set(jobs)
    return {ident: (jobs[ident].config, cost) for ident, cost in costs.items()}


def test_every_full_transformer_builds_on_meta_with_the_planned_size(full_plan):
    runs = distinct_transformers(full_plan)
    assert len(runs) >= 100  # figs 5-11: compare, anchor, sweeps
    shapes = {}
    for config, cost in runs.values():
        model = config.model
        shapes.setdefault(json.dumps(vars(model), sort_keys=True, default=str), (model, cost))
    for model, cost in shapes.values():
        with torch.device("meta"):
            net = Transformer(model)
        assert all(p.is_meta for p in net.parameters())
        built = sum(p.numel() for p in net.parameters())  # a tied head is counted once
        tables = {
            id(m.weight): m.weight.numel()
            for m in (net.tok_emb, net.pos_emb, net.head)
            if m is not None
        }
        assert built == cost["params"], model
        assert built - sum(tables.values()) == cost["params_non_embedding"], model
        # one training step of the run's batch fits one H200 with room to spare
        assert cost["memory_bytes"] < cost_mod.H200_MEMORY_GIB * GIB


def test_training_flops_follow_the_stated_formula():
    """C = 6·(N + V·d)·T + 12·L·n_ctx·d·T (Kaplan et al. 2020 Table 1, PaLM App. B)."""
    model = ModelConfig(
        vocab_size=1000,
        context=64,
        d_model=32,
        n_layers=2,
        n_heads=2,
        mlp="gelu",
        tie_embeddings=True,
    )
    with torch.device("meta"):
        net = Transformer(model)
    n = (
        sum(p.numel() for name, p in net.named_parameters() if name.startswith("blocks"))
        + net.norm_f.weight.numel()
    )
    assert cost_mod.non_embedding_params(model) == n
    per_token = 6 * (n + 1000 * 32) + 12 * 2 * 64 * 32
    assert cost_mod.training_flops(model, 10_000) == per_token * 10_000
    # d_model ≫ n_ctx/12 (Kaplan et al. 2020 §2.1): the context term is small, C ≈ 6·N·T
    wide = ModelConfig(d_model=2048, n_layers=24, n_heads=16, context=256, vocab_size=256)
    ratio = cost_mod.training_flops(wide, 1) / (6 * cost_mod.non_embedding_params(wide))
    assert 1.0 < ratio < 1.03
    hours = cost_mod.gpu_hours(cost_mod.MFU * cost_mod.H200_PEAK_BF16_DENSE * 3600)
    assert hours == pytest.approx(1.0)


def test_full_profile_fits_one_h200_day(full_plan):
    totals = experiments.plan_totals(full_plan)
    assert totals["transformer_runs"] == len(distinct_transformers(full_plan))
    assert 0 < totals["h200_hours"] <= 24.0
    assert totals["max_memory_bytes"] < cost_mod.H200_MEMORY_GIB * GIB
    by_hand = sum(c["h200_hours"] for _, c in distinct_transformers(full_plan).values())
    assert totals["h200_hours"] == pytest.approx(by_hand)


def test_full_profile_baseline_follows_published_practice():
    """The γ = 0.5 baseline of figs 7-11 and fig 5: about 20 tokens per parameter for the
    reference size (Chinchilla) and GPT-3/Pythia AdamW settings (see full.toml)."""
    from smallinit.compare.comparison import profile_config
    from smallinit.study.experiments import llm_plan

    plan = llm_plan.plan("full")
    reference = llm_plan.base_config("full", plan.sizes[len(plan.sizes) // 2])
    cost = cost_mod.run_cost(reference)
    assert 15 <= cost.tokens / cost.params <= 25
    train = reference.train
    assert train.lr == 1e-3 and (train.beta1, train.beta2) == (0.9, 0.95)
    assert train.weight_decay == 0.1 and train.grad_clip == 1.0
    cmp = profile_config("full")
    widths = sorted(cmp.widths)
    mid = cost_mod.run_cost(cmp.llm_run(0.5, widths[len(widths) // 2]))
    assert 15 <= mid.tokens / mid.params <= 25


def test_cli_plan_json_has_costs_and_total(capsys, tmp_path):
    from smallinit.cli import main

    assert (
        main(
            [
                "figs",
                "--plan",
                "--profile",
                "full",
                "--only",
                "7",
                "--json",
                "--runs-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["profile"] == "full" and out["total"]["mfu"] == cost_mod.MFU
    assert all(r["cost"]["h200_hours"] > 0 for r in out["runs"])
    assert out["total"]["h200_hours"] == pytest.approx(
        sum(r["cost"]["h200_hours"] for r in out["runs"])
    )
    assert (
        main(["figs", "--plan", "--profile", "full", "--only", "1,7", "--runs-dir", str(tmp_path)])
        == 0
    )
    text = capsys.readouterr().out
    assert "H200-hours at 40% MFU of 989 TFLOP/s" in text and "Kaplan" in text
    assert not any(tmp_path.iterdir())
