"""``torch.autograd.Function`` wrappers around the batched primitives (for llm).

Forward passes call :mod:`batched` (CUDA kernels on the CuPy backend, NumPy otherwise);
backward passes are written out from the math:

- cosine Gram G = N Nᵀ with N = W / ‖W‖ row-wise: ∂L/∂N = (Ḡ + Ḡᵀ) N and
  ∂L/∂w_i = (n̄_i − n_i (n_i·n̄_i)) / ‖w_i‖ (0 for zero rows; the ±1 clip is ignored);
- C = A B: Ā = C̄ Bᵀ, B̄ = Aᵀ C̄ (through :func:`batched.bmm` again);
- grouped two-layer loss R_g: ∂(Σ_g c_g R_g)/∂θ_k = c_{g(k)} ∂R_{g(k)}/∂θ_k, from the
  gradients the grouped step already returns.
"""

from __future__ import annotations

import numpy as np
import torch

from . import batched
from .cpu import segment_ids


class CosineGram(torch.autograd.Function):
    @staticmethod
    def forward(ctx, W):
        G = batched.cosine_gram(W.detach())
        ctx.save_for_backward(W)
        return G.to(W.dtype)

    @staticmethod
    def backward(ctx, gG):
        (W,) = ctx.saved_tensors
        Wf = W.to(gG.dtype)
        norm = Wf.norm(dim=-1, keepdim=True)
        inv = torch.where(norm > 0, 1 / norm.clamp_min(torch.finfo(norm.dtype).tiny), 0)
        N = Wf * inv
        gN = (gG + gG.transpose(-1, -2)) @ N
        gW = (gN - N * (N * gN).sum(-1, keepdim=True)) * inv
        return gW.to(W.dtype)


class Bmm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return batched.bmm(a.detach(), b.detach()).to(a.dtype)

    @staticmethod
    def backward(ctx, gC):
        a, b = ctx.saved_tensors
        ga = gb = None
        if ctx.needs_input_grad[0]:
            ga = batched.bmm(gC, b.transpose(-1, -2).contiguous()).to(a.dtype)
        if ctx.needs_input_grad[1]:
            gb = batched.bmm(a.transpose(-1, -2).contiguous(), gC).to(b.dtype)
        return ga, gb


class GroupedTwoLayerLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, y, a, W, b, offsets, alpha, activation):
        out = batched.grouped_two_layer_step(
            X.detach(),
            y.detach(),
            a.detach(),
            W.detach(),
            None if b is None else b.detach(),
            offsets=offsets,
            alpha=alpha,
            activation=activation,
        )
        seg = torch.as_tensor(segment_ids(np.asarray(offsets, dtype=np.int64)), device=W.device)
        ctx.save_for_backward(out.grad_a, out.grad_W, *(() if b is None else (out.grad_b,)), seg)
        ctx.has_bias = b is not None
        return out.loss

    @staticmethod
    def backward(ctx, gl):
        saved = ctx.saved_tensors
        ga, gW = saved[0], saved[1]
        gb = saved[2] if ctx.has_bias else None
        c = gl[saved[-1]]
        return (
            None,
            None,
            c * ga,
            c[:, None] * gW,
            None if gb is None else c * gb,
            None,
            None,
            None,
        )


def cosine_gram(W: torch.Tensor) -> torch.Tensor:
    """Differentiable batched cosine Gram of the rows of W (..., m, d)."""
    return CosineGram.apply(W)


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Differentiable batched product (..., m, k) @ (..., k, n)."""
    return Bmm.apply(a, b)


def grouped_two_layer_loss(X, y, a, W, b=None, *, offsets, alpha=1.0, activation="relu"):
    """Per-network loss R_g (G,) of the ragged batch, differentiable w.r.t. a, W, b."""
    return GroupedTwoLayerLoss.apply(X, y, a, W, b, offsets, alpha, activation)
