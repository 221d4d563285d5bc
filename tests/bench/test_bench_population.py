"""Step throughput of one population of N members against the same N runs stepped one
after another on the same device (``make bench``), as a ratio in ``extra_info``.

Shape: fair's sweep runs at d_model 32 (vocabulary 512, context 64, 2 layers, 4 heads,
batch 16), N = 8, one CPU thread. The issue's CPU measurement (N = 10 stacked by ``bmm``:
0.84-0.99x) says a population should not be faster here: the CPU step is bound by memory
traffic, and attention has no vmap rule on the CPU (PyTorch loops over the members). The
GPU measurement is ``python -m smallinit.tools.population_bench`` on CUDA.
"""

from __future__ import annotations

import pytest

from smallinit.tools.population_bench import measure, member_configs

pytestmark = [pytest.mark.bench, pytest.mark.usefixtures("bench_torch_threads")]

THREADS, MEMBERS, D_MODEL, STEPS = 1, 8, 32, 5


def test_population_step_against_single_runs(benchmark, tmp_path):
    cfgs = member_configs(D_MODEL, MEMBERS, device="cpu", cache=str(tmp_path))
    result = benchmark.pedantic(
        lambda: measure(cfgs, steps=STEPS, warmup=2), rounds=1, iterations=1
    )
    benchmark.extra_info.update({k: v for k, v in result.items() if v is not None})
