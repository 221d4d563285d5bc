"""A decoder-only transformer with the knobs the γ-init experiments need.

Token ids → embedding (+ a learned position table, or RoPE inside attention) → the blocks
of :mod:`.layers` (pre-norm or post-norm, docs/science.md §6) → a final norm N_f (the
identity for post-norm, whose last block's output is already normed) → the head's
next-token logits, and with targets their mean cross-entropy.

The module classes come from :class:`.layers.Parts`, chosen once when the model is built
(:func:`.fastlayers.chosen_parts`: the CPU fast path's layers, the same numbers as the
plain ones, unless ``SMALLINIT_FASTPATH=0``); this file and :mod:`.layers` are the model as
it reads. Decoding (:meth:`Transformer.generate`, the key/value cache) lives beside it in
:mod:`.generate`; :meth:`Transformer.hidden` takes the cache.

Every module declares the weight matrices it creates (:func:`.matrices.declare`);
:meth:`Transformer.matrices` lists them, and that one table is what the init
(:func:`smallinit.llm.model.init.apply_init`) and the measurements read. Weights are created
with PyTorch's defaults; ``apply_init`` sets them by an init scheme (the model constructor
calls it when given one).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from smallinit.llm.model.fastlayers import chosen_parts
from smallinit.llm.model.generate import (
    KVCache,
    check_ids_without_sync,
    generate,
    window_positions,
)
from smallinit.llm.model.init import apply_init
from smallinit.llm.model.layers import Block, Parts, make_norm, rope_tables
from smallinit.llm.model.matrices import MatrixSpec, declare, declared_matrices
from smallinit.llm.run_config import ModelConfig


class Transformer(nn.Module):
    """Token ids (B, T) → next-token logits (B, T, vocab).

    ``forward(idx, targets)`` also returns the mean cross-entropy; ``token_losses`` the
    per-token losses; ``forward(idx, need_weights=True)`` the attention weights of every
    layer (explicit softmax path, slower; for diagnostics such as attention sinks);
    ``generate`` continues prompts (:func:`.generate.generate`).

    ``parts``: the module classes (default :func:`.fastlayers.chosen_parts`;
    :data:`.layers.PLAIN_PARTS` for PyTorch's composites everywhere, the same numbers).
    """

    def __init__(self, cfg: ModelConfig, scheme=None, *, seed: int = 0, parts: Parts | None = None):
        super().__init__()
        self.cfg = cfg
        parts = chosen_parts() if parts is None else parts
        d = cfg.d_model
        self.tok_emb = nn.Embedding(cfg.vocab_size, d)  # rows are tokens: fan-in d (§1)
        declare(self.tok_emb, part="embedding", kind="embedding", d_in=d, d_out=cfg.vocab_size)
        self.pos_emb = None
        if cfg.positions == "learned":
            self.pos_emb = nn.Embedding(cfg.context, d)
            declare(self.pos_emb, part="embedding", kind="positions", d_in=d, d_out=cfg.context)
        self.blocks = nn.ModuleList(Block(cfg, i, parts) for i in range(cfg.n_layers))
        self.norm_f = nn.Identity() if cfg.norm_position == "post" else make_norm(cfg, parts)
        self.head = parts.head(d, cfg.vocab_size, bias=cfg.head_bias)
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

    def hidden(
        self,
        idx: torch.Tensor,
        need_weights: bool = False,
        *,
        cache: KVCache | None = None,
        pad: torch.Tensor | None = None,
    ):
        """Final normed hidden states (B, T, d) and the list of attention weights.

        Training and scoring call it with ``idx`` alone (positions 0..T−1, causal). Decoding
        passes a ``cache`` (the tokens continue its window at slot ``cache.length``) and/or
        ``pad`` (B,), the number of left-padding slots of each row (:func:`window_positions`).
        ``idx`` must be an integer tensor (a TypeError otherwise). Ids outside the
        vocabulary are a ValueError naming the id and the vocabulary size when ``idx`` lies
        on the CPU and the call is not being compiled (one min and one max); on a GPU they
        are checked by :meth:`generate`, not here, where a check would cost a device sync.
        """
        check_ids_without_sync(idx, self.cfg.vocab_size)
        B, T = idx.shape
        start = cache.length if cache is not None else 0
        if start + T > self.cfg.context:
            raise ValueError(
                f"sequence length {start + T} exceeds model.context={self.cfg.context}"
            )
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

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None, *, need_weights: bool = False
    ):
        """Logits; with ``targets`` also the mean loss; with ``need_weights`` also the
        attention weights, as ``(logits, loss, weights)``."""
        h, weights = self.hidden(idx, need_weights)
        if targets is None:
            logits, loss = self.head(h), None
        else:
            logits, loss = self.head.logits_and_loss(h, targets)
        if need_weights:
            return logits, loss, weights
        return logits if targets is None else (logits, loss)

    def generate(self, idx: torch.Tensor, max_new_tokens: int, **options) -> torch.Tensor:
        """Continue the prompts ``idx`` (B, T) by up to ``max_new_tokens`` tokens each, with
        a KV cache: :func:`.generate.generate` (its options, rules and refusals)."""
        return generate(self, idx, max_new_tokens, **options)

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
