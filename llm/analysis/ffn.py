"""The toy's measurements, taken on a transformer: RD of FFN input weights and of Q/K, and
the condensation score of FFN neurons (SPEC §2, §5).

A transformer FFN x ↦ W_down σ(W_up x) is a two-layer net with m = d_ff hidden units
(SPEC §5). Neuron k of layer ℓ has

* input weights w_k = W_up[k, :] (SwiGLU: the concatenation (W_gate[k, :], W_up[k, :]),
  both read the block input), plus the bias entry b_up[k] when the model has biases — the
  analogue of the toy's (w_k, b_k);
* output weights a_k = W_down[:, k] ∈ R^{d_model} (a vector: the FFN has d_model outputs).

Measures, all from :mod:`smallinit.kernels` (the functions the toy calls):

* RD_FFN = ‖θ_w(T) − θ_w(0)‖ / ‖θ_w(0)‖ over every input weight of the layer's FFN
  (:func:`~smallinit.kernels.relative_distance`), at the end T of a fixed token budget
  (the toy measures at the first time its loss is below tol);
* RD_QK, the same over the layer's query and key matrices together;
* the RMS displacement per FFN input weight, ‖θ_w(T) − θ_w(0)‖/√(number of weights): with
  ‖θ_w(0)‖ ≈ σ_up·√(number) it is ≈ RD_FFN·σ_up, the part of RD that does not come from the
  init scale (under the γ rule σ_up = d_model^{−γ}, so S_w = γ + its own width slope);
* condensation score: the toy's amplitude A_k = |a_k|·‖w_k‖ becomes A_k = ‖a_k‖·‖w_k‖
  (the product of the neuron's output and input norms, which is how much the neuron can
  contribute, ‖a_k σ(w_k·x)‖ ≤ ‖a_k‖‖w_k‖‖x‖ for a 1-Lipschitz σ with σ(0) = 0); the score is
  the share of Σ A_k carried by the ``top_k`` heaviest orientation clusters of the w_k at
  a cosine ``threshold`` (:func:`~smallinit.kernels.condensation_score`). For isotropic
  random w_k in high dimension it is ≈ top_k/m, so the score at init is reported beside it.

The initial weights are re-created, not stored: the trainer builds its model as
``Transformer(cfg.model, cfg.scheme, seed=cfg.seed)``, whose init draws come from one CPU
generator seeded with the seed (:func:`smallinit.llm.model.init.apply_init`), so the same call
returns exactly the trained run's θ(0).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np


def _blocks(model) -> dict[tuple[str, int], list[np.ndarray]]:
    """Weight blocks by (part, layer), in the model's order, as float64 NumPy arrays."""
    from smallinit.llm.model.init import matrix_specs

    out: dict[tuple[str, int], list[np.ndarray]] = defaultdict(list)
    for spec in matrix_specs(model):
        block = spec.param.detach()[spec.index]
        out[(spec.part, spec.layer)].append(block.cpu().double().numpy())
    return out


def _ffn_bias(model, layer: int) -> np.ndarray | None:
    bias = model.blocks[layer].mlp.up.bias
    if bias is None:
        return None
    values = bias.detach().cpu().double().numpy()
    if model.blocks[layer].mlp.swiglu:  # rows gate | up: bias entry k of both, side by side
        return values.reshape(2, -1).T
    return values[:, None]


def ffn_neurons(model, layer: int, blocks=None) -> tuple[np.ndarray, np.ndarray]:
    """(input weights w_k as rows (d_ff, k·d [+ bias]), amplitudes A_k = ‖a_k‖·‖w_k‖)."""
    blocks = blocks if blocks is not None else _blocks(model)
    parts = list(blocks[("mlp", layer)])
    bias = _ffn_bias(model, layer)
    if bias is not None:
        parts.append(bias)
    w_in = np.concatenate(parts, axis=1)
    (w_down,) = blocks[("mlp_out", layer)]
    amp = np.linalg.norm(w_down, axis=0) * np.linalg.norm(w_in, axis=1)
    return w_in, amp


def measure_layers(model, model0, *, top_k: int, threshold: float) -> list[dict[str, Any]]:
    """Per layer: RD of the FFN input weights and of Q/K between ``model0`` (θ(0)) and
    ``model`` (θ(T)), the RMS displacement of the FFN inputs, the FFN condensation score
    at T and at 0, and the cluster count of the amplitude-carrying neurons at T (module
    docstring)."""
    from smallinit.kernels import cluster_count, condensation_score, relative_distance

    now, start = _blocks(model), _blocks(model0)
    out = []
    for layer in range(model.cfg.n_layers):
        w, amp = ffn_neurons(model, layer, now)
        w0, amp0 = ffn_neurons(model0, layer, start)
        heavy = amp >= 1e-3 * amp.max()
        out.append({
            "layer": layer,
            "rd_ffn": relative_distance(w, w0),
            "rd_qk": relative_distance(now[("qk", layer)], start[("qk", layer)]),
            "dw_rms": float(np.sqrt(np.mean((w - w0) ** 2))),
            "score": condensation_score(w, amp, top_k=top_k, threshold=threshold),
            "score_init": condensation_score(w0, amp0, top_k=top_k, threshold=threshold),
            "clusters": cluster_count(w[heavy], threshold),
            "m": int(w.shape[0]),
        })
    return out


def initial_model(cfg):
    """θ(0) of the training run ``cfg`` (a :class:`~smallinit.llm.config.RunConfig`),
    re-created exactly as the trainer creates it."""
    from smallinit.llm.model.transformer import Transformer

    return Transformer(cfg.model, cfg.scheme, seed=cfg.seed)


def trained_model(cfg, run_path):
    """The final weights ``model.pt`` of the finished training run of ``cfg``."""
    from smallinit.errors import StoreError
    from smallinit.llm.training.trained import load_trained

    stored_cfg, model = load_trained(run_path)
    if stored_cfg != cfg:
        raise StoreError(f"{run_path} holds a run of another config than the one asked for")
    return model
