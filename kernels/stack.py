"""The shared measurements of a *stack* of equal-shape matrices W (B, m, d), in batched calls.

A transformer gives many matrices of one shape (W_Q and W_K of every layer, the FFN input
rows of every layer); measuring them one by one costs B separate Gram products and SVDs.
Here each measurement is one batched call over the stack:

- :func:`measure_stack`: :func:`~smallinit.kernels.measure.measure_all` of every matrix —
  effective rank and top singular share from one batched SVD, mean |cos| and the leader
  clusters from one batched cosine Gram;
- :func:`condensation_scores`: :func:`~smallinit.kernels.measure.condensation_score` of
  every matrix with its amplitudes (B, m).

Where it runs: on the CuPy backend, a CUDA torch tensor (or a CuPy array) is handed to CuPy
through DLPack without a copy (:func:`backend.to_device`), cast to float64 on the device, and
the Gram (the symmetric kernel of ``cosine_gram.cu``) and the SVD (``cupy.linalg.svd``) run
there; only the (B,) results and, for the greedy leader loop, the bit-packed adjacency
"cos ≥ t" (m²/8 bytes per matrix) come back to the host. Everything else (NumPy arrays, CPU
tensors, or any input on the CPU backend) takes the NumPy path, which computes exactly what
the per-matrix functions compute (same float64 operations slice by slice; the tests check
equality). GPU results agree with the CPU path to float64 rounding, except that a cosine
within rounding of the threshold may fall on the other side of it.

Results are NumPy arrays of shape (B,) (cluster counts as floats, like ``measure_all``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import gpu, measure
from .backend import BACKEND, cp, family, to_device
from .measure import DEFAULT_THRESHOLD, DEFAULT_TOP_K


def _on_gpu(W: Any) -> bool:
    if BACKEND != "cupy":
        return False
    fam = family(W)
    return fam == "cupy" or (fam == "torch" and bool(W.is_cuda))


def _check_stack(shape: tuple[int, ...]) -> None:
    if len(shape) != 3:
        raise ValueError(f"W has shape {shape}; a stack (B, m, d) of matrices is required")


def _device() -> tuple[Any, Any, Any]:
    """(array module, batched cosine Gram, hand-over) of the device path: CuPy, the
    ``cosine_gram.cu`` kernel and DLPack (the tests substitute NumPy stand-ins)."""
    return cp, gpu.cosine_gram, to_device


def _gpu_stack(W: Any, threshold: float, weights: Any = None):
    """Device Gram and leader labels of a stack (see the module docstring)."""
    cp, gram, hand_over = _device()
    if family(W) == "torch" and str(W.dtype) == "torch.bfloat16":  # CuPy has no bf16
        W = W.float()
    Wd = cp.ascontiguousarray(hand_over(W), dtype=cp.float64)
    B, m, _ = Wd.shape
    G = gram(Wd)
    norms = cp.linalg.norm(Wd, axis=-1)
    wt = norms if weights is None else cp.asarray(hand_over(weights), dtype=cp.float64)
    bits = cp.asnumpy(cp.packbits(G >= threshold))  # flat, 8 entries a byte
    near = np.unpackbits(bits, count=B * m * m).astype(bool).reshape(B, m, m)
    free, wt = cp.asnumpy(norms > 0), cp.asnumpy(wt)
    labels = []
    for b in range(B):  # leaders in decreasing weight, ties by index (as on the CPU)
        adj = near[b]
        labels.append(
            measure._leaders(
                np.argsort(-wt[b], kind="stable"), free[b], lambda cand, adj=adj: adj[cand]
            )
        )
    return Wd, G, labels


def _device_singular_values(Wd: Any) -> Any:
    """Singular values (B, min(m, d)) of a CuPy stack: one batched ``cupy.linalg.svd``
    where this CuPy batches it, else one call per matrix (still on the device)."""
    cp = _device()[0]
    if 0 in Wd.shape:
        return cp.zeros(Wd.shape[:1] + (min(Wd.shape[1:]),), dtype=Wd.dtype)
    try:
        return cp.linalg.svd(Wd, compute_uv=False)
    except Exception:  # a CuPy without batched SVD
        return cp.stack([cp.linalg.svd(w, compute_uv=False) for w in Wd])


def measure_stack(W: Any, *, threshold: float = DEFAULT_THRESHOLD) -> dict[str, np.ndarray]:
    """``measure_all`` of every matrix of the stack W (B, m, d): (B,) arrays of
    effective_rank, top_singular_share, cluster_count and mean_abs_cosine."""
    t = measure._check_threshold(threshold)
    _check_stack(tuple(W.shape))
    if _on_gpu(W):
        cp = _device()[0]
        Wd, G, labels = _gpu_stack(W, t)
        B, m, _ = Wd.shape
        erank, share = measure.spectrum_measures(_device_singular_values(Wd), cp)
        if m < 2:
            mac = np.zeros(B)
        else:
            g = cp.abs(G)
            diag = cp.diagonal(g, 0, 1, 2).sum(-1)
            mac = cp.asnumpy((g.sum(axis=(1, 2)) - diag) / (m * (m - 1)))
        clusters = np.array([lab.max() + 1 if lab.size else 0 for lab in labels], float)
        return {
            "effective_rank": cp.asnumpy(erank),
            "top_singular_share": cp.asnumpy(share),
            "cluster_count": clusters,
            "mean_abs_cosine": np.asarray(mac, float),
        }
    w = measure._np(W, "W")
    s = measure._singular_values(w)
    erank, share = measure.spectrum_measures(s)
    return {
        "effective_rank": np.asarray(erank, float),
        "top_singular_share": np.asarray(share, float),
        "cluster_count": np.array([measure.cluster_count(x, t) for x in w], float),
        "mean_abs_cosine": np.array([measure.mean_abs_cosine(x) for x in w], float),
    }


def condensation_scores(
    W: Any, amplitude: Any, *, top_k: int = DEFAULT_TOP_K, threshold: float = DEFAULT_THRESHOLD
) -> np.ndarray:
    """``condensation_score`` of every matrix of the stack W (B, m, d) with its amplitudes
    (B, m): the share of Σ A_k in the ``top_k`` heaviest leader clusters, (B,)."""
    t = measure._check_threshold(threshold)
    _check_stack(tuple(W.shape))
    if tuple(amplitude.shape) != tuple(W.shape[:2]):
        raise ValueError(
            f"amplitude has shape {tuple(amplitude.shape)}; {tuple(W.shape[:2])} is required"
        )
    if not _on_gpu(W):
        amp = measure._np(amplitude, "amplitude")
        return np.array(
            [
                measure.condensation_score(w, a, top_k=top_k, threshold=t)
                for w, a in zip(measure._np(W, "W"), amp, strict=True)
            ]
        )
    if int(top_k) != top_k or top_k < 1:
        raise ValueError(f"top_k={top_k!r} must be a positive integer")
    amp = measure._np(amplitude, "amplitude")
    if np.any(amp < 0) or not np.all(np.isfinite(amp)) or np.any(amp.sum(-1) <= 0):
        raise ValueError("amplitude must be finite, >= 0, with a positive total per matrix")
    _, _, labels = _gpu_stack(W, t, amplitude)
    out = []
    for lab, a in zip(labels, amp, strict=True):
        keep = lab >= 0
        mass = np.sort(np.bincount(lab[keep], weights=a[keep]))[::-1][: int(top_k)]
        out.append(min(1.0, mass.sum() / a.sum()))
    return np.array(out)
