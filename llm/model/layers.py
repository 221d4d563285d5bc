"""The transformer's layers: norms, RoPE, attention, MLP, the head, and the block of them.

Each block computes (``norm_position="pre"``, the default; pre-norm, Xiong et al. 2020)

    h = x + W_o · Attn(N₁(x)),    y = h + MLP(N₂(h)),

or (``"post"``, the original transformer's post-norm, Vaswani et al. 2017, as the anchor
task's published runs, docs/science.md §6)

    h = N₁(x + W_o · Attn(x)),    y = N₂(h + MLP(h)).

N is the norm (RMSNorm, y = g ⊙ x / √(mean(x²) + ε), Zhang & Sennrich 2019; or LayerNorm),
Attn causal multi-head attention softmax(QKᵀ/√d_head + M)V through
``F.scaled_dot_product_attention`` (or an explicit path that also returns the weights),
positions by RoPE (Su et al. 2021; rotate-half form) or a learned table, and MLP either
SwiGLU, W_down(silu(W_gate x) ⊙ W_up x) (Shazeer 2020), W_down GELU(W_up x) or
W_down ReLU(W_up x) (the original transformer's). Q, K and V are ``attn_dim`` wide
(d_model unless set; n_heads heads of attn_dim / n_heads each).

Optional gated attention (Qiu et al., arXiv 2505.06708; docs/science.md §5): each head's
output is multiplied by sigmoid(X W_g) computed from the (normed) layer input, before W_o —
elementwise (W_g: d → d) or headwise (W_g: d → n_heads, one scalar per head).

Every module declares the weight matrices it creates (:func:`.matrices.declare`: part,
role, fan-in, fan-out, block, the rows of a fused tensor). These are PyTorch's composites
throughout; :mod:`.fastlayers` subclasses them with the CPU fast path's functions (same
numbers), and :class:`Parts` names the classes a model is built from.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from smallinit.llm.model.chunked_loss import chunked_cross_entropy
from smallinit.llm.model.generate import KVCache
from smallinit.llm.model.matrices import declare, rows
from smallinit.llm.run_config import ModelConfig

Rope = tuple[torch.Tensor, torch.Tensor]


def rope_tables(context: int, head_dim: int, base: float) -> Rope:
    """cos and sin of θ_{t,i} = t · base^(−2i/head_dim), each of shape (context, head_dim)
    (the half-dimension table repeated twice, for the rotate-half form)."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(context, dtype=torch.float64), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


def signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """The sin table with rotate_half's sign moved onto it: (−sin₁, sin₂) by halves, so that
    rotate_half(x) ⊙ sin = roll(x, h/2) ⊙ signed_sin."""
    half = sin.shape[-1] // 2
    return torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x_i, x_{i+h/2}) of ``x`` (…, T, head_dim) by the angles θ_{t,i}:
    x ⊙ cos + rotate_half(x) ⊙ sin with rotate_half(x) = (−x₂, x₁). The sign moves onto the
    (small) sin table, so x is rolled by h/2 instead of negated and concatenated: the same
    products, bit for bit, and fewer passes over x (forward and backward).

    The fp32 tables are cast to ``x``'s dtype first, as Hugging Face's Llama does: under bf16
    autocast the projection gives bf16 q and k, and fp32 tables would promote them (and
    their gradients) to fp32 tensors that attention then casts back to bf16. In fp32 the
    cast is the identity (the same tensors, the same numbers)."""
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * signed_sin(sin)


class Attention(nn.Module):
    """Causal multi-head self-attention with fused Q, K, V projection (rows q | k | v)."""

    def __init__(self, cfg: ModelConfig, layer: int = 0):
        super().__init__()
        d, a = cfg.d_model, cfg.attn_width
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.head_dim
        self.layer = layer
        self.qkv = nn.Linear(d, 3 * a, bias=cfg.bias)
        for j, (tag, part) in enumerate((("q", "qk"), ("k", "qk"), ("v", "vo"))):
            declare(
                self.qkv,
                part=part,
                kind=f"attn.{tag}",
                d_in=d,
                d_out=a,
                layer=layer,
                tag=tag,
                index=rows(j * a, (j + 1) * a),
            )
        self.proj = nn.Linear(a, d, bias=cfg.bias)
        declare(
            self.proj, part="vo", kind="attn.o", d_in=a, d_out=d, layer=layer, residual_out=True
        )
        self.gate = None
        if cfg.gated_attention:
            out = a if cfg.gate_kind == "elementwise" else cfg.n_heads
            self.gate = nn.Linear(d, out, bias=False)
            declare(self.gate, part="attn_gate", kind="attn.gate", d_in=d, d_out=out, layer=layer)

    def forward(
        self,
        x: torch.Tensor,
        rope: Rope | None,
        need_weights: bool = False,
        cache: KVCache | None = None,
        mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """W_o · Attn(x) (through the gate, if any) and the weights (if ``need_weights``).

        ``rope``: cos and sin tables whose first T positions are the tokens' (shared, or per
        row as (B, 1, T, hd)); ``mask``: True where a query may attend (None: causal over
        the T tokens); ``cache``: earlier tokens' keys and values."""
        B, T, C = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim)
        q, k, v = self.split_heads(qkv, rope)
        if cache is not None:
            k, v = cache.append(self.layer, k, v)
        weights = None
        if need_weights:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
            if mask is None:
                mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = weights @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
        if self.gate is not None:  # (B, H, T, hd) ⊙ sigmoid(X W_g) per head
            g = torch.sigmoid(self.gate(x)).view(B, T, self.n_heads, -1).transpose(1, 2)
            y = y * g
        y = y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)
        return self.proj(y), weights

    def split_heads(self, qkv: torch.Tensor, rope: Rope | None):
        """q, k, v of shape (B, H, T, hd) from the projection viewed as (B, T, 3, H, hd),
        q and k rotated by RoPE when ``rope`` holds tables of ≥ T positions."""
        T = qkv.shape[1]
        qkv = qkv.permute(2, 0, 3, 1, 4)
        if rope is None:
            q, k, v = qkv
            return q, k, v
        cos, sin = rope[0][..., :T, :], rope[1][..., :T, :]
        qk, v = qkv.split([2, 1])  # (split: the backward is one cat, no zero-filled grads)
        q, k = apply_rope(qk, cos, sin)  # q and k in one call
        return q, k, v[0]


