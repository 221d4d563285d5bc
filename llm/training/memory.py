"""What a transformer run will allocate, estimated from its config before anything is built.

Parameters of a :class:`~smallinit.llm.model.transformer.Transformer` (the modules it builds,
:mod:`smallinit.llm.model.layers`), with d = d_model, a = attn_dim (d unless set),
f = d_ff, V = vocab, L = layers, T = context:

    P = V·d (token table) [+ T·d learned positions] [+ V·d head unless tied]
        + L·(4d·a + 3·d·f (SwiGLU: gate, up, down) or 2·d·f (GELU, ReLU)
             [+ d·a or d·H gate])
        + (2L + 1)·d norm gains (2L·d post-norm, which has no final norm)
        [+ the same again for LayerNorm biases] [+ L·(3a + 2d + f or 2f) linear biases]
        [+ V head bias]: the count of the model as built, parameter for parameter.

Training in fp32 with AdamW holds weights, gradients and the two moments: 16·P bytes
(Loshchilov & Hutter 2019; the usual mixed-precision accounting, Rajbhandari et al. 2020,
"ZeRO", §3, counts 16 bytes per parameter the same way). Activations kept for the backward
pass, per token and layer, are about c₁·d + c₂·f floats: c₁ = 12 (norm inputs and outputs,
q|k|v, rotated q and k, attention output, projection, residuals), c₂ = 4 for SwiGLU (gate|up,
silu, product) or 2 for GELU; the logits add 3·V floats per token (logits, softmax,
gradient). The explicit attention path (``need_weights=True``) also holds B·H·T² scores per
layer. A batch of token ids is B·(T+1) int64s twice (inputs, targets); RoPE tables are
T·head_dim float64 angles and their fp32 cos and sin.

This is an upper-order figure of the large arrays (see :mod:`smallinit.core.memory`), used to
refuse a config that clearly cannot fit before the model is built. It is compared with the
memory of the device the run trains on: for a CUDA device its free memory
(``torch.cuda.mem_get_info``: what this process can still allocate there), for the CPU host
memory.
"""

from __future__ import annotations

import torch

from smallinit.core.memory import check_memory

BYTES_PER_PARAM_TRAINING = 16  # fp32 weight, gradient, AdamW first and second moments
FLOAT = 4
ACT_PER_D = 12  # c₁
ACT_PER_FF = {"swiglu": 4, "gelu": 2, "relu": 2}  # c₂
FF_INPUTS = {"swiglu": 2, "gelu": 1, "relu": 1}  # d → d_ff projections of one FFN (gate, up)
LOGIT_COPIES = 3


def param_count(model) -> int:
    """P of a :class:`~smallinit.llm.run_config.ModelConfig` (module docstring)."""
    d, f, vocab, layers = model.d_model, model.ffn_dim, model.vocab_size, model.n_layers
    embed = vocab * d + (model.context * d if model.positions == "learned" else 0)
    head = 0 if model.tie_embeddings else vocab * d
    mlp = (FF_INPUTS[model.mlp] + 1) * d * f  # the inputs, then one d_ff → d projection
    a = model.attn_width
    gate = 0
    if model.gated_attention:
        gate = d * (a if model.gate_kind == "elementwise" else model.n_heads)
    norms = (2 * layers + (0 if model.norm_position == "post" else 1)) * d
    norms *= 2 if model.norm == "layernorm" and model.layernorm_bias else 1
    biases = layers * (3 * a + 2 * d + FF_INPUTS[model.mlp] * f) if model.bias else 0
    head_bias = vocab if model.head_bias else 0
    return embed + head + layers * (4 * d * a + mlp + gate) + norms + biases + head_bias


def rope_bytes(model) -> int:
    """RoPE tables: float64 angles, fp32 cos and sin, each context × head_dim."""
    return model.context * model.head_dim * (8 + 2 * FLOAT) if model.positions == "rope" else 0


def model_bytes(model) -> int:
    """fp32 weights of the model, plus its RoPE tables."""
    return FLOAT * param_count(model) + rope_bytes(model)


def training_bytes(model, batch_size: int, *, explicit_attention: bool = False) -> int:
    """Bytes a training step of ``batch_size`` sequences holds at once (module docstring)."""
    tokens = batch_size * model.context
    per_token = (
        ACT_PER_D * model.d_model + ACT_PER_FF[model.mlp] * model.ffn_dim
    ) * model.n_layers + LOGIT_COPIES * model.vocab_size
    activations = FLOAT * tokens * per_token
    if explicit_attention:
        activations += FLOAT * batch_size * model.n_heads * model.context**2 * model.n_layers
    batch = 2 * 8 * batch_size * (model.context + 1)
    return BYTES_PER_PARAM_TRAINING * param_count(model) + rope_bytes(model) + activations + batch


def describe(model, batch_size: int | None = None) -> str:
    """The sizes an estimate depends on, as ``model.d_model=…, …`` for an error message."""
    bits = [
        f"model.{name}={getattr(model, name)}"
        for name in ("d_model", "n_layers", "n_heads", "context", "vocab_size")
    ]
    bits.insert(1, f"model.d_ff={model.ffn_dim}")
    if batch_size is not None:
        bits.append(f"train.batch_size={batch_size}")
    return ", ".join(bits)


def device_memory(device: torch.device | str | None) -> tuple[int | None, str]:
    """(bytes available, name of the pool) where a run on ``device`` holds its tensors: a
    CUDA device's free memory (``torch.cuda.mem_get_info``; its total memory when that
    cannot be read), else host memory (None: :func:`smallinit.core.memory.available_bytes`)."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type != "cuda":
        return None, "host memory"
    index = device.index if device.index is not None else torch.cuda.current_device()
    name = torch.cuda.get_device_name(index)
    try:
        free, _total = torch.cuda.mem_get_info(index)
    except RuntimeError:
        free = torch.cuda.get_device_properties(index).total_memory
    return int(free), f"GPU memory ({name})"


def check_training_memory(
    cfg,
    *,
    explicit_attention: bool = False,
    device: torch.device | str | None = None,
    available: int | None = None,
    pool: str | None = None,
) -> None:
    """Refuse (:class:`~smallinit.core.errors.ConfigError`) a run whose training step cannot fit
    the memory limit of the device it trains on (``device``: module docstring; None: the
    host); ``cfg`` has ``model`` (a ModelConfig) and ``train.batch_size``. ``available`` and
    ``pool`` name another pool instead (a plan's GPU on a machine without one)."""
    estimate = training_bytes(
        cfg.model, cfg.train.batch_size, explicit_attention=explicit_attention
    )
    if available is None:
        available, where = device_memory(device)
    else:
        where = pool or "memory"
    check_memory(
        estimate,
        f"training with {describe(cfg.model, cfg.train.batch_size)} "
        f"({param_count(cfg.model):.3g} parameters: weights, gradients, AdamW state "
        "and activations)",
        available=available,
        pool=where,
    )


def check_model_memory(model, what: str) -> None:
    """Refuse building the fp32 model of ``model`` (a ModelConfig) when it cannot fit."""
    check_memory(
        model_bytes(model), f"{what} with {describe(model)} ({param_count(model):.3g} parameters)"
    )
