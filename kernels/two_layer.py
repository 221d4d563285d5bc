"""The two-layer network's gradient step, written once for any array namespace.

This module is the one definition of the toy's step: the forward pass, the loss, its
closed-form gradients and the preconditioned descent step of one network. Every function
takes plain arrays of one array namespace (``numpy``, ``jax.numpy`` or ``cupy``; ``xp``
where a function needs one by name) and works for one network at a time.

Model (docs/science.md §2; Luo, Xu, Ma, Zhang, JMLR 2021, eqs. 2-4), one network of width m
on n inputs x̃_i ∈ R^d (the toy's x̃ = (x, 1) carries the bias as its last coordinate),
with output scale s (κ = β1β2/α in the toy's rescaled variables; 1/α for the kernels'
f = (1/α) Σ a σ(w·x + b)):

    h = X̃ W                      (n × m: column k holds neuron k's w_k·x̃_i; W is d × m)
    S = σ(h),  D = σ'(h)
    f = s S a,  e = f − y,  r = e / n,  R = (1/2n) Σ_i e_i² = ½ mean_i e_i²

Differentiating R (chain rule, ∂f_i/∂a_k = s σ(h_ik), ∂f_i/∂w_jk = s a_k σ'(h_ik) x̃_ij):

    ∇_a R = s Sᵀ r,   ∇_{w_k} R = s a_k G_k,   G_jk = Σ_i x̃_ij r_i σ'(h_ik)

The step of size η̄ (docs/science.md §2: the rescaled gradient flow dā/dt̄ = −(1/κ') ∇_ā R,
dw̄/dt̄ = −κ' ∇_w̄ R, discretized) is

    ā ← ā − (η̄/κ') ∇_ā R = ā − (η̄ κ/κ') Sᵀ r,
    w̄ ← w̄ − η̄ κ' ∇_w̄ R  = w̄ − (η̄ κ' κ) ā ∘ G,

written with κ taken out of the sums (one product of scalars per step instead of a
scaling of every sum).

Who runs it: the toy's one step (``smallinit.toy.twolayer._single_step``, taken by both
of the JAX engine's paths: every CPU scan's one-network loop and, vmapped, the lockstep
batch of accelerators) calls these functions with ``jax.numpy``, operation for operation
the arithmetic it has always had; :func:`loss_and_gradients` is the reference of the toy's
``gradients`` and, over NumPy, of the kernels' per-network loop
(:func:`smallinit.kernels.cpu.grouped_two_layer_step_loop`). One kernel sums in another
order and is tested against this module instead of calling it: the grouped step over a
ragged batch of networks of many widths (``grouped_step.cu``, which cannot call Python,
and its vectorized NumPy fallback :func:`smallinit.kernels.cpu.grouped_two_layer_step`).
Their tests: tests/toy/test_toy_engine.py (the toy's paths against the plain step built
from here), tests/kernels/test_kernels_two_layer.py (this module against autodiff) and
tests/kernels/test_kernels_batched.py, test_kernels_emulated.py, test_kernels_gpu.py (the
grouped kernel against the per-network loop over this module).

The sums over the n inputs of :func:`input_weight_sums` are written out (n and d are tiny
in the toy: a loop of whole-row products is faster than a contraction there), and the
order of every operation is the one the study's numbers were computed with: a change here
changes the toy's figures in their last bits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Array = Any
#: σ and σ' together: h ↦ (σ(h), σ'(h)), elementwise
Sigma = Callable[[Array], tuple[Array, Array]]


def hidden(X: Array, W: Array, sigma: Sigma) -> tuple[Array, Array, Array]:
    """(h, S, D) = (X̃ W, σ(h), σ'(h)), each n × m, from X̃ (n, d) and W (d, m)."""
    h = X @ W
    S, D = sigma(h)
    return h, S, D


def outputs(S: Array, a: Array, scale: Any) -> Array:
    """f = s S a (n,): the network's outputs on the n inputs."""
    return scale * (S @ a)


def residual(xp: Any, f: Array, y: Array) -> tuple[Array, Array]:
    """(r, R): the scaled residual r = (f − y)/n and the loss R = ½ mean (f − y)² over the
    last axis (the n inputs)."""
    e = f - y
    return e / y.shape[-1], 0.5 * xp.mean(e * e, axis=-1)


def input_weight_sums(xp: Any, X: Array, r: Array, D: Array) -> Array:
    """G (d, m), G_jk = Σ_i x̃_ij r_i σ'(h_ik): ∇_{w_k} R = s a_k G_k. Written out over the
    inputs i (module docstring)."""
    n, d = X.shape
    c = X * r[:, None]  # c_ij = x̃_ij r_i
    return xp.stack([sum(c[i, j] * D[i] for i in range(n)) for j in range(d)])


def output_weight_sums(r: Array, S: Array) -> Array:
    """Sᵀ r (m,): ∇_a R = s Sᵀ r."""
    return r @ S


def descend(
    a: Array, W: Array, r: Array, S: Array, G: Array, eta: Any, kappa: Any, kappa_p: Any
) -> tuple[Array, Array]:
    """The preconditioned step (ā − (η̄ κ/κ') Sᵀ r, w̄ − (η̄ κ' κ) ā ∘ G) from the residual
    r, S = σ(h) and G of :func:`input_weight_sums`: ā − (η̄/κ') ∇_ā R and w̄ − η̄ κ' ∇_w̄ R."""
    a_new = a - (eta * kappa / kappa_p) * output_weight_sums(r, S)
    W_new = W - (eta * kappa_p * kappa) * a * G
    return a_new, W_new


def loss_and_gradients(
    xp: Any, X: Array, y: Array, a: Array, W: Array, scale: Any, sigma: Sigma
) -> tuple[Array, Array, Array, Array]:
    """(R, ∇_a R (m,), ∇_W R (d, m), f (n,)) of one network, from X̃ (n, d), y (n,), a (m,),
    W (d, m) and the output scale s: the plain gradients of the module docstring."""
    _, S, D = hidden(X, W, sigma)
    f = outputs(S, a, scale)
    r, loss = residual(xp, f, y)
    G = input_weight_sums(xp, X, r, D)
    return loss, scale * output_weight_sums(r, S), scale * (a * G), f
