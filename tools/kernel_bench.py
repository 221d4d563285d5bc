"""Benchmark workloads and baselines, shared by the pytest-benchmark suite and gpu_check.

Phase-scan batch (the toy's hot loop): G networks of widths spread over 128…4096
(log-spaced, repeated), 1-d inputs with a bias, n = 4 points (docs/science.md §2 reference setting).
Baselines: CPU — the per-network NumPy loop; GPU — a per-network torch loop with autograd and
one padded ``torch.bmm`` over the batch (widths padded to the largest, autograd).

The GPU benchmarks run on a :class:`BenchDevice`: CUDA through CuPy
(:func:`cuda_bench_device`), or the CPU emulation of the same ``.cu`` kernels with NumPy
and CPU torch baselines (:func:`emulated_bench_device`), where they walk every line of the
GPU benchmark at toy sizes and their times mean nothing. The cosine Gram is measured in
each dtype the project calls it with: float32, float64 (the toy's measurements; cuBLAS runs
DGEMM on the FP64 tensor cores of an A100/H100/H200) and bf16 (a transformer's bf16
weights; the kernel widens them to float32, cuBLAS multiplies bf16 on the tensor cores).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from smallinit.kernels import cpu, gpu, gram_paths, launch
from smallinit.kernels.backend import cp
from smallinit.kernels.batched import offsets_from_widths
from smallinit.kernels.measure import measure_all
from smallinit.kernels.stack import measure_stack
from smallinit.tools import emulation

# Peak throughput of known devices (dense FLOP/s: FP32 and FP64 without tensor cores, FP64
# and BF16 on the tensor cores; HBM bytes/s), NVIDIA's H100 SXM and H200 datasheets.
PEAKS = {
    "H200": {
        "fp32": 67e12,
        "fp64": 34e12,
        "fp64_tensor": 67e12,
        "bf16_tensor": 989e12,
        "bytes": 4.8e12,
    },
    "H100": {
        "fp32": 67e12,
        "fp64": 34e12,
        "fp64_tensor": 67e12,
        "bf16_tensor": 989e12,
        "bytes": 3.35e12,
    },
}
#: the Gram's dtypes (each one judged) and the peak that bounds cuBLAS for each
GRAM_DTYPES = {"float32": "fp32", "float64": "fp64_tensor", "bfloat16": "bf16_tensor"}
#: the least throughput of the dispatched Gram against cuBLAS's product, in every dtype
GRAM_TARGET = 0.9


def phase_scan_batch(
    n_widths: int = 8,
    repeats: int = 6,
    n: int = 4,
    d: int = 1,
    seed: int = 0,
    dtype=np.float32,
    lo: int = 128,
    hi: int = 4096,
):
    """(X, y, a, W, b, offsets, alpha) for a ragged phase-scan batch (shared X)."""
    r = np.random.default_rng(seed)
    widths = np.tile(np.unique(np.geomspace(lo, hi, n_widths).astype(int)), repeats)
    off = offsets_from_widths(widths)
    M = int(off[-1])
    X = np.linspace(-0.5, 0.5, n)[:, None].repeat(d, 1)
    y = np.broadcast_to(X[:, 0] ** 2, (widths.size, n))
    a = r.standard_normal(M)
    W = r.standard_normal((M, d))
    b = r.standard_normal(M)
    alpha = r.uniform(0.5, 2.0, widths.size)
    cast = [np.ascontiguousarray(v, dtype=dtype) for v in (X, y, a, W, b)]
    return (*cast, off, alpha.astype(dtype))


def grouped_flops(n: int, M: int, d: int) -> float:
    """≈ FLOPs of one grouped step: forward 2nd + backward 2nd per neuron and point, ×2."""
    return 8.0 * n * M * (d + 1)


def timeit(fn: Callable[[], object], repeat: int = 5, sync: Callable[[], None] | None = None):
    """Best-of wall time in seconds after one warm-up call."""
    fn()
    if sync:
        sync()
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        best = min(best, time.perf_counter() - t0)
    return best


def cpu_grouped_vs_loop(repeat: int = 3) -> dict:
    args = phase_scan_batch(repeats=3, dtype=np.float64)
    X, y, a, W, b, off, al = args
    vec = timeit(lambda: cpu.grouped_two_layer_step(X, y, a, W, b, off, al, "relu"), repeat)
    loop = timeit(lambda: cpu.grouped_two_layer_step_loop(X, y, a, W, b, off, al, "relu"), repeat)
    return {"vectorized_s": vec, "loop_s": loop, "speedup": loop / vec}


def cpu_gram_vs_loop(batch: int = 64, m: int = 64, d: int = 32, repeat: int = 3) -> dict:
    W = np.random.default_rng(1).standard_normal((batch, m, d))

    def naive():
        out = np.empty((batch, m, m))
        for i in range(batch):
            nrm = np.linalg.norm(W[i], axis=1)
            for j in range(m):
                out[i, j] = W[i] @ W[i, j] / (nrm * nrm[j])
        return out

    vec = timeit(lambda: cpu.cosine_gram(W), repeat)
    loop = timeit(naive, repeat)
    return {"vectorized_s": vec, "loop_s": loop, "speedup": loop / vec}


# ----------------------------------------------------------------------------- GPU
@dataclass(frozen=True)
class BenchDevice:
    """Where the GPU benchmarks run: the kernels' launch device (:mod:`launch`), the torch
    device of the baselines, a synchronization of both, and how a float32 host array
    becomes the kernels' bf16 input (a CUDA torch bf16 tensor; bf16 bits for the
    emulation)."""

    name: str
    launch: launch.Device
    torch_device: str
    sync: Callable[[], None]
    bf16: Callable[[np.ndarray], Any]

    @property
    def xp(self) -> Any:
        return self.launch.xp


def cuda_bench_device() -> BenchDevice:
    """The CUDA device through CuPy (needs the cupy backend)."""
    import torch  # noqa: PLC0415  # lazy: torch baselines of the GPU benchmarks only

    if cp is None:
        raise RuntimeError("the CUDA benchmarks need the cupy backend (SMALLINIT_BACKEND)")
    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()

    def sync() -> None:
        cp.cuda.Device().synchronize()
        torch.cuda.synchronize()

    def bf16(x: np.ndarray) -> Any:
        return torch.from_numpy(np.ascontiguousarray(x, np.float32)).cuda().bfloat16()

    return BenchDevice(name, gpu._cupy_device(), "cuda", sync, bf16)


def emulated_bench_device() -> BenchDevice:
    """The kernels' CPU emulation (:mod:`emulation`) with CPU torch baselines: the GPU
    benchmarks' code on the CPU (a dry run; the times are not the GPU's)."""
    return BenchDevice(
        "CPU emulation", emulation.device(), "cpu", lambda: None, emulation.bf16_bits
    )


def _torch_baselines(args, device):
    """Per-network loop and padded-bmm closures in torch (autograd) for the same batch."""
    import torch  # noqa: PLC0415  # lazy: torch baselines of the GPU benchmarks only

    X, y, a, W, b, off, al = (torch.as_tensor(np.asarray(v), device=device) for v in args)
    G = off.numel() - 1
    widths = (off[1:] - off[:-1]).tolist()
    starts = off[:-1].tolist()
    mmax = max(widths)
    n = X.shape[0]

    def per_network():
        out = []
        for g in range(G):
            s, w = starts[g], widths[g]
            ag = a[s : s + w].detach().requires_grad_(True)
            Wg = W[s : s + w].detach().requires_grad_(True)
            bg = b[s : s + w].detach().requires_grad_(True)
            f = torch.relu(X @ Wg.T + bg) @ ag / al[g]
            loss = 0.5 * torch.mean((f - y[g]) ** 2)
            out.append(torch.autograd.grad(loss, (ag, Wg, bg)))
        return out

    idx = torch.zeros(G, mmax, dtype=torch.long, device=device)
    mask = torch.zeros(G, mmax, dtype=torch.bool, device=device)
    for g in range(G):
        idx[g, : widths[g]] = torch.arange(starts[g], starts[g] + widths[g], device=device)
        mask[g, : widths[g]] = True
    ap = torch.where(mask, a[idx], 0)
    Wp = torch.where(mask[..., None], W[idx], 0)
    bp = torch.where(mask, b[idx], 0)
    Xb = X.expand(G, n, X.shape[1])

    def padded():
        ag, Wg, bg = (t.detach().requires_grad_(True) for t in (ap, Wp, bp))
        H = torch.relu(torch.bmm(Xb, Wg.transpose(1, 2)) + bg[:, None, :])
        f = torch.bmm(H, ag[..., None])[..., 0] / al[:, None]
        loss = 0.5 * torch.mean((f - y) ** 2, dim=1).sum()
        return torch.autograd.grad(loss, (ag, Wg, bg))

    return per_network, padded


def gpu_grouped_benchmark(
    dev: BenchDevice | None = None, repeat: int = 20, batch: dict | None = None
) -> dict:
    """The grouped step on ``dev`` (default CUDA) against the per-network torch loop and
    the padded ``torch.bmm`` on its torch device; ``batch``: :func:`phase_scan_batch`'s
    arguments (default its phase-scan batch)."""
    dev = dev or cuda_bench_device()
    args = phase_scan_batch(dtype=np.float32, **(batch or {}))
    X, y, a, W, b, off, al = args
    Xd, yd, ad, Wd, bd = (dev.xp.asarray(v) for v in (X, y, a, W, b))

    def ours():
        return launch.grouped_two_layer_step(dev.launch, Xd, yd, ad, Wd, bd, off, al, "relu")

    per_network, padded = _torch_baselines(args, dev.torch_device)
    t_ours = timeit(ours, repeat, dev.sync)
    t_loop = timeit(per_network, max(1, min(3, repeat // 5)), dev.sync)
    t_pad = timeit(padded, repeat, dev.sync)
    M, n, d = W.shape[0], X.shape[0], W.shape[1]
    fl = grouped_flops(n, M, d)
    return {
        "device": dev.name,
        "networks": int(off.size - 1),
        "neurons": int(M),
        "n": int(n),
        "d": int(d),
        "ours_s": t_ours,
        "torch_loop_s": t_loop,
        "torch_padded_bmm_s": t_pad,
        "speedup_vs_loop": t_loop / t_ours,
        "speedup_vs_padded": t_pad / t_ours,
        "ours_gflops": fl / t_ours / 1e9,
        "targets": {"vs_loop": 3.0, "vs_padded": 1.2},
    }


def _gram_baseline(dev: BenchDevice, W: np.ndarray, dtype: str) -> Callable[[], Any]:
    """cuBLAS's batched product of the row-normalized W (what the Gram computes), in
    ``dtype``: CuPy's matmul for float32/float64, torch's for bf16."""
    if dtype == "bfloat16":
        import torch  # noqa: PLC0415  # lazy: torch baselines of the GPU benchmarks only

        Wt = dev.bf16(W) if dev.torch_device == "cuda" else torch.from_numpy(W).bfloat16()

        def bf16_product():
            N = Wt / torch.linalg.vector_norm(Wt.float(), dim=-1, keepdim=True).bfloat16()
            return torch.matmul(N, N.transpose(-1, -2))

        return bf16_product
    xp = dev.xp
    Wd = xp.asarray(W.astype(dtype))

    def product():
        N = Wd / xp.linalg.norm(Wd, axis=-1, keepdims=True)
        return xp.matmul(N, N.transpose(0, 2, 1))

    return product


def gpu_gram_benchmark(
    dev: BenchDevice | None = None,
    shapes=((1, 4096, 4096), (16, 1024, 1024), (64, 512, 256)),
    repeat: int = 20,
    dtypes=tuple(GRAM_DTYPES),
) -> list[dict]:
    """Both paths of the cosine Gram on ``dev`` (default CUDA) — ``ours`` (the symmetric
    tiled kernel) and ``library`` (cuBLAS, then the fused normalization) — against cuBLAS's
    full batched product, for every shape and dtype (module docstring). Each row has both
    time ratios (cuBLAS time / the path's: ≥ 1 means faster than cuBLAS), the largest
    difference of each from the float64 reference, and the path :func:`.gram_paths.choose`
    picks for its dtype from all the rows with that path's ratio (``chosen_ratio``, the one
    judged against :data:`GRAM_TARGET`)."""
    dev = dev or cuda_bench_device()
    peak = next((v for k, v in PEAKS.items() if k in dev.name), None)
    rows = []
    for batch, m, d in shapes:
        W = np.random.default_rng(batch * m + d).standard_normal((batch, m, d)).astype(np.float32)
        want = cpu.cosine_gram(W.astype(np.float64))
        for dtype in dtypes:
            W_in = dev.bf16(W) if dtype == "bfloat16" else dev.xp.asarray(W.astype(dtype))

            def ours(W_in=W_in):
                return launch.cosine_gram(dev.launch, W_in)

            def library(W_in=W_in):
                return launch.cosine_gram_library(dev.launch, W_in)

            blas = _gram_baseline(dev, W, dtype)
            t_ours, t_blas = timeit(ours, repeat, dev.sync), timeit(blas, repeat, dev.sync)
            t_lib = timeit(library, repeat, dev.sync)
            got, got_lib = (_host_copy(f()) for f in (ours, library))
            fl = 2.0 * batch * m * m * d  # full product, the work cuBLAS does
            row = {
                "dtype": dtype,
                "batch": batch,
                "m": m,
                "d": d,
                "ours_s": t_ours,
                "cublas_s": t_blas,
                "throughput_ratio": t_blas / t_ours,
                "ours_effective_gflops": fl / t_ours / 1e9,
                "cublas_gflops": fl / t_blas / 1e9,
                "max_abs_diff_vs_float64": float(np.abs(got - want).max()),
                "library_s": t_lib,
                "library_ratio": t_blas / t_lib,
                "library_max_abs_diff_vs_float64": float(np.abs(got_lib - want).max()),
                "target_ratio": GRAM_TARGET,
            }
            if peak:
                row["cublas_share_of_peak"] = fl / t_blas / peak[GRAM_DTYPES[dtype]]
                row["ours_share_of_fp32_peak"] = fl / t_ours / peak["fp32"]
            rows.append(row)
    paths = gram_paths.choose(rows)
    for row in rows:
        row["chosen_path"] = paths[row["dtype"]]
        row["chosen_ratio"] = row["cublas_s"] / row[f"{row['chosen_path']}_s"]
    return rows


def _host_copy(x: Any) -> np.ndarray:
    return x.get() if hasattr(x, "get") else np.asarray(x)


def _on_host(W: Any) -> list[dict[str, float]]:
    """``measure_all`` of each matrix of the torch stack ``W``, one at a time on the host."""
    return [measure_all(w.cpu().numpy()) for w in W]


def gpu_stack_benchmark(
    dev: BenchDevice | None = None, shapes=((16, 512, 512), (8, 1536, 512)), repeat: int = 5
) -> list[dict]:
    """:func:`stack.measure_stack` of a torch stack on ``dev``'s torch device (on CUDA one
    batched Gram and SVD on the device) against the per-matrix ``measure_all`` loop on host
    copies (what the traced probes did before): the shapes of W_Q/W_K of 8 layers at
    d = 512 and the FFN inputs."""
    import torch  # noqa: PLC0415  # lazy: torch baselines of the GPU benchmarks only

    dev = dev or cuda_bench_device()
    rows = []
    for batch, m, d in shapes:
        W = torch.randn(batch, m, d, device=dev.torch_device)
        t_stack = timeit(partial(measure_stack, W), repeat, dev.sync)
        t_loop = timeit(partial(_on_host, W), 1, dev.sync)
        got, want = measure_stack(W), _on_host(W)
        err = max(
            abs(got[k][i] - want[i][k]) / max(abs(want[i][k]), 1e-12)
            for i in range(batch)
            for k in want[i]
        )
        rows.append(
            {
                "batch": batch,
                "m": m,
                "d": d,
                "stack_s": t_stack,
                "host_loop_s": t_loop,
                "speedup": t_loop / t_stack,
                "max_rel_diff": float(err),
            }
        )
    return rows
