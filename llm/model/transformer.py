"""A decoder-only transformer with the knobs the γ-init experiments need.

Each block computes (``norm_position="pre"``, the default; pre-norm, Xiong et al. 2020)

    h = x + W_o · Attn(N₁(x)),    y = h + MLP(N₂(h)),

followed by a final norm N_f before the head, or (``"post"``, the original transformer's
post-norm, Vaswani et al. 2017, as the anchor task's published runs, docs/science.md §6)

    h = N₁(x + W_o · Attn(x)),    y = N₂(h + MLP(h)),

whose last block's output is already normed (N_f is then the identity). N is the norm
(RMSNorm, y = g ⊙ x / √(mean(x²) + ε), Zhang & Sennrich 2019; or LayerNorm), Attn causal
multi-head attention softmax(QKᵀ/√d_head + M)V through ``F.scaled_dot_product_attention``
(or an explicit path that also returns the weights), positions by RoPE (Su et al. 2021;
rotate-half form) or a learned table, and MLP either SwiGLU, W_down(silu(W_gate x) ⊙ W_up x)
(Shazeer 2020), or W_down GELU(W_up x).

Optional gated attention (Qiu et al., arXiv 2505.06708; docs/science.md §5): each head's output is
multiplied by sigmoid(X W_g) computed from the (normed) layer input, before W_o —
elementwise (W_g: d → d) or headwise (W_g: d → n_heads, one scalar per head).

Every module declares the weight matrices it creates (:func:`.matrices.declare`: part,
role, fan-in, fan-out, block, the rows of a fused tensor); :meth:`Transformer.matrices`
lists them, and that one table is what the init (:func:`smallinit.llm.model.init.apply_init`)
and the measurements read. Weights are created with PyTorch's defaults; ``apply_init`` sets
them by an init scheme (the model constructor calls it when given one).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from smallinit.llm.config import ModelConfig
from smallinit.llm.model.init import apply_init
from smallinit.llm.model.matrices import MatrixSpec, declare, declared_matrices, rows


def make_norm(cfg: ModelConfig) -> nn.Module:
    """RMSNorm or LayerNorm over d_model, gain 1 (and bias 0), with ε = ``cfg.norm_eps``."""
    if cfg.norm == "rmsnorm":
        return nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
    return nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, bias=cfg.bias)


def rope_tables(context: int, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of θ_{t,i} = t · base^(−2i/head_dim), each of shape (context, head_dim)
    (the half-dimension table repeated twice, for the rotate-half form)."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(context, dtype=torch.float64), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x_i, x_{i+h/2}) of ``x`` (…, T, head_dim) by the angles θ_{t,i}."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    """Causal multi-head self-attention with fused Q, K, V projection (rows q | k | v)."""

    def __init__(self, cfg: ModelConfig, layer: int = 0):
        super().__init__()
        d = cfg.d_model
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.head_dim
        self.qkv = nn.Linear(d, 3 * d, bias=cfg.bias)
        for j, (tag, part) in enumerate((("q", "qk"), ("k", "qk"), ("v", "vo"))):
            declare(self.qkv, part=part, kind=f"attn.{tag}", d_in=d, d_out=d, layer=layer,
                    tag=tag, index=rows(j * d, (j + 1) * d))
        self.proj = nn.Linear(d, d, bias=cfg.bias)
        declare(self.proj, part="vo", kind="attn.o", d_in=d, d_out=d, layer=layer,
                residual_out=True)
        self.gate = None
        if cfg.gated_attention:
            out = d if cfg.gate_kind == "elementwise" else cfg.n_heads
            self.gate = nn.Linear(d, out, bias=False)
            declare(self.gate, part="attn_gate", kind="attn.gate", d_in=d, d_out=out,
                    layer=layer)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None,
                need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        if rope is not None:
            cos, sin = rope[0][:T], rope[1][:T]
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        weights = None
        if need_weights:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
            future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
            y = weights @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if self.gate is not None:  # (B, H, T, hd) ⊙ sigmoid(X W_g) per head
            g = torch.sigmoid(self.gate(x)).view(B, T, self.n_heads, -1).transpose(1, 2)
            y = y * g
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.proj(y), weights


class MLP(nn.Module):
    """SwiGLU (fused W_gate | W_up rows in ``up``) or GELU feed-forward."""

    def __init__(self, cfg: ModelConfig, layer: int = 0):
        super().__init__()
        d, ff = cfg.d_model, cfg.ffn_dim
        self.swiglu = cfg.mlp == "swiglu"
        self.up = nn.Linear(d, ff * (2 if self.swiglu else 1), bias=cfg.bias)
        if self.swiglu:
            for j, tag in enumerate(("gate", "up")):
                declare(self.up, part="mlp", kind=f"mlp.{tag}", d_in=d, d_out=ff, layer=layer,
                        tag=tag, index=rows(j * ff, (j + 1) * ff))
        else:
            declare(self.up, part="mlp", kind="mlp.up", d_in=d, d_out=ff, layer=layer)
        self.down = nn.Linear(ff, d, bias=cfg.bias)
        declare(self.down, part="mlp_out", kind="mlp.down", d_in=ff, d_out=d, layer=layer,
                residual_out=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)
        if self.swiglu:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.gelu(h)
        return self.down(h)


class Block(nn.Module):
    """One attention + MLP block, pre-norm or post-norm (module docstring)."""

    def __init__(self, cfg: ModelConfig, layer: int = 0):
        super().__init__()
        self.post = cfg.norm_position == "post"
        self.norm1 = make_norm(cfg)
        self.attn = Attention(cfg, layer)
        self.norm2 = make_norm(cfg)
        self.mlp = MLP(cfg, layer)

    def forward(self, x, rope, need_weights=False):
        if self.post:  # N₂(h + MLP(h)) with h = N₁(x + Attn(x))
            a, weights = self.attn(x, rope, need_weights)
            h = self.norm1(x + a)
            return self.norm2(h + self.mlp(h)), weights
        a, weights = self.attn(self.norm1(x), rope, need_weights)
        x = x + a
        return x + self.mlp(self.norm2(x)), weights


class Transformer(nn.Module):
    """Token ids (B, T) → next-token logits (B, T, vocab).

    ``forward(idx, targets)`` also returns the mean cross-entropy; ``token_losses`` the
    per-token losses; ``forward(idx, need_weights=True)`` the attention weights of every
    layer (explicit softmax path, slower; for diagnostics such as attention sinks).
    """

    def __init__(self, cfg: ModelConfig, scheme=None, *, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.tok_emb = nn.Embedding(cfg.vocab_size, d)  # rows are tokens: fan-in d (§1)
        declare(self.tok_emb, part="embedding", kind="embedding", d_in=d, d_out=cfg.vocab_size)
        self.pos_emb = None
        if cfg.positions == "learned":
            self.pos_emb = nn.Embedding(cfg.context, d)
            declare(self.pos_emb, part="embedding", kind="positions", d_in=d,
                    d_out=cfg.context)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm_f = nn.Identity() if cfg.norm_position == "post" else make_norm(cfg)
        self.head = nn.Linear(d, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:  # one matrix, drawn once as the embedding
            self.head.weight = self.tok_emb.weight
        else:
            declare(self.head, part="head", kind="head", d_in=d, d_out=cfg.vocab_size)
        if cfg.positions == "rope":
            cos, sin = rope_tables(cfg.context, cfg.head_dim, cfg.rope_base)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        if scheme is not None:
            apply_init(self, scheme, seed=seed)

    def matrices(self) -> list[MatrixSpec]:
        """Every weight matrix as its modules declared it, in module order."""
        return declared_matrices(self)

    def hidden(self, idx: torch.Tensor, need_weights: bool = False):
        """Final normed hidden states (B, T, d) and the list of attention weights."""
        T = idx.shape[1]
        if T > self.cfg.context:
            raise ValueError(f"sequence length {T} exceeds model.context={self.cfg.context}")
        x = self.tok_emb(idx)
        if self.pos_emb is not None:
            x = x + self.pos_emb.weight[:T]
        rope = (self.rope_cos, self.rope_sin) if self.pos_emb is None else None
        all_weights = []
        for block in self.blocks:
            x, weights = block(x, rope, need_weights)
            all_weights.append(weights)
        return self.norm_f(x), all_weights

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, *,
                need_weights: bool = False):
        """Logits; with ``targets`` also the mean loss; with ``need_weights`` also the
        attention weights, as ``(logits, loss, weights)``."""
        h, weights = self.hidden(idx, need_weights)
        logits = self.head(h)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        if need_weights:
            return logits, loss, weights
        return logits if targets is None else (logits, loss)

    def token_losses(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of every position, shape (B, T)."""
        logits = self.head(self.hidden(idx)[0]).float()
        return F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def meta_transformer(cfg: ModelConfig) -> Transformer:
    """The model of ``cfg`` on the ``meta`` device: every parameter has its shape and no
    storage, so the matrix table (shapes, fan-ins, σ) of any size costs no memory."""
    with torch.device("meta"):
        return Transformer(cfg)
