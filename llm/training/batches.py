"""Batches of token windows: where a step's training windows start, and the windows as
(input, target) tensors.

A step's global batch is a function of (seed, step) only (:func:`batch_starts`), so a run
resumed from a checkpoint sees the same data as the uninterrupted one.
"""

from __future__ import annotations

import numpy as np
import torch


def batch_starts(step: int, seed: int, n_tokens: int, context: int, batch: int) -> np.ndarray:
    """Window starts of the global batch of ``step`` (deterministic in seed and step)."""
    high = n_tokens - context - 1
    if high < 1:
        raise ValueError(f"training split has {n_tokens} tokens, too few for context {context}")
    rng = np.random.default_rng([seed, step])
    return rng.integers(0, high, size=batch)


def get_batch(tokens: np.ndarray, starts: np.ndarray, context: int, device):
    idx = starts[:, None] + np.arange(context + 1)
    chunk = torch.from_numpy(np.asarray(tokens[idx], dtype=np.int64))
    if device.type == "cuda":
        chunk = chunk.pin_memory().to(device, non_blocking=True)
    return chunk[:, :-1], chunk[:, 1:]
