"""Benchmark workloads and baselines, shared by the pytest-benchmark suite and gpu_check.

Phase-scan batch (the toy's hot loop): G networks of widths spread over 128…4096
(log-spaced, repeated), 1-d inputs with a bias, n = 4 points (docs/science.md §2 reference setting).
Baselines: CPU — the per-network NumPy loop; GPU — a per-network torch loop with autograd and
one padded ``torch.bmm`` over the batch (widths padded to the largest, autograd).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from . import cpu, gpu
from .batched import offsets_from_widths
from .measure import measure_all
from .stack import measure_stack

# Peak throughput of known devices (dense, non-tensor-core FP32/FP64 FLOP/s, HBM bytes/s).
PEAKS = {
    "H200": {"fp32": 67e12, "fp64": 34e12, "bytes": 4.8e12},
    "H100": {"fp32": 67e12, "fp64": 34e12, "bytes": 3.35e12},
}


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


def gpu_grouped_benchmark(repeat: int = 20) -> dict:
    import cupy as cp  # noqa: PLC0415
    import torch  # noqa: PLC0415  # lazy: torch baselines of the GPU benchmarks only

    args = phase_scan_batch(dtype=np.float32)
    X, y, a, W, b, off, al = args
    dev = [cp.asarray(v) for v in (X, y, a, W, b)]

    def ours():
        return gpu.grouped_two_layer_step(*dev, off, al, "relu")

    per_network, padded = _torch_baselines(args, "cuda")

    def sync():
        cp.cuda.Device().synchronize()
        torch.cuda.synchronize()

    t_ours = timeit(ours, repeat, sync)
    t_loop = timeit(per_network, max(3, repeat // 5), sync)
    t_pad = timeit(padded, repeat, sync)
    M, n, d = W.shape[0], X.shape[0], W.shape[1]
    fl = grouped_flops(n, M, d)
    return {
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


def gpu_gram_benchmark(
    shapes=((1, 4096, 4096), (16, 1024, 1024), (64, 512, 256)), repeat: int = 20
) -> list[dict]:
    import cupy as cp  # noqa: PLC0415

    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
    peak = next((v for k, v in PEAKS.items() if k in name), None)
    rows = []
    for batch, m, d in shapes:
        W = cp.random.standard_normal((batch, m, d), dtype=cp.float32)

        def ours(W=W):
            return gpu.cosine_gram(W)

        def cublas(W=W):
            N = W / cp.linalg.norm(W, axis=-1, keepdims=True)
            return cp.matmul(N, N.transpose(0, 2, 1))

        sync = cp.cuda.Device().synchronize
        t_ours, t_blas = timeit(ours, repeat, sync), timeit(cublas, repeat, sync)
        err = float(cp.abs(ours() - cublas()).max())
        fl = 2.0 * batch * m * m * d  # full product, the work cuBLAS does
        row = {
            "batch": batch,
            "m": m,
            "d": d,
            "ours_s": t_ours,
            "cublas_s": t_blas,
            "throughput_ratio": t_blas / t_ours,
            "ours_effective_gflops": fl / t_ours / 1e9,
            "cublas_gflops": fl / t_blas / 1e9,
            "max_abs_diff": err,
            "target_ratio": 0.7,
        }
        if peak:
            row["ours_share_of_fp32_peak"] = fl / t_ours / peak["fp32"]
        rows.append(row)
    return rows


def gpu_stack_benchmark(shapes=((16, 512, 512), (8, 1536, 512)), repeat: int = 5) -> list[dict]:
    """:func:`stack.measure_stack` of a CUDA torch stack (one batched Gram and SVD on the
    device) against the per-matrix ``measure_all`` loop on host copies (what the traced
    probes did before): the shapes of W_Q/W_K of 8 layers at d = 512 and the FFN inputs."""
    import cupy as cp  # noqa: PLC0415
    import torch  # noqa: PLC0415  # lazy: torch baselines of the GPU benchmarks only

    def sync():
        cp.cuda.Device().synchronize()
        torch.cuda.synchronize()

    rows = []
    for batch, m, d in shapes:
        W = torch.randn(batch, m, d, device="cuda")
        t_stack = timeit(lambda W=W: measure_stack(W), repeat, sync)
        t_loop = timeit(lambda W=W: [measure_all(w.cpu().numpy()) for w in W], 1, sync)
        got, want = measure_stack(W), [measure_all(w.cpu().numpy()) for w in W]
        err = max(abs(got[k][i] - want[i][k]) / max(abs(want[i][k]), 1e-12)
                  for i in range(batch) for k in want[i])
        rows.append({"batch": batch, "m": m, "d": d, "stack_s": t_stack,
                     "host_loop_s": t_loop, "speedup": t_loop / t_stack,
                     "max_rel_diff": float(err)})
    return rows
