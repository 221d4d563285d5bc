"""Public batched primitives, dispatched to the CuPy kernels or the NumPy references.

Every function accepts NumPy, torch, JAX (or CuPy) arrays of float32/float64 (torch bf16 is
accepted and computed in float32) and returns its arrays in the family of its main input
(``W`` for :func:`cosine_gram` and :func:`grouped_two_layer_step`).
On the CPU backend the computation is NumPy; on the CuPy backend it is the CUDA kernels in
``*.cu`` (see :mod:`gpu`).

Ragged layout of :func:`grouped_two_layer_step`: G independent networks of widths m_g are
stored as *concatenated neurons*: ``W`` is (M, d), ``a`` and ``b`` are (M,) with
M = Σ m_g, and network g owns rows ``offsets[g]:offsets[g+1]`` (``offsets`` is (G+1,),
nondecreasing, from 0 to M; a width may be 0). The data is either shared, ``X`` (n, d) and
``y`` (n,), or per network, ``X`` (G, n, d) and ``y`` (G, n). ``alpha`` is a scalar or (G,).
Build ``offsets`` from widths with :func:`offsets_from_widths`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import cpu, pointwise
from .backend import family, like, to_numpy, use_gpu
from .layout import GroupedStep, check_layout

_FLOATS = (np.float32, np.float64)


def _gpu():
    from . import gpu  # noqa: PLC0415  # lazy: the CUDA path loads with the first GPU array

    return gpu


def _host(x: Any, name: str, dtype=None) -> np.ndarray:
    arr = to_numpy(x)
    if dtype is None:
        dtype = arr.dtype if arr.dtype in _FLOATS else np.float64
    if not np.issubdtype(arr.dtype, np.number) and arr.dtype != np.bool_:
        raise ValueError(f"{name} has dtype {arr.dtype}; a real floating array is required")
    return np.ascontiguousarray(arr, dtype=dtype)


def offsets_from_widths(widths) -> np.ndarray:
    """(G+1,) int64 offsets [0, m_0, m_0+m_1, ...] for the concatenated-neuron layout."""
    w = np.asarray(widths)
    if w.ndim != 1 or (w.size and (w.min() < 0 or not np.issubdtype(w.dtype, np.integer))):
        raise ValueError(f"widths={widths!r} must be a 1-d sequence of non-negative integers")
    return np.concatenate([[0], np.cumsum(w, dtype=np.int64)])


def cosine_gram(W: Any) -> Any:
    """Batched cosine Gram: ``G[..., i, j] = cos(W[..., i, :], W[..., j, :])`` (m × m).

    Rows are normalized by their Euclidean norm, zero rows give 0 (diagonal too), values are
    clipped to [−1, 1]. ``W`` is (..., m, d) with any leading batch axes.
    """
    if family(W) == "other":
        W = np.asarray(W, dtype=np.float64)
    shape = tuple(W.shape)
    if len(shape) < 2:
        raise ValueError(f"W has shape {shape}; cosine_gram needs (..., m, d) with ndim >= 2")
    if use_gpu(W):
        return like(_gpu().cosine_gram(W), W)
    return like(cpu.cosine_gram(_host(W, "W")), W)


def grouped_two_layer_step(
    X: Any,
    y: Any,
    a: Any,
    W: Any,
    b: Any = None,
    *,
    offsets: Any,
    alpha: Any = 1.0,
    activation: str = "relu",
) -> GroupedStep:
    """Loss and gradients of a ragged batch of two-layer networks in one call (docs/science.md §2).

    Network g: f_g(x) = (1/α_g) Σ_{k∈g} a_k σ(w_k·x + b_k), R_g = (1/2n) Σ_i (f_g(x_i) − y_i)².
    Returns :class:`GroupedStep` (loss per network, ∂R_g/∂a, ∂R_g/∂W, ∂R_g/∂b or None when
    ``b`` is None, outputs f); each neuron's gradient is that of its own network's loss.
    Layout: see the module docstring. Arrays return in ``W``'s family and dtype.
    """
    pointwise.check(activation)
    if use_gpu(W):
        out = _gpu().grouped_two_layer_step(X, y, a, W, b, offsets, alpha, activation)
        return GroupedStep(*(None if o is None else like(o, W) for o in out))
    hW = _host(W, "W")
    dt = hW.dtype
    hX, hy, ha = _host(X, "X", dt), _host(y, "y", dt), _host(a, "a", dt)
    hb = None if b is None else _host(b, "b", dt)
    off = np.asarray(to_numpy(offsets)).astype(np.int64)
    al = np.asarray(to_numpy(alpha), dtype=dt)
    G, n = check_layout(hX, hy, ha, hW, hb, off, al)
    al = np.broadcast_to(al, (G,))
    hy = np.broadcast_to(hy, (G, n))
    out = cpu.grouped_two_layer_step(hX, hy, ha, hW, hb, off, al, activation)
    return GroupedStep(*(None if o is None else like(o, W) for o in out))
