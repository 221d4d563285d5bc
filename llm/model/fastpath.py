"""The CPU training step's elementwise layers with fewer passes over memory, same numbers.

On CPU, PyTorch computes RMSNorm as a composite of six ops (pow, mean, add, rsqrt, two
products), each of which autograd records and differentiates on its own, and the SwiGLU and
RoPE backward passes end in ``cat`` and layout copies. Each :class:`torch.autograd.Function`
here runs the same elementwise operations, in the same order, as the composite it replaces,
so forward values and gradients agree bit for bit (tests/llm/test_fastpath.py checks this on a
whole training step); what it saves is memory traffic: the backward writes each gradient
once, in place in its final layout, instead of building it from zero-filled, rolled,
concatenated and copied intermediates.

* :func:`rms_norm`: y = w ⊙ x · r with r = 1/√(mean(x²) + ε) (Zhang & Sennrich 2019). The
  backward is autograd's chain, written out: ∂w = Σ g ⊙ x̂ over rows, ∂x = (g ⊙ w)·r +
  x · 2c with c = −½ (Σ_row g ⊙ w ⊙ x) r³ / d (the mean's and the square's derivatives
  on the (rows, 1) tensor c, where autograd spends two passes over x). The two terms of
  ∂x reach autograd as two inputs (``x`` is passed twice), so they are summed into x's
  gradient in the same order as the composite's.
* :func:`swiglu`: silu(g) ⊙ u of the fused (gate | up) projection; the backward writes
  ∂g and ∂u into the two halves of one tensor (no ``cat``): ∂u = g ⊙ silu(g) and
  g ⊙ u, to which silu's derivative is then applied in place. Its activations and that
  gradient live in recycled buffers (below): the tokens × 2·d_ff gradient is the largest
  tensor of a step after the logits.
* :func:`gelu`: ``F.gelu`` and its backward kernel, the output and the gradient (the
  GPT-2-style MLP's tokens × d_ff tensors) in recycled buffers.
* :func:`rotary_qkv`: the fused projection's (q | k | v) split into heads, with RoPE
  x ⊙ cos + rotate_half(x) ⊙ sin (Su et al. 2021) applied to q and k, half by half
  (no roll), against tables laid out like q and k so each product runs over a whole
  position; the backward rotates ∂q and ∂k back in their own (B, H, T, d_head) layout,
  where the tables line up with them, and copies them once into the projection's layout.
  The rotated q, k and the projection's gradient live in recycled buffers.
* :func:`head` and :func:`cross_entropy`: the logits h Wᵀ and ``F.cross_entropy``'s own
  kernels (log_softmax, the negative log-likelihood; their backward kernels in reverse),
  with their (tokens × vocab) tensors in buffers recycled from step to step (a buffer is
  reused only once nothing else refers to it) and the logits' gradient written over the
  saved log-probs. At a vocabulary of thousands these tensors are tens of MB, and each
  fresh one costs a page fault per 4 KiB on first touch — as much time as the kernels.

The model uses them through the layers of :mod:`.fastlayers`, chosen when it is built
(unless ``SMALLINIT_FASTPATH=0``, :data:`ON`); :func:`enabled` says, call by call, when
they apply: eager CPU steps without autocast. CUDA (which has fused kernels, and bf16
autocast), ``torch.compile`` (which fuses the composites itself) and any other device keep
PyTorch's ops.
"""

from __future__ import annotations

import os
import threading

import torch

from smallinit.llm.model.layers import signed_sin

#: Whether models are built with the fast path's layers (:mod:`.fastlayers`):
#: ``SMALLINIT_FASTPATH=0`` turns it off for the whole process (read once, at import).
ON = os.environ.get("SMALLINIT_FASTPATH", "1") != "0"


def enabled(x: torch.Tensor) -> bool:
    """Whether the functions below replace PyTorch's composites for input ``x``: eager
    float32 on CPU without autocast, in a process where :data:`ON` holds."""
    return (
        ON
        and x.device.type == "cpu"
        and x.dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")
        and not torch.compiler.is_compiling()
    )


# ----------------------------------------------------------------------------- RMSNorm
class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, x_again, weight, eps):  # x_again is x: see the module docstring
        r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True).add(eps))
        xhat = x * r
        ctx.save_for_backward(x, xhat, r, weight)
        return xhat * weight

    @staticmethod
    def backward(ctx, g):
        x, xhat, r, weight = ctx.saved_tensors
        g_weight = (g * xhat).sum(dim=tuple(range(g.dim() - 1)))
        g_xhat = g * weight
        g_x_direct = g_xhat * r
        g_r = (g_xhat * x).sum(-1, keepdim=True)
        g_mean = (-0.5 * g_r) * r.pow(3)  # d rsqrt(s)/ds = −½ r³
        g_x_square = x * ((g_mean / x.shape[-1]) * 2.0)  # (g/d)·2x, as mean and pow give it
        return g_x_direct, g_x_square, g_weight, None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """w ⊙ x / √(mean(x²) + ε) over the last dimension: ``F.rms_norm``'s numbers."""
    return _RMSNorm.apply(x, x, weight, eps)


