"""The "gram" step size of the two-layer engines, written once for any array namespace.

Both toy engines (JAX in :mod:`smallinit.toy.twolayer`, NumPy/CuPy in
:mod:`smallinit.toy.grouped_engine`) call these functions with their own array module
``xp`` (``jax.numpy``, ``numpy`` or ``cupy``), so the step rule is the same arithmetic in
both. Setting (docs/science.md §2, Luo et al. 2021, rescaled variables with P = diag(1/κ', κ' I)):

    K = (κ²/n) (SS/κ' + κ' DD ∘ X̃X̃ᵀ),   SS_ij = Σ_k σ(h_ik)σ(h_jk),
                                          DD_ij = Σ_k ā_k² σ'(h_ik)σ'(h_jk),
    η̄ = c / (λ̂_max(K) + κ max_k cross_k),

where K = J P Jᵀ / n is the tangent Gram matrix of the outputs, λ̂_max an upper bound of
its top eigenvalue (:func:`top_eigenvalue_bound`) and cross_k the per-neuron curvature
bound of the module docstring of :mod:`smallinit.toy.twolayer`. Leading batch axes are
allowed everywhere (one network per leading index).
"""

from __future__ import annotations


def matmul(A, B):
    """Batched A @ B (the default product of :func:`top_eigenvalue_bound`)."""
    return A @ B


def tangent_gram(SS, DD, XX, kappa, kappa_p, n: int):
    """K (..., n, n) from SS, DD (..., n, n), X̃X̃ᵀ (n, n) and κ, κ' (...)."""
    kp = kappa_p[..., None, None]
    return (kappa**2 / n)[..., None, None] * (SS / kp + kp * DD * XX)


def top_eigenvalue_bound(K, xp, mm=matmul, squarings: int = 4):
    """Upper bound of λ_max of PSD n×n matrices K (..., n, n): tr(K^p)^{1/p} with
    p = 2^squarings lies in [λ_max, n^{1/p} λ_max] (1.09 λ_max for n = 4, p = 16). Tiny
    products instead of an eigendecomposition (slow when batched on CPU); K is normalized by
    its trace first so the powers neither overflow nor underflow. ``mm`` multiplies stacks
    of n×n matrices (the JAX engine passes a broadcast sum, faster than batched GEMM there)."""
    tr = xp.trace(K, axis1=-2, axis2=-1)
    A = K / xp.where(tr > 0, tr, 1.0)[..., None, None]
    for _ in range(squarings):
        A = mm(A, A)
    return tr * xp.maximum(xp.trace(A, axis1=-2, axis2=-1), 0.0) ** (1.0 / 2**squarings)


def gram_rate(K, cross_max, kappa, lr_factor: float, xp, mm=matmul):
    """η̄ = c / (λ̂_max(K) + κ max_k cross_k), one value per network (...)."""
    return lr_factor / (top_eigenvalue_bound(K, xp, mm) + kappa * cross_max)
