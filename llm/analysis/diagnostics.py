"""Forward-pass diagnostics of the two settings that hide small init's benefit (docs/science.md §5).

* **RMSNorm saturation.** RMSNorm computes y = g ⊙ x / √(mean(x²) + ε). When
  mean(x²) < ε the denominator is dominated by ε and the layer stops normalizing (its
  output shrinks with its input). :func:`saturation_fraction` is the share of normalized
  vectors (one per token and norm call) with mean(x²) < ε. With embeddings at std d^{−γ}
  this happens once γ ≳ γ_ε = ln(1/ε)/(2 ln d) (``smallinit.theory.transformer``).
* **Attention sink.** :func:`sink_mass` is the mean attention weight that queries at
  positions ≥ ``skip`` put on key position 0 (docs/science.md §5: "queries past the first few"),
  averaged over batch, heads and queries. A uniform causal head gives 1/(t+1) at query t.
* **Massive activations.** :func:`max_median_ratio` is max |h| / median |h| over the
  entries of a residual-stream tensor h; sink heads come with a few huge residual entries.

:func:`collect` runs one diagnostic forward pass of a
:class:`~smallinit.llm.model.transformer.Transformer` with forward hooks on every RMSNorm
(its input) and every block (its residual output) and the model's explicit attention path (which
returns the weights).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

DEFAULT_SINK_SKIP = 4


def saturation_fraction(x: torch.Tensor | np.ndarray, eps: float) -> float:
    """Share of the last-axis vectors of ``x`` with mean(x²) < ``eps`` (RMSNorm saturated)."""
    x = torch.as_tensor(x, dtype=torch.float64)
    if x.ndim == 0 or x.shape[-1] == 0 or x.numel() == 0:
        raise ValueError(f"x has shape {tuple(x.shape)}; need (..., d) with d >= 1")
    ms = x.pow(2).mean(dim=-1)
    return float((ms < eps).double().mean())


def sink_mass(weights: torch.Tensor | np.ndarray, skip: int = DEFAULT_SINK_SKIP) -> float:
    """Mean attention weight on key 0 of queries at positions ≥ ``skip``.

    ``weights`` has shape (..., T_query, T_key) with rows summing to 1 (any leading axes:
    batch, heads, layers)."""
    w = torch.as_tensor(weights, dtype=torch.float64)
    if w.ndim < 2:
        raise ValueError(f"weights has shape {tuple(w.shape)}; need (..., T, T)")
    if not 0 <= skip < w.shape[-2]:
        raise ValueError(f"skip={skip} is not allowed; it must be in [0, {w.shape[-2] - 1}]")
    return float(w[..., skip:, 0].mean())


def uniform_sink_mass(T: int, skip: int = DEFAULT_SINK_SKIP) -> float:
    """sink_mass of uniform causal attention: mean over t = skip..T−1 of 1/(t+1)."""
    t = np.arange(skip, T)
    return float(np.mean(1.0 / (t + 1)))


def max_median_ratio(h: torch.Tensor | np.ndarray) -> float:
    """max |h| / median |h| over all entries (inf when the median is 0 and the max is not)."""
    a = torch.as_tensor(h, dtype=torch.float64).abs().flatten()
    if a.numel() == 0:
        raise ValueError("h is empty")
    med = float(a.median())
    top = float(a.max())
    if med == 0:
        return 0.0 if top == 0 else float("inf")
    return top / med


@torch.no_grad()
def collect(model: nn.Module, idx: torch.Tensor, skip: int = DEFAULT_SINK_SKIP) -> dict[str, Any]:
    """One forward pass on ``idx`` (B, T) with hooks; returns scalars and per-layer lists:

    ``saturation`` (all RMSNorm calls pooled), ``saturation_per_norm`` (in call order:
    norm1, norm2 of each block, then the final norm), ``input_ms`` (mean of mean(x²) per
    norm), ``sink``/``sink_per_layer`` (:func:`sink_mass`), ``uniform_sink``, and
    ``resid_ratio``/``resid_ratio_per_layer`` (:func:`max_median_ratio` of each block's
    output; the scalar is the largest over layers)."""
    norm_inputs: list[tuple[torch.Tensor, float]] = []
    resid: list[torch.Tensor] = []
    hooks = []
    for module in model.modules():
        if isinstance(module, nn.RMSNorm):
            eps = module.eps if module.eps is not None else torch.finfo(torch.float32).eps

            def on_norm(mod, inputs, output, eps=eps):
                norm_inputs.append((inputs[0].detach().float(), float(eps)))

            hooks.append(module.register_forward_hook(on_norm))
    for block in getattr(model, "blocks", []):
        hooks.append(
            block.register_forward_hook(
                lambda mod, inputs, output: resid.append(output[0].detach().float())
            )
        )
    was_training = model.training
    model.eval()
    try:
        _, _, weights = model(idx, need_weights=True)
    finally:
        model.train(was_training)
        for h in hooks:
            h.remove()
    out: dict[str, Any] = {}
    if norm_inputs:
        per = [saturation_fraction(x, eps) for x, eps in norm_inputs]
        counts = [x[..., 0].numel() for x, _ in norm_inputs]
        out["saturation"] = float(np.average(per, weights=counts))
        out["saturation_per_norm"] = per
        out["input_ms"] = [float(x.pow(2).mean()) for x, _ in norm_inputs]
    sinks = [sink_mass(w, skip) for w in weights if w is not None]
    if sinks:
        out["sink"] = float(np.mean(sinks))
        out["sink_per_layer"] = sinks
        out["uniform_sink"] = uniform_sink_mass(idx.shape[1], skip)
    if resid:
        ratios = [max_median_ratio(h) for h in resid]
        out["resid_ratio"] = float(max(ratios))
        out["resid_ratio_per_layer"] = ratios
    return out