# ----------------------------------------------------------------------------- SwiGLU
class _SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h):
        gate, up = h.chunk(2, dim=-1)
        act = torch.ops.aten.silu.out(gate, out=_POOL.get(gate.shape, gate))
        ctx.save_for_backward(gate, up, act)
        return torch.mul(act, up, out=_POOL.get(gate.shape, gate))

    @staticmethod
    def backward(ctx, g):
        gate, up, act = ctx.saved_tensors
        ff = gate.shape[-1]
        g_h = _POOL.get((*g.shape[:-1], 2 * ff), g)
        g_gate, g_up = g_h[..., :ff], g_h[..., ff:]
        torch.mul(g, act, out=g_up)
        torch.mul(g, up, out=g_gate)  # ∂act = g ⊙ up, then silu' applied where it lies
        torch.ops.aten.silu_backward.grad_input(g_gate, gate, grad_input=g_gate)
        return g_h


def swiglu(h: torch.Tensor) -> torch.Tensor:
    """silu(gate) ⊙ up for ``h`` = (gate | up) along the last dimension."""
    return _SwiGLU.apply(h)


class _GELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h):
        ctx.save_for_backward(h)
        return torch.ops.aten.gelu.out(h, out=_POOL.get(h.shape, h))

    @staticmethod
    def backward(ctx, g):
        (h,) = ctx.saved_tensors
        return torch.ops.aten.gelu_backward.grad_input(g, h, grad_input=_POOL.get(h.shape, h))


def gelu(h: torch.Tensor) -> torch.Tensor:
    """GELU (exact, erf form: ``F.gelu``'s numbers), output and gradient in recycled
    buffers."""
    return _GELU.apply(h)


# ----------------------------------------------------------------------------- RoPE
def _rotate_into(out: torch.Tensor, x: torch.Tensor, cos: torch.Tensor, ssin: torch.Tensor) -> None:
    """out = x ⊙ cos + roll(x, h/2) ⊙ ssin, the rolled product formed half by half."""
    half = x.shape[-1] // 2
    torch.mul(x, cos, out=out)
    rolled = torch.empty_like(out)
    torch.mul(x[..., half:], ssin[..., :half], out=rolled[..., :half])
    torch.mul(x[..., :half], ssin[..., half:], out=rolled[..., half:])
    out += rolled


class _RotaryQKV(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qkv, cos, sin):  # qkv (B, T, 3, H, hd); cos, sin (T, hd)
        # one angle per position and frequency, shared by q, k and the heads: the tables are
        # laid out as (T, 2, H, hd) copies, so each position's 2·H·hd products are one run
        _, _, _, H, hd = qkv.shape
        ssin = signed_sin(sin)
        wide = (sin.shape[0], 2, H, hd)
        qk = _POOL.get(qkv[:, :, :2].shape, qkv)  # q and k rotated together, (B, T, 2, H, hd)
        _rotate_into(
            qk,
            qkv[:, :, :2],
            cos[:, None, None, :].expand(wide).contiguous(),
            ssin[:, None, None, :].expand(wide).contiguous(),
        )
        ctx.save_for_backward(cos, ssin)
        return (
            qk[:, :, 0].transpose(1, 2),
            qk[:, :, 1].transpose(1, 2),
            qkv[:, :, 2].transpose(1, 2),
        )

    @staticmethod
    def backward(ctx, g_q, g_k, g_v):
        cos, ssin = ctx.saved_tensors  # (T, hd)
        B, H, T, hd = g_v.shape
        half = hd // 2
        g_qkv = _POOL.get((B, T, 3, H, hd), g_v)
        for j, g in ((0, g_q), (1, g_k)):  # the transpose of the rotation: roll back
            # in the gradient's own (B, H, T, hd) layout, where the (T, hd) tables line up
            # with it, then moved into the projection's layout once
            g_cos, g_sin = g * cos, g * ssin
            g_cos[..., :half] += g_sin[..., half:]
            g_cos[..., half:] += g_sin[..., :half]
            g_qkv[:, :, j] = g_cos.transpose(1, 2)
        g_qkv[:, :, 2] = g_v.transpose(1, 2)
        return g_qkv, None, None


