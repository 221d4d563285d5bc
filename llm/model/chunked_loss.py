"""Fused, chunked output layer + cross-entropy that never holds the tokens × vocabulary logits.

For hidden states h (N, d), output weights W (V, d), optional bias b (V) and targets y (N),
the mean next-token loss is

    L = (1/n) Σ_{i valid} [ lse(z_i) − z_{i, y_i} ],   z_i = h_i Wᵀ + b,   lse(z) = log Σ_v e^{z_v}

(n = the number of targets not equal to ``ignore_index``, as ``F.cross_entropy``). Its
gradient with g = ∂out/∂L is, with p_i = softmax(z_i) and e_y the one-hot target row,

    ∂L/∂z_i = (g/n) (p_i − e_{y_i})  (0 for ignored rows),
    ∂L/∂h = (∂L/∂z) W,   ∂L/∂W = (∂L/∂z)ᵀ h,   ∂L/∂b = Σ_i ∂L/∂z_i.

:class:`ChunkedLinearCrossEntropy` evaluates both over blocks of ``chunk`` rows of h: the
forward keeps only lse (N floats) and the backward recomputes each block's logits from h and
W, so the largest temporary is chunk × V instead of N × V (the trick of Liger Kernel's
fused linear cross-entropy, Hsu et al. 2024, and of Wijmans et al. 2024's "Cut Your Losses").
Under autocast the matmuls run in the autocast dtype (h and W cast to it, as autocast casts
``nn.Linear``'s inputs) and the log-sum-exp in float32, as the plain path upcasts its logits;
otherwise everything runs in h's dtype promoted to at least float32.
"""

from __future__ import annotations

import torch


def compute_dtype(h: torch.Tensor) -> torch.dtype:
    """The matmuls' dtype: autocast's where it is on for h's device, else h's."""
    kind = h.device.type
    if torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind)
    return h.dtype


def _blocks(n_rows: int, chunk: int) -> list[slice]:
    """The row blocks [0, chunk), [chunk, 2·chunk), … covering n_rows rows."""
    return [slice(start, start + chunk) for start in range(0, n_rows, chunk)]


def _block_logits(h, weight, bias, wide):
    """One block's logits h Wᵀ (+ b) in the matmul dtype, then widened for the loss."""
    z = h @ weight.t()
    if bias is not None:
        z = z + bias
    return z.to(wide)


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of (h Wᵀ + b) against y, ``chunk`` rows at a time (module doc)."""

    @staticmethod
    def forward(ctx, h, weight, bias, targets, chunk: int, ignore_index: int):
        dtype = compute_dtype(h)
        wide = torch.promote_types(dtype, torch.float32)
        hc, wc = h.to(dtype), weight.to(dtype)
        bc = None if bias is None else bias.to(dtype)
        n_rows = h.shape[0]
        lse = torch.empty(n_rows, dtype=wide, device=h.device)
        total = torch.zeros((), dtype=wide, device=h.device)
        valid = targets != ignore_index
        safe = torch.where(valid, targets, 0)
        with torch.autocast(h.device.type, enabled=False):
            for rows in _blocks(n_rows, chunk):
                z = _block_logits(hc[rows], wc, bc, wide)
                lse[rows] = torch.logsumexp(z, dim=1)
                picked = z.gather(1, safe[rows, None]).squeeze(1)
                total = total + torch.where(valid[rows], lse[rows] - picked, 0).sum()
        count = valid.sum()
        ctx.save_for_backward(h, weight, bias, targets, lse, count)
        ctx.chunk, ctx.ignore_index, ctx.dtype = chunk, ignore_index, dtype
        return total / count

    @staticmethod
    def backward(ctx, grad_out):
        h, weight, bias, targets, lse, count = ctx.saved_tensors
        dtype, wide = ctx.dtype, lse.dtype
        hc, wc = h.to(dtype), weight.to(dtype)
        bc = None if bias is None else bias.to(dtype)
        valid = targets != ctx.ignore_index
        safe = torch.where(valid, targets, 0)
        scale = grad_out.to(wide) / count
        grad_h = torch.empty_like(h) if ctx.needs_input_grad[0] else None
        grad_w = torch.zeros(weight.shape, dtype=wide, device=weight.device)
        grad_b = None if bias is None else torch.zeros(bias.shape, dtype=wide, device=bias.device)
        with torch.autocast(h.device.type, enabled=False):
            for rows in _blocks(h.shape[0], ctx.chunk):
                z = _block_logits(hc[rows], wc, bc, wide)
                dz = torch.exp(z - lse[rows, None])
                dz.scatter_add_(1, safe[rows, None], torch.full_like(lse[rows, None], -1.0))
                dz = dz * torch.where(valid[rows], scale, 0)[:, None]
                if grad_b is not None:
                    grad_b += dz.sum(0)
                dz = dz.to(dtype)
                if grad_h is not None:
                    grad_h[rows] = (dz @ wc).to(h.dtype)
                grad_w += (dz.t() @ hc[rows]).to(wide)
        grad_w = grad_w.to(weight.dtype) if ctx.needs_input_grad[1] else None
        if grad_b is not None:
            grad_b = grad_b.to(bias.dtype)
        return grad_h, grad_w, grad_b, None, None, None


def chunked_cross_entropy(
    h: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    chunk: int,
    *,
    ignore_index: int = -100,
) -> torch.Tensor:
    """Mean cross-entropy of the logits ``h Wᵀ + b`` against ``targets`` without building
    them whole: ``h`` (N, d) or (B, T, d), ``targets`` of the same leading shape, ``chunk``
    ≥ 1 rows of logits at a time (module docstring)."""
    if chunk < 1:
        raise ValueError(f"chunk={chunk} is not allowed; it must be >= 1")
    return ChunkedLinearCrossEntropy.apply(
        h.reshape(-1, h.shape[-1]), weight, bias, targets.reshape(-1), int(chunk), ignore_index
    )
