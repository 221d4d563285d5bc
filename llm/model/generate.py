"""Decoding: the key/value cache and :func:`generate`, beside the model they drive.

:func:`generate` continues prompts with a model that has ``cfg`` (its :class:`ModelConfig`),
``hidden(idx, cache=..., pad=...)`` (the final normed hidden states of tokens that continue
a cache's window) and ``head`` (hidden states → logits): the
:class:`~smallinit.llm.model.transformer.Transformer`, whose ``generate`` method calls it.
Token t's key and value depend only on tokens ≤ t, so each step computes the new token's
query, key and value and attends to the stored ones (:class:`KVCache`) — the logits of the
full causal forward, at O(T) instead of O(T²) work per token. The training forward does not
touch the cache. :func:`window_positions` gives the positions and mask of tokens that
continue a window of left-padded rows.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence

import torch
from torch import nn

from smallinit.core.errors import ConfigError
from smallinit.llm.run_config import ModelConfig


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
        self.k[layer, :, :, self.length : end] = k
        self.v[layer, :, :, self.length : end] = v
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


@torch.no_grad()
def generate(
    model: nn.Module,
    idx: torch.Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    stop_tokens: Sequence[int] = (),
    prompt_lengths: Sequence[int] | torch.Tensor | None = None,
    until: Callable[[int, list[int]], bool] | None = None,
    pad_id: int = 0,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    on_step: Callable[[int], None] | None = None,
) -> torch.Tensor:
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

    Context: the model sees at most ``model.cfg.context`` tokens; a longer prompt, or
    prompt plus generation, is conditioned on its last ``cfg.context`` tokens (a sliding
    window, as nanoGPT crops ``idx``). Within the window each step feeds only the new token
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
    check_token_ids(idx, model.cfg.vocab_size)
    idx = idx.long()  # the embedding reads int64 (and int32) ids only; uint8 ids too
    B, T0 = idx.shape
    lengths = (
        torch.full((B,), T0, dtype=torch.long)
        if prompt_lengths is None
        else torch.as_tensor(prompt_lengths, dtype=torch.long).cpu()
    )
    check_generate_args(T0, lengths, max_new_tokens, temperature, top_k, B)
    ctx = model.cfg.context
    pad = (T0 - lengths).to(idx.device)
    seq = idx
    stops = torch.tensor(sorted(set(stop_tokens)), dtype=torch.long, device=idx.device)
    n_new = torch.zeros(B, dtype=torch.long, device=idx.device)
    done = torch.zeros(B, dtype=torch.bool, device=idx.device)
    cache, cache_pad = None, pad
    for step in range(max_new_tokens):
        if cache is not None and cache.length < cache.size:  # feed the new token only
            h, _ = model.hidden(seq[:, -1:], cache=cache, pad=cache_pad)
        else:  # (re)read the window: the first step, or every step once it slides
            window = seq[:, -ctx:]
            cache_pad = (pad - (seq.shape[1] - window.shape[1])).clamp(min=0)
            if use_cache:
                size = min(ctx, window.shape[1] + max_new_tokens - step)
                cache = KVCache(model.cfg, B, size)
            row_pad = cache_pad if bool(cache_pad.any()) or use_cache else None
            h, _ = model.hidden(window, cache=cache, pad=row_pad)
        token = pick_token(model.head(h[:, -1]), temperature, top_k, generator)
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


#: The temperatures :func:`generate` accepts besides 0 (greedy). Below 1e-3
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
        raise TypeError(
            f"token ids must be a torch integer tensor of shape (batch, length), "
            f"got {type(idx).__module__}.{type(idx).__name__}; e.g. "
            "torch.tensor([[1, 2, 3]])"
        )
    if idx.dtype == torch.bool or idx.dtype.is_floating_point or idx.dtype.is_complex:
        raise TypeError(
            f"token ids must be an integer tensor, got dtype {idx.dtype}; convert with .long()"
        )
    if idx.dim() != 2:
        raise ConfigError(
            f"token ids must have shape (batch, length), got shape "
            f"{tuple(idx.shape)}; add a batch dimension with idx[None]"
        )
    if idx.numel():
        low, high = int(idx.min()), int(idx.max())
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise ConfigError(
                f"token id {bad} is outside the vocabulary; ids must be in "
                f"[0, {vocab_size}) (model.vocab_size={vocab_size})"
            )


def check_ids_without_sync(idx, vocab_size: int) -> None:
    """:func:`check_token_ids` wherever it costs neither a device sync nor a graph break:
    ids on the CPU outside ``torch.compile`` and ``torch.vmap`` (a population's batched ids
    read no single value); elsewhere only that ``idx`` is an integer tensor (the TypeError)."""
    if (
        isinstance(idx, torch.Tensor)
        and not (idx.dtype == torch.bool or idx.dtype.is_floating_point or idx.dtype.is_complex)
        and (
            idx.device.type != "cpu"
            or torch.compiler.is_compiling()
            or torch._C._functorch.is_batchedtensor(idx)
        )
    ):
        return
    check_token_ids(idx, vocab_size)


def check_generate_args(
    width: int,
    lengths: torch.Tensor,
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    batch: int,
) -> None:
    """Refuse generation settings that have no meaning (ConfigError naming the value)."""
    if width < 1:
        raise ConfigError(
            "generate needs a prompt of at least one token (e.g. the end-of-text token)"
        )
    if not _is_int(max_new_tokens) or max_new_tokens < 0:
        raise ConfigError(f"max_new_tokens={max_new_tokens!r} must be an integer >= 0")
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, numbers.Real)
        or not (temperature == 0 or MIN_TEMPERATURE <= temperature <= MAX_TEMPERATURE)
    ):
        raise ConfigError(
            f"temperature={temperature!r} is not allowed; use 0 (greedy) or a "
            f"number in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}]"
        )
    if top_k is not None and (not _is_int(top_k) or top_k < 1):
        raise ConfigError(f"top_k={top_k!r} must be an integer >= 1 or None (all tokens)")
    if lengths.shape != (batch,) or bool((lengths < 1).any()) or bool((lengths > width).any()):
        raise ConfigError(
            f"prompt_lengths must give each of the {batch} rows a length in "
            f"1..{width} (the padded width); got {lengths.tolist()}"
        )


def pick_token(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
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
