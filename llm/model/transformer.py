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

Generation (:meth:`Transformer.generate`) decodes with a key/value cache (:class:`KVCache`):
token t's key and value depend only on tokens ≤ t, so each step computes the new token's
query, key and value and attends to the stored ones — the logits of the full causal forward,
at O(T) instead of O(T²) work per token. The training forward does not touch the cache.

Every module declares the weight matrices it creates (:func:`.matrices.declare`: part,
role, fan-in, fan-out, block, the rows of a fused tensor); :meth:`Transformer.matrices`
lists them, and that one table is what the init (:func:`smallinit.llm.model.init.apply_init`)
and the measurements read. Weights are created with PyTorch's defaults; ``apply_init`` sets
them by an init scheme (the model constructor calls it when given one).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from smallinit.core.errors import ConfigError
from smallinit.llm.model import fastpath
from smallinit.llm.model.init import apply_init
from smallinit.llm.model.matrices import MatrixSpec, declare, declared_matrices, rows
from smallinit.llm.run_config import ModelConfig


class RMSNorm(nn.RMSNorm):
    """``nn.RMSNorm`` (same parameters, same numbers) that takes the fewer-pass CPU
    function of :mod:`.fastpath` where that is enabled."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight is not None and self.eps is not None and fastpath.enabled(x):
            return fastpath.rms_norm(x, self.weight, self.eps)
        return super().forward(x)


def make_norm(cfg: ModelConfig) -> nn.Module:
    """RMSNorm or LayerNorm over d_model, gain 1 (and bias 0), with ε = ``cfg.norm_eps``."""
    if cfg.norm == "rmsnorm":
        return RMSNorm(cfg.d_model, eps=cfg.norm_eps)
    return nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, bias=cfg.bias)


def rope_tables(context: int, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of θ_{t,i} = t · base^(−2i/head_dim), each of shape (context, head_dim)
    (the half-dimension table repeated twice, for the rotate-half form)."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(context, dtype=torch.float64), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


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
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * fastpath.signed_sin(sin)


class KVCache:
    """Keys and values of every layer for the first ``length`` slots of a token window.

    ``k`` and ``v`` have shape (n_layers, B, n_heads, size, head_dim); a forward pass over T
    new tokens writes their keys and values at slots [length, length + T) and attends to
    slots [0, length + T). Keys are stored after RoPE, at their positions in the window.
    """

    def __init__(self, cfg: ModelConfig, batch: int, size: int):
        self.shape = (cfg.n_layers, batch, cfg.n_heads, size, cfg.head_dim)
        self.k: torch.Tensor | None = None  # allocated by the first append, in k's dtype
        self.v: torch.Tensor | None = None
        self.size = size
        self.length = 0

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Store one layer's new keys and values (B, H, T, hd); all of the window's so far."""
        if self.k is None or self.v is None:
            self.k = k.new_zeros(self.shape)
            self.v = v.new_zeros(self.shape)
        end = self.length + k.shape[2]
        self.k[layer, :, :, self.length:end] = k
        self.v[layer, :, :, self.length:end] = v
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]


