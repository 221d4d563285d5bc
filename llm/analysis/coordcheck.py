"""The coordinate check of an init scheme: activation scale per part against width.

The γ-rule analogue of μP's coord check (Yang et al., Tensor Programs V, arXiv 2203.03466,
§D / the ``mup`` package's ``get_coord_data``): build the same transformer at several widths
d_model (same depth, heads, vocabulary, context; d_ff = r·d_model with the template's ratio
r), draw its weights by the scheme, train it a few AdamW steps at one constant learning
rate on uniformly random tokens, and record after every step s = 0 (init) … S the
per-coordinate scale RMS(x) = √(mean x²) of each part's activation on one fixed probe batch:

* ``embedding``: the residual stream entering block 0 (token, plus learned position, rows);
* per block ℓ: ``norm`` (the first norm's output, the input of the first linear layer),
  ``attn_in`` (the fused Q|K|V projection's output), ``attn_out`` (after W_o), ``ffn_in``
  (the up and SwiGLU gate projection's output), ``ffn_out`` (after W_down) and ``residual``
  (the block's output);
* ``logits``: the head's output.

Then, for every part and block, the least-squares slope of ln RMS against ln d_model at
step 0 and at step S. The γ rule predicts the slopes at init (docs/science.md §9.1): a
d_in-fan-in matrix with entries of std σ maps inputs of unit scale to outputs of scale
√d_in·σ, which is d_in^(1/2−γ) under σ = d_in^(−γ). The predictions computed here come from
the scheme's own σ table (:func:`smallinit.theory.init_rules.matrix_std` through
:func:`~smallinit.llm.model.init.init_table`) at each width, so they hold for any scheme:

* ``embedding``: ln σ_emb (a table row has scale σ_emb);
* ``norm``: 0 (a norm's output has unit scale while mean(x²) ≫ ε, docs/science.md §5.2);
* ``attn_in``: ln √(d·mean(σ_q², σ_k², σ_v²)); ``ffn_in``: ln(√d·σ_up); ``logits``:
  ln(√d·σ_head) — linear maps of a unit-scale norm output;
* ``attn_out``: ln(√d·σ_v) + ln(√d·σ_o), if the attention pattern (which averages values
  over positions) does not change with width;
* ``ffn_out``: k·ln(√d·σ_up) + ln(√d_ff·σ_down) with k = 2 for SwiGLU (silu(g)·u) and 1 for
  GELU — exact when ln(√d·σ_up) is flat in width, and the small-pre-activation limit
  otherwise (silu(g) ≈ g/2, gelu(u) ≈ u/2);
* ``residual``: none (a sum of terms with different slopes).

Each prediction is the least-squares slope of the predicted ln scale over the same widths,
so a width-dependent d_ff rounding is accounted for. After training no prediction is made:
the γ rule sets the init, not the learning rate, so under AdamW's per-entry step the
updates move the slopes (the effect μP's learning-rate scaling corrects).

Several seeds are averaged as the mean of ln RMS (a geometric mean). Everything is seeded
and deterministic on CPU: the probe batch and the batch of step s are drawn by generators
seeded with (seed, 0) and (seed, s), the same at every width.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from smallinit.core.config import override
from smallinit.core.errors import ConfigError
from smallinit.llm.model.init import init_table
from smallinit.llm.model.transformer import Transformer, meta_transformer
from smallinit.llm.run_config import ModelConfig, RunConfig, TrainConfig
from smallinit.llm.training.memory import check_training_memory
from smallinit.llm.training.train import make_optimizer, train_step

#: parts in the order they are computed (and drawn)
PARTS = ("embedding", "norm", "attn_in", "attn_out", "ffn_in", "ffn_out", "residual", "logits")
#: parts measured once per block (the others once per model)
BLOCK_PARTS = ("norm", "attn_in", "attn_out", "ffn_in", "ffn_out", "residual")
#: the template the CLI starts from: small enough for seconds on a CPU
DEFAULTS = RunConfig(
    model=ModelConfig(vocab_size=256, context=32, d_model=256, n_layers=2, n_heads=4),
    train=TrainConfig(batch_size=8),
)
DEFAULT_WIDTHS = (32, 64, 128, 256)
DEFAULT_STEPS = 4


def width_config(model: ModelConfig, width: int) -> ModelConfig:
    """The template ``model`` at d_model = ``width``: d_ff = round(r·width) with the
    template's ratio r = ffn_dim/d_model (so d_ff grows in proportion), all else kept."""
    ratio = model.ffn_dim / model.d_model
    return override(model, {"d_model": width, "d_ff": max(1, round(ratio * width))})


