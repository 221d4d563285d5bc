"""How a population's step runs (eager, compile, cudagraphs): a checked choice of the job
driver and ``figs``, wired through to the population, never part of a run's key, and
compiled steps agree with eager ones; on a CPU the default forms no population."""

from __future__ import annotations

import pytest
import torch
from test_llm_anchor_population import LOSS, difference, series_difference
from test_llm_anchor_population import toy as anchor_toy
from test_llm_population import toy as lm_toy

from smallinit.cli import main
from smallinit.core.errors import ConfigError
from smallinit.core.jobs import POPULATION_EXECS, chosen_population_exec, run_specs
from smallinit.core.store import RunStore
from smallinit.llm.training import population as population_mod
from smallinit.llm.training.anchor import ANCHOR, AnchorSpec
from smallinit.llm.training.population import train_population
from smallinit.llm.training.train_spec import TrainSpec


def test_execution_is_checked(monkeypatch):
    assert chosen_population_exec(None) == "eager"  # the default
    with pytest.raises(
        ConfigError,
        match="population execution='fast' is not allowed; use eager, compile, cudagraphs",
    ):
        chosen_population_exec("fast")
    monkeypatch.setenv("SMALLINIT_POPULATION_EXEC", "graphs")
    with pytest.raises(ConfigError, match="SMALLINIT_POPULATION_EXEC='graphs' is not allowed"):
        chosen_population_exec(None)
    monkeypatch.setenv("SMALLINIT_POPULATION_EXEC", "compile")
    assert chosen_population_exec(None) == "compile"


def test_cudagraphs_are_refused_on_a_cpu_before_any_run_exists(tmp_path):
    cfgs = [anchor_toy("train.steps=2"), anchor_toy("train.steps=2", "seed=1")]
    with pytest.raises(ConfigError, match="'cudagraphs' needs a CUDA device.*use eager or compile"):
        train_population(cfgs, runs_dir=tmp_path, kind=ANCHOR, execution="cudagraphs")
    assert not any(tmp_path.rglob("status.json"))


def test_figs_offers_the_driver_s_executions(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["figs", "--population-exec", "fast", "--plan"])
    assert exit_.value.code == 2
    assert "eager" in capsys.readouterr().err
    for execution in POPULATION_EXECS:  # each is accepted (the plan computes nothing)
        assert (
            main(
                [
                    "figs",
                    "--profile",
                    "quick",
                    "--only",
                    "7",
                    "--plan",
                    "--population-exec",
                    execution,
                ]
            )
            == 0
        )
    capsys.readouterr()


def test_the_driver_hands_the_execution_to_the_population(tmp_path, monkeypatch):
    """``run_specs(population_exec="compile")`` compiles the population's batched forward
    (``torch.compile`` seen here, standing in for Inductor); the runs keep their keys."""
    calls = []

    def fake_compile(fn, **options):
        calls.append(options)
        return fn

    monkeypatch.setattr(population_mod.torch, "compile", fake_compile)
    specs = [
        AnchorSpec(anchor_toy("train.steps=2", "train.eval_every=0", f"seed={s}")) for s in range(2)
    ]
    done = run_specs(
        specs, RunStore(tmp_path), population="on", population_exec="compile", workers=1
    )
    assert calls == [{"mode": None, "dynamic": False}]
    assert [r.key for _, r in done] == [s.key for s in specs]
    assert all(r.status()["population"]["size"] == 2 for _, r in done)


def test_on_the_cpu_the_default_trains_pretraining_runs_one_at_a_time(tmp_path, monkeypatch):
    """``--population auto`` (the default) forms no population on a CPU."""
    monkeypatch.delenv("SMALLINIT_POPULATION", raising=False)
    cache = str(tmp_path / "cache")
    specs = [
        TrainSpec(lm_toy(cache, "train.steps=2", "train.eval_every=0", f"seed={s}"))
        for s in range(3)
    ]
    assert all(s.population_key("on") == specs[0].population_key("on") for s in specs)
    done = run_specs(specs, RunStore(tmp_path / "runs"), workers=1)
    assert all(r.done and "population" not in r.status() for _, r in done)


# compiled (Inductor's C++ kernels on the CPU) against eager, float64: Inductor fuses the
# pointwise work and may reorder sums, which moves the last bits only; as in the float64
# equivalence tests, 1e-10 for weights and arrays (observed ~1e-15), and the anchor loss,
# computed in float32 by its objective, to float32's resolution (LOSS)
COMPILED = 1e-10


@pytest.mark.slow  # a cold Inductor build of the batched step takes ~2 min on 2 busy cores
def test_compiled_population_equals_the_eager_one(tmp_path):
    cfgs = [
        anchor_toy("train.steps=10"),
        anchor_toy("train.steps=10", "seed=1", "train.lr=3e-3", "init=gamma:1.0"),
    ]
    eager = train_population(
        cfgs,
        runs_dir=tmp_path / "eager",
        dtype=torch.float64,
        callbacks=[],
        kind=ANCHOR,
        execution="eager",
    )
    compiled = train_population(
        cfgs,
        runs_dir=tmp_path / "compiled",
        dtype=torch.float64,
        callbacks=[],
        kind=ANCHOR,
        execution="compile",
    )
    for a, b in zip(eager, compiled, strict=True):
        assert a.key == b.key and b.state == "done"
        assert (a.path / "config.json").read_bytes() == (b.path / "config.json").read_bytes()
        assert difference(b, a) < COMPILED
        assert series_difference(b, a, ["loss"]) < LOSS
    # and the comparison can fail: the two members differ far beyond it
    assert difference(compiled[1], eager[0]) > 1e6 * COMPILED


def test_population_bench_measures_each_execution_and_refuses_graphs_on_a_cpu(tmp_path, capsys):
    import json

    from smallinit.tools import population_bench

    cache = str(tmp_path / "cache")
    assert (
        population_bench.main(
            ["--tiny", "--warmup", "0", "--cache", cache, "--executions", "eager"]
        )
        == 0
    )
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert result["execution"] == "eager" and list(result["executions"]) == ["eager"]
    assert result["executions"]["eager"]["ratio"] == result["ratio"]
    assert population_bench.main(["--tiny", "--cache", cache, "--executions", "cudagraphs"]) == 2
    assert "'cudagraphs' needs a CUDA device" in capsys.readouterr().err