def window_positions(start: int, T: int, pad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions (B, T) and attention mask (B, 1, T, start + T) of T tokens at window slots
    start, …, start + T − 1, in rows whose first ``pad[b]`` slots are left padding.

    A token's position counts from its row's first real token, so a padded row computes
    what it would alone; it attends to the real tokens at or before it (causal), and a
    padding slot to itself only (which keeps its otherwise unused output finite)."""
    slots = torch.arange(start, start + T, device=pad.device)
    keys = torch.arange(start + T, device=pad.device)
    pos = (slots[None, :] - pad[:, None]).clamp(min=0)
    query, key = slots[None, :, None], keys[None, None, :]
    allowed = (key <= query) & ((key >= pad[:, None, None]) | (key == query))
    return pos, allowed[:, None]


class Attention(nn.Module):
    """Causal multi-head self-attention with fused Q, K, V projection (rows q | k | v)."""

    def __init__(self, cfg: ModelConfig, layer: int = 0):
        super().__init__()
        d = cfg.d_model
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.head_dim
        self.layer = layer
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
                need_weights: bool = False, cache: KVCache | None = None,
                mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``rope``: cos and sin tables whose first T positions are the tokens' (shared, or
        per row as (B, 1, T, hd)); ``mask``: True where a query may attend (None: causal over
        the T tokens); ``cache``: earlier tokens' keys and values."""
        B, T, C = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim)
        if fastpath.enabled(qkv) and (rope is None or rope[0].dim() == 2):
            if rope is None:  # the backward stacks ∂q, ∂k, ∂v in the projection's layout
                q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
            else:
                q, k, v = fastpath.rotary_qkv(qkv, rope[0][:T], rope[1][:T])
            return self.attend(x, q, k, v, need_weights, cache, mask)
        qkv = qkv.permute(2, 0, 3, 1, 4)
        if rope is None:
            q, k, v = qkv
        else:  # tables of ≥ T positions (…, positions, head_dim); q and k in one call
            cos, sin = rope[0][..., :T, :], rope[1][..., :T, :]
            qk, v = qkv.split([2, 1])  # (split: the backward is one cat, no zero-filled grads)
            q, k = apply_rope(qk, cos, sin)
            v = v[0]
        return self.attend(x, q, k, v, need_weights, cache, mask)

    def attend(self, x, q, k, v, need_weights, cache, mask):
        """The attention of heads q, k, v (B, H, T, hd) of layer input ``x``, through the
        gate (if any) and W_o; and the weights (if ``need_weights``)."""
        B, T, C = x.shape
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
        if self.swiglu and fastpath.enabled(h):
            h = fastpath.swiglu(h)
        elif self.swiglu:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        elif fastpath.enabled(h):
            h = fastpath.gelu(h)
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

    def forward(self, x, rope, need_weights=False, cache=None, mask=None):
        if self.post:  # N₂(h + MLP(h)) with h = N₁(x + Attn(x))
            a, weights = self.attn(x, rope, need_weights, cache, mask)
            h = self.norm1(x + a)
            return self.norm2(h + self.mlp(h)), weights
        a, weights = self.attn(self.norm1(x), rope, need_weights, cache, mask)
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

    def hidden(self, idx: torch.Tensor, need_weights: bool = False, *,
               cache: KVCache | None = None, pad: torch.Tensor | None = None):
        """Final normed hidden states (B, T, d) and the list of attention weights.

        Training and scoring call it with ``idx`` alone (positions 0..T−1, causal). Decoding
        passes a ``cache`` (the tokens continue its window at slot ``cache.length``) and/or
        ``pad`` (B,), the number of left-padding slots of each row (:func:`window_positions`).
        ``idx`` must be an integer tensor (a TypeError otherwise; ids outside the vocabulary
        are checked by :meth:`generate`, not here, where a check would cost a device sync).
        """
        if not isinstance(idx, torch.Tensor) or idx.dtype.is_floating_point or \
                idx.dtype.is_complex or idx.dtype == torch.bool:
            check_token_ids(idx, self.cfg.vocab_size)  # raises the TypeError naming it
        B, T = idx.shape
        start = cache.length if cache is not None else 0
        if start + T > self.cfg.context:
            raise ValueError(f"sequence length {start + T} exceeds model.context="
                             f"{self.cfg.context}")
        if cache is not None and start + T > cache.size:
            raise ValueError(f"{start + T} tokens overflow a KV cache of {cache.size} slots")
        x = self.tok_emb(idx)
        pos = mask = None
        if cache is not None or pad is not None:
            pad = idx.new_zeros(B) if pad is None else pad
            pos, mask = window_positions(start, T, pad)
        rope = None
        if self.pos_emb is not None:
            x = x + (self.pos_emb.weight[:T] if pos is None else self.pos_emb(pos))
        elif pos is None:
            rope = (self.rope_cos, self.rope_sin)
        else:  # (B, 1, T, hd): one position per row and token, shared by the heads
            rope = (self.rope_cos[pos].unsqueeze(1), self.rope_sin[pos].unsqueeze(1))
        all_weights = []
        for block in self.blocks:
            x, weights = block(x, rope, need_weights, cache, mask)
            all_weights.append(weights)
        if cache is not None:
            cache.length += T
        return self.norm_f(x), all_weights

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, *,
                need_weights: bool = False):
        """Logits; with ``targets`` also the mean loss; with ``need_weights`` also the
        attention weights, as ``(logits, loss, weights)``."""
        h, weights = self.hidden(idx, need_weights)
        if targets is None:
            logits, loss = self.head(h), None
        else:
            logits, loss = self.head_loss(h, targets)
        if need_weights:
            return logits, loss, weights
        return logits if targets is None else (logits, loss)

    def head_loss(self, h: torch.Tensor, targets: torch.Tensor):
        """Logits of the final hidden states ``h`` (B, T, d) and their mean cross-entropy
        against ``targets`` (B, T), computed in float32 (under bf16 autocast the bf16
        logits are upcast first; ``torch.compile`` fuses that cast into the loss's
        reductions, eager keeps an fp32 copy of the logits)."""
        if fastpath.enabled(h):
            logits = fastpath.head(h, self.head.weight)
            return logits, fastpath.cross_entropy(logits.flatten(0, 1), targets.flatten())
        logits = self.head(h)
        return logits, F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, *, temperature: float = 1.0,
                 top_k: int | None = None, stop_tokens: Sequence[int] = (),
                 prompt_lengths: Sequence[int] | torch.Tensor | None = None,
                 until: Callable[[int, list[int]], bool] | None = None, pad_id: int = 0,
                 generator: torch.Generator | None = None,
                 use_cache: bool = True,
                 on_step: Callable[[int], None] | None = None) -> torch.Tensor:
        """Continue the prompts ``idx`` (B, T) by up to ``max_new_tokens`` tokens each;
        returns (B, T + n) with n ≤ ``max_new_tokens``.

        Each step reads the logits ℓ at the last position and picks the next token: argmax ℓ
        for ``temperature`` 0 (greedy), else a draw from softmax(ℓ / temperature) over the
        ``top_k`` largest logits (all for None), from ``generator`` (seed it for a
        reproducible sample) — the rule of nanoGPT's sample.py.

        Prompts of different lengths are left-padded to width T with their real lengths in
        ``prompt_lengths``: padding is masked out of attention and each row's positions start
        at its first real token, so a row continues as it would alone. A row stops after it
        emits a token of ``stop_tokens`` (kept in the output) or when ``until(row, new_ids)``
        returns True; its later slots hold ``pad_id``; decoding ends when every row stopped.

        Context: the model sees at most ``cfg.context`` tokens; a longer prompt, or prompt
        plus generation, is conditioned on its last ``cfg.context`` tokens (a sliding window,
        as nanoGPT crops ``idx``). Within the window each step feeds only the new token
        through the KV cache; once the window slides, every step recomputes the whole window
        (the cache then saves nothing). ``use_cache=False`` always recomputes: the reference
        the cache reproduces to float rounding. ``on_step(n)``, if given, is called after the
        n-th decoding step (a progress bar).

        Refused with a ConfigError (TypeError for a wrong type) before any step:
        ``idx`` that is not a 2-D integer tensor of ids in ``[0, vocab_size)``, a
        ``max_new_tokens`` that is not an integer >= 0, ``top_k`` that is not an integer
        >= 1, and a ``temperature`` other than 0 or a number in
        [:data:`MIN_TEMPERATURE`, :data:`MAX_TEMPERATURE`].
        """
        check_token_ids(idx, self.cfg.vocab_size)
        idx = idx.long()  # the embedding reads int64 (and int32) ids only; uint8 ids too
        B, T0 = idx.shape
        lengths = torch.full((B,), T0, dtype=torch.long) if prompt_lengths is None else \
            torch.as_tensor(prompt_lengths, dtype=torch.long).cpu()
        check_generate_args(T0, lengths, max_new_tokens, temperature, top_k, B)
        ctx = self.cfg.context
        pad = (T0 - lengths).to(idx.device)
        seq = idx
        stops = torch.tensor(sorted(set(stop_tokens)), dtype=torch.long, device=idx.device)
        n_new = torch.zeros(B, dtype=torch.long, device=idx.device)
        done = torch.zeros(B, dtype=torch.bool, device=idx.device)
        cache, cache_pad = None, pad
        for step in range(max_new_tokens):
            if cache is not None and cache.length < cache.size:  # feed the new token only
                h, _ = self.hidden(seq[:, -1:], cache=cache, pad=cache_pad)
            else:  # (re)read the window: the first step, or every step once it slides
                window = seq[:, -ctx:]
                cache_pad = (pad - (seq.shape[1] - window.shape[1])).clamp(min=0)
                if use_cache:
                    size = min(ctx, window.shape[1] + max_new_tokens - step)
                    cache = KVCache(self.cfg, B, size)
                row_pad = cache_pad if bool(cache_pad.any()) or use_cache else None
                h, _ = self.hidden(window, cache=cache, pad=row_pad)
            token = pick_token(self.head(h[:, -1]), temperature, top_k, generator)
            token = torch.where(done, seq[:, -1], token)  # stopped rows idle (masked later)
            seq = torch.cat([seq, token[:, None]], dim=1)
            n_new += (~done).long()
            done |= torch.isin(token, stops)
            if until is not None:
                for b in (~done).nonzero().flatten().tolist():
                    done[b] = bool(until(b, seq[b, T0:].tolist()))
            if on_step is not None:
                on_step(step + 1)
            if bool(done.all()):
                break
        slot = torch.arange(seq.shape[1] - T0, device=idx.device)
        new = seq[:, T0:].masked_fill(slot[None, :] >= n_new[:, None], pad_id)
        return torch.cat([idx, new], dim=1)

    def token_losses(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of every position, shape (B, T)."""
        logits = self.head(self.hidden(idx)[0]).float()
        return F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


#: The temperatures :meth:`Transformer.generate` accepts besides 0 (greedy). Below 1e-3
#: a draw is the greedy pick in all but name (a logit gap of 0.01 nats becomes 10) and
#: logits / T leaves float32 once T is tiny (1e-300 is 0 in float32: NaN probabilities);
#: above 1e3 every token of the top-k is about equally likely (a spread of 20 nats
#: becomes 0.02).
MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-3, 1e3


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_token_ids(idx, vocab_size: int) -> None:
    """Refuse token ids a model of ``vocab_size`` tokens cannot read: TypeError for what is
    not a 2-D integer tensor (B, T), ConfigError naming the first id outside
    ``[0, vocab_size)``."""
    if not isinstance(idx, torch.Tensor):
        raise TypeError(f"token ids must be a torch integer tensor of shape (batch, length), "
                        f"got {type(idx).__module__}.{type(idx).__name__}; e.g. "
                        "torch.tensor([[1, 2, 3]])")
    if idx.dtype == torch.bool or idx.dtype.is_floating_point or idx.dtype.is_complex:
        raise TypeError(f"token ids must be an integer tensor, got dtype {idx.dtype}; "
                        "convert with .long()")
    if idx.dim() != 2:
        raise ConfigError(f"token ids must have shape (batch, length), got shape "
                          f"{tuple(idx.shape)}; add a batch dimension with idx[None]")
    if idx.numel():
        low, high = int(idx.min()), int(idx.max())
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise ConfigError(f"token id {bad} is outside the vocabulary; ids must be in "
                              f"[0, {vocab_size}) (model.vocab_size={vocab_size})")


def check_generate_args(width: int, lengths: torch.Tensor, max_new_tokens: int,
                        temperature: float, top_k: int | None, batch: int) -> None:
    """Refuse generation settings that have no meaning (ConfigError naming the value)."""
    if width < 1:
        raise ConfigError("generate needs a prompt of at least one token (e.g. the "
                          "end-of-text token)")
    if not _is_int(max_new_tokens) or max_new_tokens < 0:
        raise ConfigError(f"max_new_tokens={max_new_tokens!r} must be an integer >= 0")
    if (isinstance(temperature, bool) or not isinstance(temperature, numbers.Real)
            or not (temperature == 0 or MIN_TEMPERATURE <= temperature <= MAX_TEMPERATURE)):
        raise ConfigError(f"temperature={temperature!r} is not allowed; use 0 (greedy) or a "
                          f"number in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}]")
    if top_k is not None and (not _is_int(top_k) or top_k < 1):
        raise ConfigError(f"top_k={top_k!r} must be an integer >= 1 or None (all tokens)")
    if lengths.shape != (batch,) or bool((lengths < 1).any()) or bool((lengths > width).any()):
        raise ConfigError(f"prompt_lengths must give each of the {batch} rows a length in "
                          f"1..{width} (the padded width); got {lengths.tolist()}")


def pick_token(logits: torch.Tensor, temperature: float, top_k: int | None,
               generator: torch.Generator | None = None) -> torch.Tensor:
    """Next token (B,) from last-position logits (B, V): argmax for temperature 0, else a
    draw from softmax(logits / temperature) restricted to the top_k largest logits."""
    logits = logits.float()
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def meta_transformer(cfg: ModelConfig) -> Transformer:
    """The model of ``cfg`` on the ``meta`` device: every parameter has its shape and no
    storage, so the matrix table (shapes, fan-ins, σ) of any size costs no memory."""
    with torch.device("meta"):
        return Transformer(cfg)
