"""The layers of :mod:`.layers` with the CPU fast path's functions (:mod:`.fastpath`).

Each class here subclasses a plain layer and replaces one computation by the function of
:mod:`.fastpath` that gives PyTorch's composite numbers bit for bit
(tests/llm/test_fastpath.py): :class:`FastRMSNorm` the norm, :class:`FastAttention` the split
into heads and RoPE, :class:`FastMLP` the SwiGLU or GELU activation, :class:`FastHead` the
logits and cross-entropy of a training step. Parameters, their names and the matrices
declared are the parent's, so a model built from either has the same state dict.

The choice is made in two places, each once:

* when a model is built, :func:`chosen_parts`: these classes unless the process started
  with ``SMALLINIT_FASTPATH=0`` (:data:`.fastpath.ON`, read at import), else the plain
  ones (:data:`.layers.PLAIN_PARTS`);
* at each call, what only the input can tell — CPU, float32, no autocast, not being
  compiled (:func:`.fastpath.enabled`): where it fails (a model moved to a GPU, cast to
  float64, compiled), the call is the plain parent's, through ``super()``.
"""

from __future__ import annotations

import torch
from torch import nn

from smallinit.llm.model import fastpath
from smallinit.llm.model.layers import MLP, PLAIN_PARTS, Attention, Head, Parts, Rope


class FastRMSNorm(nn.RMSNorm):
    """``nn.RMSNorm`` through :func:`.fastpath.rms_norm` (fewer passes, same numbers)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight is None or self.eps is None or not fastpath.enabled(x):
            return super().forward(x)
        return fastpath.rms_norm(x, self.weight, self.eps)


class FastAttention(Attention):
    """:class:`.layers.Attention` whose heads come from :func:`.fastpath.rotary_qkv` (RoPE
    with tables shared by the rows), or as views of the projection (learned positions)."""

    def split_heads(self, qkv: torch.Tensor, rope: Rope | None):
        if not fastpath.enabled(qkv) or (rope is not None and rope[0].dim() != 2):
            return super().split_heads(qkv, rope)
        if rope is None:  # the backward stacks ∂q, ∂k, ∂v in the projection's layout
            return tuple(t.transpose(1, 2) for t in qkv.unbind(2))
        T = qkv.shape[1]
        return fastpath.rotary_qkv(qkv, rope[0][:T], rope[1][:T])


class FastMLP(MLP):
    """:class:`.layers.MLP` with :func:`.fastpath.swiglu` or :func:`.fastpath.gelu` (ReLU
    is the plain one's)."""

    def activation(self, h: torch.Tensor) -> torch.Tensor:
        if self.kind == "relu" or not fastpath.enabled(h):
            return super().activation(h)
        return fastpath.swiglu(h) if self.swiglu else fastpath.gelu(h)


class FastHead(Head):
    """:class:`.layers.Head` whose training logits and loss are :func:`.fastpath.head` and
    :func:`.fastpath.cross_entropy` (recycled tokens × vocab buffers; one backward per
    forward). Logits without targets (scoring, decoding) are the plain ``nn.Linear``'s."""

    def logits_and_loss(self, h: torch.Tensor, targets: torch.Tensor):
        if self.bias is not None or self.loss_chunk > 0 or not fastpath.enabled(h):
            return super().logits_and_loss(h, targets)
        logits = fastpath.head(h, self.weight)
        return logits, fastpath.cross_entropy(logits.flatten(0, 1), targets.flatten())


FAST_PARTS = Parts(rmsnorm=FastRMSNorm, attention=FastAttention, mlp=FastMLP, head=FastHead)


def chosen_parts() -> Parts:
    """The classes a model is built from: :data:`FAST_PARTS`, or the plain ones when the
    process started with ``SMALLINIT_FASTPATH=0``."""
    return FAST_PARTS if fastpath.ON else PLAIN_PARTS
