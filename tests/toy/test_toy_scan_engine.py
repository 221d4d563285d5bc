"""The engine of the study's toy scans: the grouped engine on a CUDA device (the kernels'
CuPy backend), the JAX engine on a CPU, and either by a switch; a scan computed through the
grouped engine (on the CPU, its NumPy fallback) equals the per-network path to rounding
and is stored beside the JAX scan, never over it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from smallinit.core.errors import ConfigError
from smallinit.core.jobs import run_specs
from smallinit.core.runs import config_key
from smallinit.core.store import RunStore
from smallinit.toy import scan as scan_mod
from smallinit.toy.scan import KIND, VERSION, ScanConfig, ScanSpec, chosen_engine, simulate

TINY = ScanConfig(gammas=(1.75, 0.5), gamma_primes=(0.0,), widths=(20, 40), seeds=1, max_steps=4000)


@pytest.fixture
def on_cuda(monkeypatch):
    """The scan module sees the kernels' backend as CuPy (a CUDA device); the grouped
    engine itself still computes through NumPy, its CPU fallback."""
    monkeypatch.setattr(scan_mod, "kernels_backend", lambda: "cupy")


def test_auto_is_jax_on_the_cpu_and_grouped_on_cuda(monkeypatch):
    monkeypatch.delenv(scan_mod.ENGINE_ENV, raising=False)
    assert chosen_engine(TINY) == "jax"
    assert ScanSpec(TINY).version == VERSION
    assert ScanSpec(TINY).key == config_key(KIND, TINY, VERSION)  # CPU keys unchanged
    monkeypatch.setattr(scan_mod, "kernels_backend", lambda: "cupy")
    assert chosen_engine(TINY) == "grouped"
    assert ScanSpec(TINY).version == f"{VERSION}-grouped"
    tanh = ScanConfig(widths=(20, 40), activation="tanh")
    assert chosen_engine(tanh) == "jax"  # the grouped engine is ReLU only
    assert chosen_engine(TINY, "jax") == "jax"


def test_the_switch_forces_an_engine_and_is_checked(monkeypatch):
    monkeypatch.setenv(scan_mod.ENGINE_ENV, "grouped")
    assert chosen_engine(TINY) == "grouped" and ScanSpec(TINY).version == f"{VERSION}-grouped"
    monkeypatch.setenv(scan_mod.ENGINE_ENV, "cuda")
    with pytest.raises(ConfigError, match="SMALLINIT_TOY_ENGINE='cuda' is not allowed"):
        chosen_engine(TINY)
    with pytest.raises(ConfigError, match="engine='fast' is not allowed"):
        chosen_engine(TINY, "fast")


def test_on_cuda_the_study_scan_runs_grouped_and_equals_the_per_network_path(
    on_cuda, tmp_path, monkeypatch
):
    monkeypatch.delenv(scan_mod.ENGINE_ENV, raising=False)
    spec = ScanSpec(TINY)
    ((_, run),) = run_specs([spec], RunStore(tmp_path), workers=1)
    assert run.done and run.key == spec.key
    assert run.version == f"{VERSION}-grouped"
    assert [r["engine"] for r in run.metrics() if "engine" in r] == ["grouped"]
    grouped = run.arrays()
    plain = simulate(TINY, engine="loop")  # one network per call
    same = (grouped["status"] == 0) & (plain["status"] == 0)
    assert same.sum() == same.size  # every network converged on both paths
    # the summation orders differ (kernel, reduceat against XLA's sums): rounding only
    np.testing.assert_allclose(grouped["rd"], plain["rd"], rtol=1e-8)
    _, s_w = scan_mod.fit_slopes(plain["rd"], plain["status"], TINY.widths)
    np.testing.assert_allclose(grouped["S_w"], s_w, atol=1e-8)
    # the CPU's JAX scan is another run, which the grouped one never overwrote
    monkeypatch.setattr(scan_mod, "kernels_backend", lambda: "cpu")
    assert ScanSpec(TINY).run_of(RunStore(tmp_path)).path != run.path


def test_a_planted_engine_difference_is_seen(on_cuda, tmp_path, monkeypatch):
    """The comparison above can fail: a grouped scan at another step size differs."""
    monkeypatch.delenv(scan_mod.ENGINE_ENV, raising=False)
    other = dataclasses.replace(TINY, lr_factor=0.5)
    ((_, run),) = run_specs([ScanSpec(other)], RunStore(tmp_path), workers=1)
    plain = simulate(TINY, engine="loop")
    assert not np.allclose(run.arrays()["rd"], plain["rd"], rtol=1e-8)
