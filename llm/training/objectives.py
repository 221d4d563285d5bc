"""Training objectives other than next-token prediction at every position.

An objective wraps the :class:`~smallinit.llm.model.transformer.Transformer` as a module
whose ``forward(x, y)`` returns ``(logits, loss)`` like the model's own, so the trainer
can step it, wrap it in DDP and compile it the same way; its parameters are the model's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def last_logits(model, tokens: torch.Tensor) -> torch.Tensor:
    """Logits of the last position only (the head is applied to one position)."""
    hidden, _ = model.hidden(tokens)
    return model.head(hidden[:, -1])


class LastPositionLoss(torch.nn.Module):
    """Cross-entropy of the last position only, L = −(1/B) Σ_i log softmax(z_i)[y_i] with
    z_i = W_head h_L(x_i)[T−1] (computed in fp32); ``y`` has one label per sequence."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        logits = last_logits(self.model, x).float()
        return logits, F.cross_entropy(logits, y)