def rotary_qkv(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """q, k, v of shape (B, H, T, hd) from the fused projection viewed as (B, T, 3, H, hd),
    q and k rotated by the tables ``cos``, ``sin`` of the T positions (T, hd)."""
    return _RotaryQKV.apply(qkv, cos, sin)


# ----------------------------------------------------------------------------- head, loss
_MEAN, _IGNORE = 1, -100  # F.cross_entropy's defaults: reduction "mean", ignore_index −100


_USE_COUNT = getattr(torch._C, "_storage_Use_Count", None)  # private; absent: never reuse


def _unshared(base: torch.Tensor) -> bool:
    """Whether no tensor but ``base`` uses its memory (``base`` itself is never handed out,
    only views of it, and each view — a caller's, one autograd saved — counts; so does the
    storage object made to ask)."""
    return _USE_COUNT is not None and _USE_COUNT(base.untyped_storage()._cdata) <= 2


class _Recycler:
    """Large buffers handed out again once nothing else refers to them, so that a training
    step writes its big tensors (logits, log-probs, the MLP's activations, the rotated q
    and k, and their gradients) into memory the previous step used, instead of into fresh
    pages the kernel must map and zero one by one. A buffer still in use (logits a caller
    kept, activations a graph saved) is never handed out; a new one is made. It keeps at
    most ``per_shape`` buffers per shape (a step holds one SwiGLU activation pair per
    layer until its backward), for the ``shapes`` shapes used last, and at most
    ``max_bytes`` in all (memory a step needs at its peak anyway; what is kept stays with
    the process). A lock makes a hand-out atomic: the view returned is made before another
    thread may look, so two threads never get the same buffer."""

    def __init__(self, shapes: int = 8, per_shape: int = 16, max_bytes: int = 1 << 30):
        self.shapes, self.per_shape, self.max_bytes = shapes, per_shape, max_bytes
        self.pool: dict[tuple, list[torch.Tensor]] = {}
        self.lock = threading.Lock()

    def kept_bytes(self) -> int:
        return sum(b.nbytes for bases in self.pool.values() for b in bases)

    def get(self, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        key = (tuple(shape), like.dtype, like.device)
        with self.lock:
            bases = self.pool.pop(key, [])
            self.pool[key] = bases  # most recently used shape last
            while len(self.pool) > self.shapes:
                self.pool.pop(next(iter(self.pool)))
            base = next((b for b in bases if _unshared(b)), None)
            if base is None:
                base = like.new_empty(shape)
                if (
                    len(bases) < self.per_shape
                    and self.kept_bytes() + base.nbytes <= self.max_bytes
                ):
                    bases.append(base)
            return base.view(shape)


_POOL = _Recycler()


class _Head(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight):  # h (N, d), weight (V, d): logits h Wᵀ (N, V)
        ctx.save_for_backward(h, weight)
        return torch.mm(h, weight.t(), out=_POOL.get((h.shape[0], weight.shape[0]), h))

    @staticmethod
    def backward(ctx, g):  # the products autograd forms for mm(h, Wᵀ)
        h, weight = ctx.saved_tensors
        need_h, need_weight = ctx.needs_input_grad
        return g.mm(weight) if need_h else None, g.t().mm(h) if need_weight else None


def head(h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Logits h Wᵀ of hidden states ``h`` (…, d) (``F.linear`` without bias: its numbers),
    written into a recycled buffer."""
    return _Head.apply(h.reshape(-1, h.shape[-1]), weight).view(*h.shape[:-1], -1)


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets):  # logits (N, V), targets (N,)
        log_probs = torch.log_softmax(logits, dim=-1, out=_POOL.get(logits.shape, logits))
        loss, total_weight = torch.ops.aten.nll_loss_forward(
            log_probs, targets, None, _MEAN, _IGNORE
        )
        ctx.save_for_backward(log_probs, targets, total_weight)
        ctx.used = False
        return loss

    @staticmethod
    def backward(ctx, g):
        if ctx.used:  # the first backward overwrote the saved log-probs with its gradient
            raise RuntimeError(
                "the CPU fast-path cross-entropy supports one backward per "
                "forward (retain_graph=True and a second backward are not "
                "allowed); set SMALLINIT_FASTPATH=0 to use PyTorch's"
            )
        ctx.used = True
        log_probs, targets, total_weight = ctx.saved_tensors
        g_log_probs = torch.ops.aten.nll_loss_backward.grad_input(
            g,
            log_probs,
            targets,
            None,
            _MEAN,
            _IGNORE,
            total_weight,
            grad_input=_POOL.get(log_probs.shape, log_probs),
        )
        # ∂logits = ∂lp − exp(lp)·Σ∂lp row by row: each element reads its log-prob, then
        # its gradient takes its place
        torch.ops.aten._log_softmax_backward_data.out(
            g_log_probs, log_probs, -1, log_probs.dtype, out=log_probs
        )
        return log_probs, None


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of ``logits`` (N, V) against class ids ``targets`` (N,):
    ``F.cross_entropy``'s numbers."""
    return _CrossEntropy.apply(logits, targets)
