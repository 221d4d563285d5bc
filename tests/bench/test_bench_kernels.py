"""Benchmarks (make bench): CPU fallbacks against naive loops; GPU kernels against torch and
cuBLAS (skipped without a device). Ratios go into benchmark.extra_info and are printed."""

import numpy as np
import pytest

import smallinit.kernels as K
from smallinit.kernels import cpu
from smallinit.tools import kernel_bench

pytestmark = pytest.mark.bench


def test_bench_grouped_step_cpu_vectorized(benchmark):
    X, y, a, W, b, off, al = kernel_bench.phase_scan_batch(repeats=3, dtype=np.float64)
    res = kernel_bench.cpu_grouped_vs_loop()
    benchmark.extra_info.update(res)
    print(f"\ngrouped step CPU: vectorized/loop speedup {res['speedup']:.2f}x")
    out = benchmark(cpu.grouped_two_layer_step, X, y, a, W, b, off, al, "relu")
    want = cpu.grouped_two_layer_step_loop(X, y, a, W, b, off, al, "relu")
    np.testing.assert_allclose(out[2], want[2], rtol=1e-10, atol=1e-14)


def test_bench_grouped_step_cpu_naive_loop(benchmark):
    X, y, a, W, b, off, al = kernel_bench.phase_scan_batch(repeats=3, dtype=np.float64)
    benchmark(cpu.grouped_two_layer_step_loop, X, y, a, W, b, off, al, "relu")


def test_bench_cosine_gram_cpu(benchmark):
    W = np.random.default_rng(1).standard_normal((64, 64, 32))
    res = kernel_bench.cpu_gram_vs_loop()
    benchmark.extra_info.update(res)
    print(f"\ncosine Gram CPU: batched/naive-loop speedup {res['speedup']:.2f}x")
    G = benchmark(K.cosine_gram, W)
    assert G.shape == (64, 64, 64)


@pytest.mark.gpu
@pytest.mark.skipif(K.backend() != "cupy", reason="needs CuPy and a usable CUDA device")
def test_bench_gpu_grouped_and_gram(benchmark):
    res = kernel_bench.gpu_grouped_benchmark()
    gram = kernel_bench.gpu_gram_benchmark()
    stacks = kernel_bench.gpu_stack_benchmark()
    benchmark.extra_info.update({"grouped": res, "gram": gram, "stack": stacks})
    print(
        f"\ngrouped step GPU: {res['speedup_vs_loop']:.1f}x vs torch loop, "
        f"{res['speedup_vs_padded']:.2f}x vs padded bmm"
    )
    for row in gram:
        print(
            f"cosine Gram {row['batch']}x{row['m']}x{row['d']}: "
            f"{row['throughput_ratio']:.2f} of cuBLAS time-throughput"
        )
    for row in stacks:
        print(
            f"measure_stack {row['batch']}x{row['m']}x{row['d']}: "
            f"{row['speedup']:.1f}x vs per-matrix host loop"
        )
    from smallinit.kernels import gpu

    args = kernel_bench.phase_scan_batch(dtype=np.float32)
    benchmark(gpu.grouped_two_layer_step, *args[:5], args[5], args[6], "relu")
