"""Benchmark (``make bench``): the batched phase-scan engine against a per-network loop.

Both run the same algorithm (:mod:`smallinit.toy.twolayer`) on the quick benchmark scan,
7×7 grid × 5 widths (250-4000) × 1 seed: "batched" = one compiled vmapped call per width
(with compaction of finished networks, split over the JAX devices); "loop" = one compiled
single-network call per network, in a Python loop. Reported: wall time of each, the ratio,
and network-steps per second; S_w must agree to 1e-6. ``SMALLINIT_BENCH_WIDTHS`` (comma
list) shrinks the widths for a faster look.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

pytest.importorskip("jax")

from smallinit.toy.scan import BENCH_WIDTHS, ScanConfig, fit_slopes, simulate  # noqa: E402

pytestmark = pytest.mark.bench


def _config() -> ScanConfig:
    env = os.environ.get("SMALLINIT_BENCH_WIDTHS")
    widths = tuple(int(w) for w in env.split(",")) if env else BENCH_WIDTHS
    return ScanConfig(widths=widths, seeds=1)


def test_bench_batched_vs_loop(benchmark):
    cfg = _config()
    simulate(ScanConfig(gammas=(1.0,), gamma_primes=(0.0,), widths=(4, 6), seeds=1))  # warm-up
    results = {}

    def both():
        for engine in ("batched", "loop"):
            t0 = time.perf_counter()
            sim = simulate(cfg, engine=engine)
            results[engine] = (time.perf_counter() - t0, sim)

    benchmark.pedantic(both, rounds=1, iterations=1)
    (tb, sb), (tl, sl) = results["batched"], results["loop"]
    steps = int(sb["steps"].sum())
    assert steps == int(sl["steps"].sum())
    _, swb = fit_slopes(sb["rd"], sb["status"], cfg.widths)
    _, swl = fit_slopes(sl["rd"], sl["status"], cfg.widths)
    np.testing.assert_allclose(swb, swl, atol=1e-6)
    info = {
        "networks": int(sb["steps"].size),
        "network_steps": steps,
        "batched_s": round(tb, 2),
        "loop_s": round(tl, 2),
        "ratio_loop_over_batched": round(tl / tb, 2),
        "batched_network_steps_per_s": round(steps / tb),
        "loop_network_steps_per_s": round(steps / tl),
        "widths": list(cfg.widths),
    }
    benchmark.extra_info.update(info)
    print("\ntoy scan benchmark:", info)
