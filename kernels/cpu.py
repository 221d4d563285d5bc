"""CPU reference implementations (vectorized NumPy) of the batched primitives.

This is the code the CPU backend runs and the ground truth the CUDA kernels are tested
against; for the grouped step that ground truth is :func:`grouped_two_layer_step_loop`, a
loop over the networks through the one definition of the two-layer step
(:mod:`.two_layer`), which the vectorized :func:`grouped_two_layer_step` is tested against
too. Inputs are NumPy arrays already validated by :mod:`batched`.

Grouped two-layer step (docs/science.md §2 model, one network g per segment of neurons):

    z_ik = w_k·x_i + b_k,   f_g(x_i) = (1/α_g) Σ_{k∈g} a_k σ(z_ik),
    e_gi = f_g(x_i) − y_gi,  R_g = (1/2n) Σ_i e_gi²,
    ∂R_g/∂a_k = (1/(n α_g)) Σ_i e_gi σ(z_ik),
    δ_ik = (1/(n α_g)) e_gi a_k σ'(z_ik),  ∂R_g/∂w_k = Σ_i δ_ik x_i,  ∂R_g/∂b_k = Σ_i δ_ik.
"""

from __future__ import annotations

import numpy as np

from . import pointwise, two_layer


def row_normalize(W: np.ndarray) -> np.ndarray:
    """Rows divided by their Euclidean norm; zero rows stay zero."""
    norms = np.linalg.norm(W, axis=-1, keepdims=True)
    safe = np.where(norms > 0, norms, 1)
    return np.where(norms > 0, W / safe, 0)


def cosine_gram(W: np.ndarray) -> np.ndarray:
    """G[..., i, j] = cos(W_i, W_j) = (W_i·W_j) / (‖W_i‖‖W_j‖), 0 when either row is zero."""
    N = row_normalize(W)
    G = N @ np.swapaxes(N, -1, -2)
    return np.clip(G, -1, 1, out=G)


def segment_sum(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Sum of ``values[..., k]`` over each segment [offsets[g], offsets[g+1]) (empty → 0)."""
    G = offsets.size - 1
    out = np.zeros(values.shape[:-1] + (G,), dtype=values.dtype)
    widths = np.diff(offsets)
    nonempty = np.flatnonzero(widths > 0)
    if nonempty.size:
        out[..., nonempty] = np.add.reduceat(values, offsets[:-1][nonempty], axis=-1)
    return out


CHUNK_NEURONS = 4096


def grouped_two_layer_step(X, y, a, W, b, offsets, alpha, activation):
    """Vectorized loss, gradients and outputs for a ragged batch of two-layer networks.

    ``X`` is (n, d) shared or (G, n, d) per network; ``y`` is (G, n); ``alpha`` is (G,).
    Returns (loss (G,), grad_a (M,), grad_W (M, d), grad_b (M,) or None, f (G, n)).
    Consecutive networks are processed together in chunks of about ``CHUNK_NEURONS``
    neurons (a wider network is its own chunk), so the (n, neurons) temporaries stay in
    cache; within a chunk everything is one set of array operations.
    """
    G = offsets.size - 1
    bounds = [0]
    for g in range(1, G + 1):
        if offsets[g] - offsets[bounds[-1]] > CHUNK_NEURONS and g - 1 > bounds[-1]:
            bounds.append(g - 1)
    if bounds[-1] != G:
        bounds.append(G)
    if len(bounds) <= 2:
        return _grouped_block(X, y, a, W, b, offsets, alpha, activation)
    parts = []
    for g0, g1 in zip(bounds[:-1], bounds[1:], strict=True):
        lo, hi = int(offsets[g0]), int(offsets[g1])
        parts.append(
            _grouped_block(
                X if X.ndim == 2 else X[g0:g1],
                y[g0:g1],
                a[lo:hi],
                W[lo:hi],
                None if b is None else b[lo:hi],
                offsets[g0 : g1 + 1] - lo,
                alpha[g0:g1],
                activation,
            )
        )
    cat = [np.concatenate([p[i] for p in parts]) for i in (0, 1, 2)]
    gb = None if b is None else np.concatenate([p[3] for p in parts])
    return cat[0], cat[1], cat[2], gb, np.concatenate([p[4] for p in parts])


def _grouped_block(
    X: np.ndarray,
    y: np.ndarray,
    a: np.ndarray,
    W: np.ndarray,
    b: np.ndarray | None,
    offsets: np.ndarray,
    alpha: np.ndarray,
    activation: str,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """One chunk of :func:`grouped_two_layer_step`, fully vectorized."""
    widths = np.diff(offsets)
    n = y.shape[-1]
    if X.ndim == 2:
        Z = X @ W.T  # (n, M)
    else:
        Z = np.einsum("knd,kd->nk", np.repeat(X, widths, axis=0), W)
    if b is not None:
        Z += b
    H, dH = pointwise.forward_and_derivative(activation, Z)
    F = segment_sum(H * a, offsets) / alpha  # (n, G)
    E = F - y.T  # (n, G)
    loss = 0.5 * np.mean(E * E, axis=0)
    coef = np.repeat(1.0 / (n * alpha), widths)  # (M,)
    Ek = np.repeat(E, widths, axis=1)  # (n, M): each neuron sees its network's errors
    ones = np.ones(n, dtype=Z.dtype)
    grad_a = coef * (ones @ (Ek * H))  # column sums through BLAS
    D = Ek * dH
    D *= coef * a  # (n, M)
    if X.ndim == 2:
        grad_W = D.T @ X
    else:
        grad_W = np.einsum("nk,knd->kd", D, np.repeat(X, widths, axis=0))
    grad_b = ones @ D if b is not None else None
    return loss, grad_a, grad_W, grad_b, E.T + y


def grouped_two_layer_step_loop(X, y, a, W, b, offsets, alpha, activation):
    """A loop over the networks, each through the one definition of the step
    (:func:`smallinit.kernels.two_layer.loss_and_gradients`, with output scale 1/α_g and
    the bias as the weight of an input fixed at 1): the same contract as
    :func:`grouped_two_layer_step`, the reference the vectorized step and the CUDA kernel
    are tested against, and the benchmarks' baseline."""
    G = offsets.size - 1
    n = y.shape[-1]
    loss = np.zeros(G, dtype=W.dtype)
    f = np.zeros((G, n), dtype=W.dtype)
    ga, gW = np.zeros_like(a), np.zeros_like(W)
    gb = None if b is None else np.zeros_like(b)

    def sigma(z):
        return pointwise.forward_and_derivative(activation, z)

    for g in range(G):
        lo, hi = int(offsets[g]), int(offsets[g + 1])
        Xg = X if X.ndim == 2 else X[g]
        Wg = W[lo:hi].T  # (d, m): neuron k's input weights in column k
        if b is not None:  # x̃ = (x, 1), w̃_k = (w_k, b_k)
            Xg = np.hstack([Xg, np.ones((n, 1), dtype=Xg.dtype)])
            Wg = np.vstack([Wg, b[lo:hi]])
        loss[g], ga[lo:hi], gWg, f[g] = two_layer.loss_and_gradients(
            np, Xg, y[g], a[lo:hi], Wg, 1.0 / alpha[g], sigma
        )
        gW[lo:hi] = gWg[: W.shape[1]].T
        if gb is not None:
            gb[lo:hi] = gWg[-1]
    return loss, ga, gW, gb, f
