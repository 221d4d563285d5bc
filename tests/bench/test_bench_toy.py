"""Benchmark (``make bench``): the batched phase-scan engine against a per-network loop.

Both run the same algorithm (:mod:`smallinit.toy.twolayer`) on the quick benchmark scan,
7×7 grid × 5 widths (250-4000) × 1 seed: "batched" = :func:`train_batch` (on CPU every
network in its own compiled exact-stop loop, spread over the JAX devices, one per core);
"loop" = :func:`train_loop`, the same compiled single-network call for each network in
turn on one device. Reported: wall time of each, cold (first
call: compile included) and warm (same scan again), the ratios, and network-steps per second
(warm); S_w must agree to 1e-6. ``SMALLINIT_BENCH_WIDTHS`` (comma
list) shrinks the widths for a faster look.

PyTorch reference (``test_bench_engine_vs_pytorch_loop``): the same scan trained the way a
researcher would write it, one network at a time, a Python loop over steps with autograd
(tests/torch_phase_loop.py), against the warm batched engine; reported as a ratio, with
S_w and every network's stopping step compared. The engine's goal: the bench grid
in under 2 s warm on 2 cores (``goal_met`` in ``extra_info``).

Grouped engine (:mod:`smallinit.toy.grouped_engine`, the whole scan as one ragged batch
through the kernels' grouped step) against the JAX engine: on CPU a small grid (NumPy
fallback; expected slower than JAX), and, marked ``gpu``, the quick scan grid (7×7 × widths
250-1000 × 3 seeds) on the cupy backend. Run the GPU one with
``SMALLINIT_BACKEND=cupy python -m pytest tests/bench/test_bench_toy.py -m "gpu and bench" -s``.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

pytest.importorskip("jax")

from smallinit.toy.scan import BENCH_WIDTHS, ScanConfig, fit_slopes, simulate  # noqa: E402

GROUPED_CPU = ScanConfig(
    gammas=(0.5, 1.0, 1.75), gamma_primes=(-0.5, 0.0, 0.5), widths=(100, 200, 400), seeds=1
)

pytestmark = pytest.mark.bench


def _config() -> ScanConfig:
    env = os.environ.get("SMALLINIT_BENCH_WIDTHS")
    widths = tuple(int(w) for w in env.split(",")) if env else BENCH_WIDTHS
    return ScanConfig(widths=widths, seeds=1)


def _time_engines(benchmark, cfg: ScanConfig, engines) -> dict:
    """{engine: (seconds, simulate result)}, the engines run one after the other once."""
    results = {}

    def run_all():
        for engine in engines:
            t0 = time.perf_counter()
            sim = simulate(cfg, engine=engine)
            results[engine] = (time.perf_counter() - t0, sim)

    benchmark.pedantic(run_all, rounds=1, iterations=1)
    return results


def _timed(cfg: ScanConfig, engine: str) -> tuple[float, dict]:
    t0 = time.perf_counter()
    sim = simulate(cfg, engine=engine)
    return time.perf_counter() - t0, sim


def test_bench_batched_vs_loop(benchmark):
    """Cold (first call in the process: XLA compiles every batch shape) and warm (the same
    scan again: compiled code reused), both engines, both reported."""
    cfg = _config()
    simulate(ScanConfig(gammas=(1.0,), gamma_primes=(0.0,), widths=(4, 6), seeds=1))  # warm-up
    cold = {engine: _timed(cfg, engine) for engine in ("batched", "loop")}
    results = _time_engines(benchmark, cfg, ("batched", "loop"))
    (tb, sb), (tl, sl) = results["batched"], results["loop"]
    steps = int(sb["steps"].sum())
    assert steps == int(sl["steps"].sum()) == int(cold["batched"][1]["steps"].sum())
    _, swb = fit_slopes(sb["rd"], sb["status"], cfg.widths)
    _, swl = fit_slopes(sl["rd"], sl["status"], cfg.widths)
    np.testing.assert_allclose(swb, swl, atol=1e-6)
    tbc, tlc = cold["batched"][0], cold["loop"][0]
    info = {
        "networks": int(sb["steps"].size),
        "network_steps": steps,
        "cold_batched_s": round(tbc, 2),
        "cold_loop_s": round(tlc, 2),
        "cold_ratio_loop_over_batched": round(tlc / tbc, 2),
        "batched_s": round(tb, 2),
        "loop_s": round(tl, 2),
        "ratio_loop_over_batched": round(tl / tb, 2),
        "batched_network_steps_per_s": round(steps / tb),
        "loop_network_steps_per_s": round(steps / tl),
        "widths": list(cfg.widths),
    }
    benchmark.extra_info.update(info)
    print("\ntoy scan benchmark:", info)


GOAL_WARM_S = 2.0


def test_bench_engine_vs_pytorch_loop(benchmark):
    """Warm batched engine against the Python-stepped PyTorch autograd loop, one run each
    after a warm-up of the engine on the same grid (compile excluded; the PyTorch loop has
    nothing to compile)."""
    import torch
    import torch_phase_loop

    from smallinit.toy import twolayer as tl
    from smallinit.toy.scan import _width_batch

    cfg = _config()
    X, y = tl.reference_data()
    simulate(cfg)  # compile every batch shape of this grid
    batches = [_width_batch(cfg, m) for m in cfg.widths]
    results = {}

    def run_both():
        t0 = time.perf_counter()
        results["engine"] = simulate(cfg)
        results["engine_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        results["torch"] = torch_phase_loop.train_scan(batches, X, y, max_steps=cfg.max_steps)
        results["torch_s"] = time.perf_counter() - t0

    benchmark.pedantic(run_both, rounds=1, iterations=1)
    sim, ref = results["engine"], results["torch"]
    G, Gp = len(cfg.gammas), len(cfg.gamma_primes)
    # per width (G·Gp,) → the engine's layout (γ, γ', width, seed)
    ref_steps, ref_status, ref_rd = (
        np.stack([v.reshape(G, Gp, 1) for v in ref[key]], axis=2)
        for key in ("steps", "status", "rd")
    )
    np.testing.assert_array_equal(ref_status, sim["status"])
    assert np.abs(ref_steps - sim["steps"]).max() <= 1  # a tol crossing within rounding
    _, sw = fit_slopes(sim["rd"], sim["status"], cfg.widths)
    _, sw_ref = fit_slopes(ref_rd, ref_status, cfg.widths)
    np.testing.assert_allclose(sw, sw_ref, atol=1e-6)
    te, tt = results["engine_s"], results["torch_s"]
    steps = int(sim["steps"].sum())
    info = {
        "networks": int(sim["steps"].size),
        "network_steps": steps,
        "stalled_networks": int((sim["status"] == tl.STALLED).sum()),
        "engine_warm_s": round(te, 2),
        "pytorch_loop_s": round(tt, 2),
        "ratio_pytorch_loop_over_engine": round(tt / te, 1),
        "engine_network_steps_per_s": round(steps / te),
        "pytorch_network_steps_per_s": round(steps / tt),
        "torch_threads": torch.get_num_threads(),
        "jax_devices": len(__import__("jax").devices()),
        "goal_warm_s": GOAL_WARM_S,
        "goal_met": te < GOAL_WARM_S,
        "widths": list(cfg.widths),
    }
    benchmark.extra_info.update(info)
    print("\nengine vs Python-stepped PyTorch loop:", info)


def _grouped_vs_jax(benchmark, cfg: ScanConfig) -> dict:
    """Both engines on ``cfg``, warm: JAX after one untimed run of ``cfg`` (its compile time
    is reported apart as ``jax_cold_s``), grouped after a tiny run (kernel compile on cupy).
    S_w must agree to 1e-6."""
    t0 = time.perf_counter()
    simulate(cfg, engine="batched")
    jax_cold = time.perf_counter() - t0
    simulate(
        ScanConfig(gammas=(1.0,), gamma_primes=(0.0,), widths=(4, 6), seeds=1), engine="grouped"
    )
    results = _time_engines(benchmark, cfg, ("batched", "grouped"))
    (tj, sj), (tg, sg) = results["batched"], results["grouped"]
    np.testing.assert_array_equal(sg["status"], sj["status"])
    assert np.abs(sg["steps"] - sj["steps"]).max() <= 1
    _, swj = fit_slopes(sj["rd"], sj["status"], cfg.widths)
    _, swg = fit_slopes(sg["rd"], sg["status"], cfg.widths)
    np.testing.assert_allclose(swg, swj, atol=1e-6)
    steps = int(sj["steps"].sum())
    from smallinit.kernels import backend

    info = {
        "backend": backend(),
        "networks": int(sj["steps"].size),
        "network_steps": steps,
        "lockstep_steps": int(sj["steps"].max()),
        "jax_cold_s": round(jax_cold, 2),
        "jax_s": round(tj, 2),
        "grouped_s": round(tg, 2),
        "ratio_jax_over_grouped": round(tj / tg, 3),
        "jax_network_steps_per_s": round(steps / tj),
        "grouped_network_steps_per_s": round(steps / tg),
        "grid": [len(cfg.gammas), len(cfg.gamma_primes)],
        "widths": list(cfg.widths),
        "seeds": cfg.seeds,
    }
    benchmark.extra_info.update(info)
    return info


def test_bench_grouped_vs_jax_cpu(benchmark):
    from smallinit.kernels import backend

    if backend() != "cpu":
        pytest.skip("the CPU comparison needs the cpu backend (SMALLINIT_BACKEND=cpu)")
    print("\ngrouped (NumPy) vs JAX engine:", _grouped_vs_jax(benchmark, GROUPED_CPU))


@pytest.mark.gpu
def test_bench_grouped_vs_jax_gpu(benchmark):
    from smallinit.kernels import backend

    if backend() != "cupy":
        pytest.skip("no usable CUDA device/CuPy: the kernels' backend is cpu")
    print(
        "\ngrouped (CuPy) vs JAX engine, quick scan grid:", _grouped_vs_jax(benchmark, ScanConfig())
    )
