"""Probes: what the weights and activations do *during* a pretraining run (figs 8 and 10).

Every pretraining run (:class:`~smallinit.llm.training.train.LMTask`) carries a
:class:`Probes` callback that measures the model at log-spaced steps (:func:`probe_steps`),
without changing what is trained (no random numbers drawn, no parameter touched):

* weight geometry (docs/science.md §5, "condense, then expand"), through the shared kernels'
  :func:`smallinit.kernels.measure_stack` (one batched call per matrix shape, on the
  model's device; the values of :func:`smallinit.kernels.measure_all`): effective rank
  exp(H(σ/Σσ)) (Roy & Vetterli 2007),
  top singular-value share σ₁/Σσ, cosine-cluster count (threshold 0.95) and mean |cos| of
  the rows of the token embedding, each layer's W_Q and W_K, and each layer's FFN input
  W_gate (SwiGLU; W_up for a GELU MLP) — the rows that play the two-layer net's input
  weights (docs/science.md §5);
* activation diagnostics (:func:`smallinit.llm.analysis.diagnostics.collect`) on a fixed held-out
  batch: RMSNorm saturation, attention-sink mass, max/median residual activation.

Probe records go to ``metrics.jsonl`` as ``{"step": s, "probe": {...}}`` lines, so a
resumed run keeps exactly the probes up to its checkpoint (the trainer cuts the metrics
back to it); :func:`trajectory` reads them back as arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from smallinit.kernels import measure_stack
from smallinit.llm.analysis.diagnostics import collect
from smallinit.llm.model.init import matrix_table
from smallinit.llm.model.matrices import one, select
from smallinit.llm.training.batches import get_batch
from smallinit.llm.training.callbacks import Callback

PROBE_BATCH = 8


def probe_steps(steps: int, per_decade: int = 4) -> list[int]:
    """0 and about ``per_decade`` log-spaced steps per decade in [1, steps], ``steps`` last."""
    if steps < 1:
        raise ValueError(f"steps={steps} must be >= 1")
    n = int(np.ceil(per_decade * np.log10(max(steps, 2)))) + 1
    grid = np.unique(np.round(np.logspace(0, np.log10(steps), n)).astype(int))
    return sorted({0, *grid.tolist(), steps})


def tracked_matrices(model) -> dict[str, torch.Tensor]:
    """The matrices fig 10 follows, by name, read from the model's matrix table
    (:func:`smallinit.llm.model.init.matrix_table`): ``emb``, ``L{i}.q``, ``L{i}.k``,
    ``L{i}.ffn_in`` (the FFN's first input matrix: W_gate for SwiGLU, W_up for GELU; rows =
    output units, columns = d_model)."""
    table = matrix_table(model)
    out = {"emb": one(table, "embedding").rows_out}
    layers = sorted({s.layer for s in select(table, "attn.q")})
    for i in layers:
        out[f"L{i}.q"] = one(table, "attn.q", i).rows_out
        out[f"L{i}.k"] = one(table, "attn.k", i).rows_out
        ffn_in = list(select(table, "mlp.gate", i)) or list(select(table, "mlp.up", i))
        out[f"L{i}.ffn_in"] = ffn_in[0].rows_out
    return out


def measure_model(model) -> dict[str, dict[str, float]]:
    """:func:`smallinit.kernels.measure_all` of every tracked matrix, taken as one batched
    :func:`smallinit.kernels.measure_stack` call per shape (W_Q and W_K of all layers
    together, the FFN inputs of all layers, the embedding) on the model's device."""
    tracked = tracked_matrices(model)
    groups: dict[tuple[int, ...], list[str]] = {}
    for name, w in tracked.items():
        groups.setdefault(tuple(w.shape), []).append(name)
    out: dict[str, dict[str, float]] = {}
    with torch.no_grad():
        for names in groups.values():
            stack = torch.stack([tracked[n].detach().float() for n in names])
            values = measure_stack(stack)
            for j, name in enumerate(names):
                out[name] = {k: float(v[j]) for k, v in values.items()}
    return {name: out[name] for name in tracked}


class Probes(Callback):
    """Measure the model (:func:`measure_model`, :func:`~smallinit.llm.analysis.diagnostics.collect`
    on the first ``PROBE_BATCH`` held-out windows) at step 0 and after each step of
    :func:`probe_steps` (``steps``: the run's length)."""

    def __init__(self, steps: int, val: np.ndarray, context: int):
        self.steps = set(probe_steps(steps))
        self.val = val
        self.context = context
        self.batch: torch.Tensor | None = None

    def probe(self, trainer, run, step: int) -> None:
        """Log the probe of ``step``; none for a model whose weights are no longer finite
        (a diverged run, which its next log step records as failed)."""
        if not all(bool(torch.isfinite(p).all()) for p in trainer.model.parameters()):
            return
        if self.batch is None:
            n = min(PROBE_BATCH, (len(self.val) - 1) // self.context)
            self.batch, _ = get_batch(
                self.val, np.arange(n) * self.context, self.context, trainer.device
            )
        record = {"weights": measure_model(trainer.model), **collect(trainer.model, self.batch)}
        run.log({"step": step, "probe": record})

    def on_start(self, trainer, run, step: int) -> None:
        if step == 0:
            self.probe(trainer, run, 0)

    def on_step(self, trainer, run, step: int, record=None) -> None:
        if step in self.steps:
            self.probe(trainer, run, step)


def trajectory(run) -> dict[str, Any]:
    """A traced run's probes as arrays: ``steps`` (n,), ``weights[name][metric]`` (n,),
    and every scalar diagnostic (``saturation``, ``sink``, ``resid_ratio``, ...) as (n,)."""
    recs = [r for r in run.metrics() if "probe" in r]
    recs.sort(key=lambda r: r["step"])
    out: dict[str, Any] = {"steps": np.array([r["step"] for r in recs])}
    if not recs:
        return out
    names = recs[0]["probe"]["weights"].keys()
    out["weights"] = {
        n: {
            m: np.array([r["probe"]["weights"][n][m] for r in recs])
            for m in recs[0]["probe"]["weights"][n]
        }
        for n in names
    }
    for key, value in recs[0]["probe"].items():
        if key != "weights" and isinstance(value, int | float):
            out[key] = np.array([r["probe"].get(key, np.nan) for r in recs], dtype=float)
    return out
