"""The toy's measurements, taken on a transformer: RD of FFN input weights and of Q/K, and
the condensation score of FFN neurons (docs/science.md §2, §5).

A transformer FFN x ↦ W_down σ(W_up x) is a two-layer net with m = d_ff hidden units
(docs/science.md §5). Neuron k of layer ℓ has

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

from typing import Any

import numpy as np

from smallinit.core.errors import StoreError
from smallinit.kernels import cluster_count, condensation_scores, relative_distance
from smallinit.llm.model.init import matrix_table
from smallinit.llm.model.matrices import one
from smallinit.llm.model.transformer import Transformer
from smallinit.llm.training.trained import load_trained


def _host(t) -> np.ndarray:
    return t.detach().cpu().double().numpy()


def _table(model):
    return matrix_table(model)


def _of_layer(table, part: str, layer: int) -> list:
    return [s for s in table if s.part == part and s.layer == layer]


def ffn_layers(table) -> list[int]:
    """The blocks that have an FFN (a ``mlp.down`` matrix), in order."""
    return sorted({s.layer for s in table if s.kind == "mlp.down"})


def ffn_neurons(model, layer: int, table=None) -> tuple[np.ndarray, np.ndarray]:
    """(input weights w_k as rows (d_ff, k·d [+ bias]), amplitudes A_k = ‖a_k‖·‖w_k‖), read
    from the model's matrix table: the FFN input matrices (SwiGLU: gate then up) side by
    side, then their bias entries, and the columns of W_down."""
    table = table if table is not None else _table(model)
    inputs = _of_layer(table, "mlp", layer)
    parts = [_host(s.rows_out) for s in inputs]
    biases = [s.bias_block for s in inputs]
    if biases and all(b is not None for b in biases):  # entry k of every input, side by side
        parts.append(np.stack([_host(b) for b in biases], axis=1))
    w_in = np.concatenate(parts, axis=1)
    w_down = _host(one(table, "mlp.down", layer).rows_out)
    amp = np.linalg.norm(w_down, axis=0) * np.linalg.norm(w_in, axis=1)
    return w_in, amp


def measure_layers(model, model0, *, top_k: int, threshold: float) -> list[dict[str, Any]]:
    """Per layer: RD of the FFN input weights and of Q/K between ``model0`` (θ(0)) and
    ``model`` (θ(T)), the RMS displacement of the FFN inputs, the FFN condensation score
    at T and at 0 (one batched :func:`~smallinit.kernels.condensation_scores` call over all
    layers each), and the cluster count of the amplitude-carrying neurons at T (module
    docstring)."""
    now, start = _table(model), _table(model0)
    layers = ffn_layers(now)
    neurons = [ffn_neurons(model, i, now) for i in layers]
    neurons0 = [ffn_neurons(model0, i, start) for i in layers]
    scores = condensation_scores(
        np.stack([w for w, _ in neurons]),
        np.stack([a for _, a in neurons]),
        top_k=top_k,
        threshold=threshold,
    )
    scores0 = condensation_scores(
        np.stack([w for w, _ in neurons0]),
        np.stack([a for _, a in neurons0]),
        top_k=top_k,
        threshold=threshold,
    )
    out = []
    for j, layer in enumerate(layers):
        (w, amp), (w0, _) = neurons[j], neurons0[j]
        heavy = amp >= 1e-3 * amp.max()
        qk = [_host(s.rows_out) for s in _of_layer(now, "qk", layer)]
        qk0 = [_host(s.rows_out) for s in _of_layer(start, "qk", layer)]
        out.append(
            {
                "layer": layer,
                "rd_ffn": relative_distance(w, w0),
                "rd_qk": relative_distance(qk, qk0),
                "dw_rms": float(np.sqrt(np.mean((w - w0) ** 2))),
                "score": float(scores[j]),
                "score_init": float(scores0[j]),
                "clusters": cluster_count(w[heavy], threshold),
                "m": int(w.shape[0]),
            }
        )
    return out


def initial_model(cfg):
    """θ(0) of the training run ``cfg`` (a :class:`~smallinit.llm.run_config.RunConfig`),
    re-created exactly as the trainer creates it."""
    return Transformer(cfg.model, cfg.scheme, seed=cfg.seed)


def trained_model(cfg, run_path):
    """The final weights ``model.pt`` of the finished training run of ``cfg``."""
    stored_cfg, model = load_trained(run_path)
    if stored_cfg != cfg:
        raise StoreError(f"{run_path} holds a run of another config than the one asked for")
    return model