class MLP(nn.Module):
    """SwiGLU (fused W_gate | W_up rows in ``up``), GELU or ReLU feed-forward."""

    def __init__(self, cfg: ModelConfig, layer: int = 0):
        super().__init__()
        d, ff = cfg.d_model, cfg.ffn_dim
        self.kind = cfg.mlp
        self.swiglu = cfg.mlp == "swiglu"
        self.up = nn.Linear(d, ff * (2 if self.swiglu else 1), bias=cfg.bias)
        if self.swiglu:
            for j, tag in enumerate(("gate", "up")):
                declare(
                    self.up,
                    part="mlp",
                    kind=f"mlp.{tag}",
                    d_in=d,
                    d_out=ff,
                    layer=layer,
                    tag=tag,
                    index=rows(j * ff, (j + 1) * ff),
                )
        else:
            declare(self.up, part="mlp", kind="mlp.up", d_in=d, d_out=ff, layer=layer)
        self.down = nn.Linear(ff, d, bias=cfg.bias)
        declare(
            self.down,
            part="mlp_out",
            kind="mlp.down",
            d_in=ff,
            d_out=d,
            layer=layer,
            residual_out=True,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.activation(self.up(x)))

    def activation(self, h: torch.Tensor) -> torch.Tensor:
        """silu(gate) ⊙ up of the fused (gate | up) ``h`` (SwiGLU), GELU(h) or ReLU(h)."""
        if self.swiglu:
            gate, up = h.chunk(2, dim=-1)
            return F.silu(gate) * up
        return F.relu(h) if self.kind == "relu" else F.gelu(h)


class Head(nn.Linear):
    """Hidden states (…, d) → next-token logits h Wᵀ (+ b with ``bias``) (…, vocab).

    ``loss_chunk`` > 0 (set by the trainer from ``train.loss_chunk``) computes the training
    loss through :func:`.chunked_loss.chunked_cross_entropy`, that many tokens' logits at a
    time, and returns no logits with it; 0 is the plain path."""

    loss_chunk: int = 0

    def __init__(self, d_model: int, vocab_size: int, bias: bool = False):
        super().__init__(d_model, vocab_size, bias=bias)

    def logits_and_loss(self, h: torch.Tensor, targets: torch.Tensor):
        """The logits and their mean cross-entropy against ``targets`` (in float32, or in
        float64 for a float64 model); ``(None, loss)`` with ``loss_chunk`` > 0.

        Eager under bf16 autocast this upcasts the tokens × vocabulary logits to an fp32
        copy for the loss; kept as measured, because every full-profile run compiles
        (``train.compile``) and Inductor fuses the upcast into the cross-entropy's
        reductions, so no float32 buffer of that size is made
        (``tests/llm/test_llm_gpu_paths.py``)."""
        if self.loss_chunk > 0:
            return None, chunked_cross_entropy(h, self.weight, self.bias, targets, self.loss_chunk)
        logits = self(h)
        wide = torch.promote_types(logits.dtype, torch.float32)
        return logits, F.cross_entropy(logits.flatten(0, 1).to(wide), targets.flatten())


class Parts(NamedTuple):
    """The module classes a model is built from (:data:`PLAIN_PARTS`: PyTorch's composites;
    :data:`.fastlayers.FAST_PARTS`: the same numbers through the CPU fast path)."""

    rmsnorm: type[nn.RMSNorm]
    attention: type[Attention]
    mlp: type[MLP]
    head: type[Head]


PLAIN_PARTS = Parts(rmsnorm=nn.RMSNorm, attention=Attention, mlp=MLP, head=Head)


def make_norm(cfg: ModelConfig, parts: Parts = PLAIN_PARTS) -> nn.Module:
    """RMSNorm (``parts.rmsnorm``) or LayerNorm over d_model, gain 1 (and bias 0 when
    ``cfg.layernorm_bias``), with ε = ``cfg.norm_eps``."""
    if cfg.norm == "rmsnorm":
        return parts.rmsnorm(cfg.d_model, eps=cfg.norm_eps)
    return nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, bias=cfg.layernorm_bias)


class Block(nn.Module):
    """One attention + MLP block, pre-norm or post-norm (module docstring)."""

    def __init__(self, cfg: ModelConfig, layer: int = 0, parts: Parts = PLAIN_PARTS):
        super().__init__()
        self.post = cfg.norm_position == "post"
        self.norm1 = make_norm(cfg, parts)
        self.attn = parts.attention(cfg, layer)
        self.norm2 = make_norm(cfg, parts)
        self.mlp = parts.mlp(cfg, layer)

    def forward(self, x, rope, need_weights=False, cache=None, mask=None):
        if self.post:  # N₂(h + MLP(h)) with h = N₁(x + Attn(x))
            a, weights = self.attn(x, rope, need_weights, cache, mask)
            h = self.norm1(x + a)
            return self.norm2(h + self.mlp(h)), weights
        a, weights = self.attn(self.norm1(x), rope, need_weights, cache, mask)
        x = x + a
        return x + self.mlp(self.norm2(x)), weights
