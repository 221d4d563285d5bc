"""The LLM experiments' definitions, fig 8's ε matching, the resuming driver and probed
training."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from smallinit.core.config import load_config
from smallinit.core.errors import ConfigError
from smallinit.core.jobs import run_specs
from smallinit.core.store import RunStore
from smallinit.llm.analysis.critical import escape_fit, knee_gamma, plateau_steps
from smallinit.llm.run_config import RunConfig
from smallinit.llm.training import train_spec
from smallinit.llm.training.probes import probe_steps, trajectory
from smallinit.llm.training.train import train
from smallinit.llm.training.train_spec import TrainSpec
from smallinit.study import experiments
from smallinit.study.experiments import llm_plan
from smallinit.theory.escape import escape_time_gamma
from smallinit.theory.transformer import rmsnorm_gamma_threshold

TINY = [
    "model.vocab_size=300",
    "model.context=16",
    "model.d_model=16",
    "model.n_layers=1",
    "model.n_heads=2",
    "data.synthetic_items=300",
    "data.synthetic_val_items=60",
    "data.synthetic_facts=10",
    "train.steps=6",
    "train.batch_size=4",
    "train.warmup=2",
    "train.log_every=2",
    "train.eval_every=0",
    "train.checkpoint_every=2",
    "train.threads=1",
    "train.device=cpu",
    "eval.answer_items=5",
    "eval.token_windows=2",
]


def first_below(steps, loss, threshold: float) -> int | None:
    """The first logged step whose loss is ≤ ``threshold`` (None if none)."""
    loss = np.asarray(loss, dtype=float)
    hit = np.flatnonzero(loss <= threshold)
    return int(np.asarray(steps)[hit[0]]) if hit.size else None


def tiny(tmp_path, *extra) -> RunConfig:
    return load_config(RunConfig, None, [*TINY, f"data.cache_dir={tmp_path / 'cache'}", *extra])


def test_small_eps_matches_large_models_threshold():
    for d, big, eps in ((32, 2048, 1e-5), (64, 4096, 1e-12), (256, 2048, 1e-5)):
        small = llm_plan.small_eps(d, big, eps)
        assert rmsnorm_gamma_threshold(d, small) == pytest.approx(
            rmsnorm_gamma_threshold(big, eps), rel=1e-3
        )
    # docs/science.md §5: ≈ 0.76
    assert rmsnorm_gamma_threshold(2048, 1e-5) == pytest.approx(0.76, abs=0.01)


def test_quick_plan_meets_the_issue():
    """The dense sweep (three sizes, γ every 0.1 between 0.5 and 1) is medium's; quick, cut
    to its time budget, keeps two sizes and a γ grid over the same span."""
    dense = llm_plan.plan("medium")
    assert len(dense.sizes) >= 3
    g = np.array(sorted(dense.gammas))
    mid = g[(g >= 0.5) & (g <= 1.0)]
    assert mid[0] == 0.5 and mid[-1] == 1.0 and np.all(np.diff(mid) <= 0.1 + 1e-9)
    plan = llm_plan.plan("quick")
    assert len(plan.sizes) >= 2
    for grid in (dense.gammas, plan.gammas):
        g = sorted(grid)
        assert g[0] <= 0.3 and g[-1] >= 1.3 and {0.5, 1.0} <= set(g)
    jobs = experiments.specs("gamma-sweep", "quick")
    budget = {
        j.config.train.steps * j.config.train.batch_size * j.config.model.context for j in jobs
    }
    assert len(budget) == 1  # same token budget at every size
    assert {j.tags["init"] for j in jobs} >= {"nanogpt", "fixed:0.02"}
    # reuse: fig 11's runs are fig 9's, and figs 7 and 9 share the smallest size
    ids = {
        name: {j.ident for j in experiments.specs(name, "quick")}
        for name in ("gamma-sweep", "critical-init", "token-gains")
    }
    assert ids["token-gains"] <= ids["critical-init"]
    assert ids["gamma-sweep"] & ids["critical-init"]
    eight = experiments.specs("eps-gating", "quick")
    eight_eps = {j.tags["eps_setting"]: j.config.model.norm_eps for j in eight}
    assert {(j.tags["eps_setting"], j.tags["gated"]) for j in eight} == {
        ("standard", False),
        ("standard", True),
        ("relaxed", False),
        ("relaxed", True),
    }
    ten = experiments.specs("condense-expand", "quick")
    assert {j.kind for j in ten} == {"llm-train"} and {j.tags["gamma"] for j in ten} == {0.5, 1.0}
    assert all(
        j.config.model.norm_eps == eight_eps["standard"] and not j.tags["gated"] for j in ten
    )
    with pytest.raises(ConfigError, match="experiment 'nope' does not exist"):
        experiments.specs("nope", "quick")


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_driver_resumes_half_finished_sweep(tmp_path, monkeypatch):
    store = RunStore(tmp_path / "runs")
    jobs = [TrainSpec(tiny(tmp_path, f"init=gamma:{g}"), {"gamma": g}) for g in (0.5, 1.0, 0.75)]
    run_specs(jobs[:2], store)
    first = [r.status_path.read_text() for _, r in run_specs(jobs[:2], store)]
    # a third run killed mid-way: running, by a process that no longer exists
    half = store.writer(jobs[2].kind, jobs[2].config, version=jobs[2].version)
    half.start()
    half._abandon()  # its writer is killed: lock and heartbeat gone
    status = half.status()
    status["pid"] = _dead_pid()
    import json

    half.status_path.write_text(json.dumps(status))
    assert half.state == "stale"
    calls = []
    real = train_spec.train

    def counting(cfg, **kwargs):
        calls.append(cfg)
        return real(cfg, **kwargs)

    monkeypatch.setattr(train_spec, "train", counting)  # the spec computes its run
    pairs = run_specs(jobs + jobs[:1], store)  # a duplicate is run once
    assert len(calls) == 1 and calls[0].init == "gamma:0.75"
    assert [r.status_path.read_text() for _, r in pairs[:2]] == first  # not rerun
    assert all(r.done for _, r in pairs) and pairs[3][1].path == pairs[0][1].path
    calls.clear()  # --force recomputes a run shared by two figures once, not twice
    run_specs(jobs[:1], store, force=True)
    run_specs(jobs[:2], store, force=True)
    assert [c.init for c in calls] == ["gamma:0.5", "gamma:1"]  # canonical spelling


def test_every_pretraining_run_is_probed_at_log_spaced_steps(tmp_path):
    cfg = tiny(tmp_path, "init=gamma:1.0")
    tr = trajectory(train(cfg, runs_dir=tmp_path / "runs"))
    assert tr["steps"].tolist() == probe_steps(cfg.train.steps)
    assert set(tr["weights"]) == {"emb", "L0.q", "L0.k", "L0.ffn_in"}
    assert np.all((tr["saturation"] >= 0) & (tr["saturation"] <= 1))


def test_plateau_and_knee_on_constructed_curves():
    steps = np.arange(10, 110, 10)
    loss = np.array([5, 4, 3.5, 3.4, 3.3, 2.0, 1.5, 1.2, 1.1, 1.0])
    assert first_below(steps, loss, 2.0) == 60
    assert first_below(steps, loss, 0.5) is None
    # interpolated: loss crosses 3.0 between 40 (3.4) and 60 (2.0) -> at 40 + ... of the
    # linear segment from (50, 3.3) to (60, 2.0)
    assert plateau_steps(steps, loss, 3.0) == pytest.approx(50 + 10 * 0.3 / 1.3)
    gammas = [0.3, 0.5, 0.7, 0.9, 1.1]
    acc = [0.1, 0.2, 0.40, 0.41, 0.39]
    assert knee_gamma(gammas, acc, tol=0.02) == 0.7
    assert knee_gamma(gammas, acc, tol=0.0) == 0.9


def test_escape_fit_recovers_theory_and_refuses_negative_slope():

    gammas = [0.4, 0.6, 0.8, 1.0, 1.2]
    exact = [5 + 2 * escape_time_gamma(3, g, 32) for g in gammas]
    fit = escape_fit(gammas, exact, 32, 3)
    assert fit["a"] == pytest.approx(5) and fit["b"] == pytest.approx(2)
    assert fit["r2"] == pytest.approx(1.0)
    falling = [10 - g for g in gammas]
    fit = escape_fit(gammas, falling, 32, 2)
    assert fit["b"] == 0.0 and fit["r2"] == pytest.approx(0.0)