def check_widths(widths, model: ModelConfig) -> list[int]:
    """The widths as a sorted list; refuses fewer than two distinct widths (no slope) and
    widths the template's heads cannot split (one-line ConfigError)."""
    try:
        values = sorted({int(w) for w in widths})
    except (TypeError, ValueError):
        raise ConfigError(
            f"widths {widths!r} are not integers; give at least two positive "
            "integers, e.g. 32,64,128,256"
        ) from None
    if len(values) < 2:
        raise ConfigError(
            f"widths {list(widths)} give no slope; give at least two distinct "
            "widths, e.g. 32,64,128,256"
        )
    bad = [w for w in values if w < 1 or w % model.n_heads]
    if bad:
        raise ConfigError(
            f"width {bad[0]} is not allowed; every width must be a positive "
            f"multiple of model.n_heads={model.n_heads}"
        )
    if model.positions == "rope":
        odd = [w for w in values if (w // model.n_heads) % 2]
        if odd:
            raise ConfigError(
                f"width {odd[0]} is not allowed; RoPE needs an even head "
                f"dimension, so every width must be a multiple of "
                f"2·model.n_heads={2 * model.n_heads}"
            )
    return values


def loglog_slope(widths, log_values) -> float:
    """Least-squares slope of ``log_values`` against ln ``widths`` (NaN if any is not
    finite)."""
    y = np.asarray(log_values, dtype=float)
    if not np.all(np.isfinite(y)):
        return float("nan")
    return float(np.polyfit(np.log(np.asarray(widths, dtype=float)), y, 1)[0])


# ----------------------------------------------------------------------------- predictions
def predicted_log_scales(model: ModelConfig, scheme) -> dict[str, float | None]:
    """ln of each part's predicted scale at init for a model of shape ``model`` (module
    docstring; None where nothing is predicted), from the scheme's σ of every matrix. Block
    parts use block 0's matrices (the same σ in every block except for the depth factors
    of ``mitchell``, which are constant in width)."""
    rows = init_table(meta_transformer(model), scheme)
    sigma: dict[str, float] = {}
    for r in rows:
        if r["layer"] == 0 or r["kind"] in ("embedding", "positions", "head"):
            sigma.setdefault(r["kind"], r["std"])
    d, d_ff = model.d_model, model.ffn_dim
    head = sigma.get("head", sigma["embedding"])  # a tied head is the embedding table
    gain_up = math.log(math.sqrt(d) * sigma["mlp.up"])
    k = 2 if model.mlp == "swiglu" else 1
    return {
        "embedding": math.log(sigma["embedding"]),
        "norm": 0.0,
        "attn_in": 0.5
        * math.log(d * (sigma["attn.q"] ** 2 + sigma["attn.k"] ** 2 + sigma["attn.v"] ** 2) / 3),
        "attn_out": math.log(d * sigma["attn.v"] * sigma["attn.o"]),
        "ffn_in": gain_up,
        "ffn_out": k * gain_up + math.log(math.sqrt(d_ff) * sigma["mlp.down"]),
        "residual": None,
        "logits": math.log(math.sqrt(d) * head),
    }


def predicted_slopes(model: ModelConfig, scheme, widths) -> dict[str, float | None]:
    """Each part's predicted slope of ln scale against ln d_model at init over ``widths``."""
    per_width = [predicted_log_scales(width_config(model, w), scheme) for w in widths]
    return {
        part: (
            None
            if per_width[0][part] is None
            else loglog_slope(widths, [p[part] for p in per_width])
        )
        for part in PARTS
    }


# ----------------------------------------------------------------------------- measuring
def _rms(x: torch.Tensor) -> float:
    return float(x.detach().float().pow(2).mean().sqrt())


class _Recorder:
    """Forward hooks that keep each part's RMS of the last forward pass."""

    def __init__(self, model: Transformer):
        self.values: dict[tuple[str, int], float] = {}
        self.handles = []
        first = model.blocks[0]
        self._hook(first, "embedding", 0, pre=True)
        for i, block in enumerate(model.blocks):
            self._hook(block.norm1, "norm", i)
            self._hook(block.attn.qkv, "attn_in", i)
            self._hook(block.attn, "attn_out", i)
            self._hook(block.mlp.up, "ffn_in", i)
            self._hook(block.mlp, "ffn_out", i)
            self._hook(block, "residual", i)
        self._hook(model.head, "logits", 0)

    def _hook(self, module, part: str, layer: int, pre: bool = False) -> None:
        def keep(value):
            value = value[0] if isinstance(value, tuple) else value
            self.values[(part, layer)] = _rms(value)

        if pre:
            self.handles.append(module.register_forward_pre_hook(lambda m, args: keep(args)))
        else:
            self.handles.append(module.register_forward_hook(lambda m, args, out: keep(out)))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def random_tokens(seed: int, index: int, batch: int, context: int, vocab: int) -> torch.Tensor:
    """``batch`` sequences of ``context + 1`` uniform tokens from a generator seeded with
    (seed, index): the probe batch is index 0, the batch of step s index s."""
    rng = np.random.default_rng([seed, index])
    return torch.from_numpy(rng.integers(0, vocab, size=(batch, context + 1), dtype=np.int64))


def measure_width(cfg: RunConfig, width: int, steps: int, seed: int) -> np.ndarray:
    """ln RMS of every part (after steps 0 … ``steps``) for one width and seed, shape
    (steps + 1, len(PARTS), n_layers); parts measured once per model fill layer 0 and
    leave NaN elsewhere."""
    model_cfg = width_config(cfg.model, width)
    torch.manual_seed(seed)
    model = Transformer(model_cfg, cfg.scheme, seed=seed)
    optimizer = make_optimizer(model, cfg, torch.device("cpu"))
    recorder = _Recorder(model)
    B, T, V = cfg.train.batch_size, model_cfg.context, model_cfg.vocab_size
    probe = random_tokens(seed, 0, B, T, V)[:, :-1]
    out = np.full((steps + 1, len(PARTS), model_cfg.n_layers), np.nan)
    try:
        for step in range(steps + 1):
            if step:
                chunk = random_tokens(seed, step, B, T, V)
                model.train()
                train_step(
                    model,
                    optimizer,
                    chunk[:, :-1],
                    chunk[:, 1:],
                    lr=cfg.train.lr,
                    clip=cfg.train.grad_clip,
                )
            model.eval()
            with torch.no_grad():
                model(probe)
            for (part, layer), value in recorder.values.items():
                out[step, PARTS.index(part), layer] = math.log(value) if value > 0 else -np.inf
    finally:
        recorder.remove()
    return out


def coord_check(
    cfg: RunConfig, widths=DEFAULT_WIDTHS, *, steps: int = DEFAULT_STEPS, seeds: int = 1
) -> dict[str, Any]:
    """The coordinate check of ``cfg.init`` (module docstring) on the model ``cfg.model``
    rebuilt at every width, trained ``steps`` AdamW steps at the constant rate
    ``cfg.train.lr`` (betas, eps, weight decay and clipping from ``cfg.train``; its
    schedule is not used) on batches of ``cfg.train.batch_size`` random sequences, over
    seeds ``cfg.seed`` … + ``seeds`` − 1 (``cfg.train.threads``: torch threads, 0 leaves
    torch's default).

    Returns a JSON-ready dict: ``init``, ``widths``, ``steps`` (0 … S), ``seeds``, the model
    template, ``records`` (one per part, block, width and step: ``scale`` = RMS, the
    geometric mean over seeds) and ``slopes`` (one per part and block: the measured slope at
    init and at the last step, the γ rule's prediction at init, and their difference)."""
    if not isinstance(steps, int) or steps < 0:
        raise ConfigError(f"steps={steps!r} is not allowed; give an integer >= 0")
    if not isinstance(seeds, int) or seeds < 1:
        raise ConfigError(f"seeds={seeds!r} is not allowed; give an integer >= 1")
    widths = check_widths(widths, cfg.model)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    for w in widths:  # each model is built before anything is measured
        check_training_memory(override(cfg, {"model": width_config(cfg.model, w)}))
    logs = np.stack(
        [
            np.stack([measure_width(cfg, w, steps, cfg.seed + s) for w in widths])
            for s in range(seeds)
        ]
    )  # (seed, width, step, part, layer)
    mean_log = logs.mean(axis=0)
    predicted = predicted_slopes(cfg.model, cfg.scheme, widths)
    records, slopes = [], []
    for p, part in enumerate(PARTS):
        for layer in range(cfg.model.n_layers if part in BLOCK_PARTS else 1):
            for i, w in enumerate(widths):
                for step in range(steps + 1):
                    records.append(
                        {
                            "part": part,
                            "layer": layer,
                            "width": w,
                            "step": step,
                            "scale": math.exp(mean_log[i, step, p, layer]),
                        }
                    )
            at_init = loglog_slope(widths, mean_log[:, 0, p, layer])
            last = loglog_slope(widths, mean_log[:, steps, p, layer])
            pred = predicted[part]
            slopes.append(
                {
                    "part": part,
                    "layer": layer,
                    "slope_init": at_init,
                    "slope_last": last,
                    "predicted_init": pred,
                    "deviation_init": None if pred is None else at_init - pred,
                }
            )
    return {
        "init": cfg.init,
        "widths": widths,
        "steps": list(range(steps + 1)),
        "seeds": [cfg.seed + s for s in range(seeds)],
        "lr": cfg.train.lr,
        "batch_size": cfg.train.batch_size,
        "stat": "rms",
        "model": {
            "n_layers": cfg.model.n_layers,
            "n_heads": cfg.model.n_heads,
            "vocab_size": cfg.model.vocab_size,
            "context": cfg.model.context,
            "ffn_ratio": cfg.model.ffn_dim / cfg.model.d_model,
            "norm": cfg.model.norm,
            "norm_eps": cfg.model.norm_eps,
            "mlp": cfg.model.mlp,
            "positions": cfg.model.positions,
        },
        "records": records,
        "slopes": slopes,
    }
