"""Benchmark (``make bench``): the batched phase-scan engine against a per-network loop.

Both run the same algorithm (:mod:`smallinit.toy.twolayer`) on the quick benchmark scan,
7×7 grid × 5 widths (250-4000) × 1 seed: "batched" = one compiled vmapped call per width
(with compaction of finished networks, split over the JAX devices); "loop" = one compiled
single-network call per network, in a Python loop. Reported: wall time of each, cold (first
call: compile included) and warm (same scan again), the ratios, and network-steps per second
(warm); S_w must agree to 1e-6. ``SMALLINIT_BENCH_WIDTHS`` (comma
list) shrinks the widths for a faster look.

Grouped engine (:mod:`smallinit.toy.grouped_engine`, the whole scan as one ragged batch
through the kernels' grouped step) against the JAX engine: on CPU a small grid (NumPy
fallback; expected slower than JAX), and, marked ``gpu``, the quick scan grid (7×7 × widths
250-1000 × 3 seeds) on the cupy backend. Run the GPU one with
``SMALLINIT_BACKEND=cupy python -m pytest tests/test_bench_toy.py -m "gpu and bench" -s``.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

pytest.importorskip("jax")

from smallinit.toy.scan import BENCH_WIDTHS, ScanConfig, fit_slopes, simulate  # noqa: E402

GROUPED_CPU = ScanConfig(gammas=(0.5, 1.0, 1.75), gamma_primes=(-0.5, 0.0, 0.5),
                         widths=(100, 200, 400), seeds=1)

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


def _grouped_vs_jax(benchmark, cfg: ScanConfig) -> dict:
    """Both engines on ``cfg``, warm: JAX after one untimed run of ``cfg`` (its compile time
    is reported apart as ``jax_cold_s``), grouped after a tiny run (kernel compile on cupy).
    S_w must agree to 1e-6."""
    t0 = time.perf_counter()
    simulate(cfg, engine="batched")
    jax_cold = time.perf_counter() - t0
    simulate(ScanConfig(gammas=(1.0,), gamma_primes=(0.0,), widths=(4, 6), seeds=1),
             engine="grouped")
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
    print("\ngrouped (CuPy) vs JAX engine, quick scan grid:",
          _grouped_vs_jax(benchmark, ScanConfig()))
