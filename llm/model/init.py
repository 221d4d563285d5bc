"""Apply an init scheme to a transformer: this package's model or a Hugging Face one.

Every weight matrix is drawn from N(0, σ²) with σ from
:func:`smallinit.theory.init_rules.matrix_std` (the single source of σ; SPEC §1), truncated
at ±kσ when :func:`~smallinit.theory.init_rules.truncation` says so; norm gains are set to 1
and biases to 0. What a matrix *is* — its part, true fan-in d_in, fan-out d_out, block
index and whether it writes into the residual stream — is read off the model here:

* this package's :class:`~smallinit.llm.model.transformer.Transformer` (fused Q|K|V rows and fused
  SwiGLU gate|up rows are separate matrices, each with its own part and d_out);
* Hugging Face GPT-2 (``Conv1D`` weights are stored (in, out): d_in is the row count, and
  ``c_attn`` holds Q|K|V as column blocks);
* Hugging Face Llama-family models (``q_proj``/``k_proj``/``v_proj``/``o_proj``,
  ``gate_proj``/``up_proj``/``down_proj``; also Mistral, Qwen2 and others with these names).

A tied LM head shares the embedding table and is drawn once, as ``embedding``.

Three lines for a Hugging Face model::

    from transformers import LlamaConfig, LlamaForCausalLM
    from smallinit.llm import apply_init
    model = apply_init(LlamaForCausalLM(LlamaConfig(...)), "gamma:1.0")
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from smallinit.theory.init_rules import (
    InitScheme,
    effective_gamma,
    matrix_std,
    parse_scheme,
    truncation,
)


@dataclass(frozen=True)
class MatrixSpec:
    """One weight matrix: ``param[index]`` is the block drawn with one σ."""

    name: str  # parameter name, plus the block for fused parameters (e.g. "…qkv.weight[q]")
    param: nn.Parameter
    index: tuple[slice, ...]
    part: str
    d_in: int
    d_out: int
    layer: int
    residual_out: bool

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.param[self.index].shape)


def _rows(start: int, stop: int) -> tuple[slice, ...]:
    return (slice(start, stop), slice(None))


def _cols(start: int, stop: int) -> tuple[slice, ...]:
    return (slice(None), slice(start, stop))


ALL = (slice(None), slice(None))


# ----------------------------------------------------------------------------- our model
def _own_specs(model: nn.Module) -> list[MatrixSpec]:
    cfg = model.cfg
    d, ff = cfg.d_model, cfg.ffn_dim
    specs = [MatrixSpec("tok_emb.weight", model.tok_emb.weight, ALL, "embedding", d,
                        cfg.vocab_size, 0, False)]
    if model.pos_emb is not None:
        specs.append(MatrixSpec("pos_emb.weight", model.pos_emb.weight, ALL, "embedding", d,
                                cfg.context, 0, False))
    for i, block in enumerate(model.blocks):
        p = f"blocks.{i}."
        w = block.attn.qkv.weight  # nn.Linear: (out, in) = (3d, d)
        for j, (tag, part) in enumerate((("q", "qk"), ("k", "qk"), ("v", "vo"))):
            specs.append(MatrixSpec(f"{p}attn.qkv.weight[{tag}]", w, _rows(j * d, (j + 1) * d),
                                    part, d, d, i, False))
        specs.append(MatrixSpec(f"{p}attn.proj.weight", block.attn.proj.weight, ALL, "vo",
                                d, d, i, True))
        if block.attn.gate is not None:
            g = block.attn.gate.weight
            specs.append(MatrixSpec(f"{p}attn.gate.weight", g, ALL, "attn_gate", d,
                                    g.shape[0], i, False))
        up = block.mlp.up.weight
        if block.mlp.swiglu:
            specs.append(MatrixSpec(f"{p}mlp.up.weight[gate]", up, _rows(0, ff), "mlp", d, ff,
                                    i, False))
            specs.append(MatrixSpec(f"{p}mlp.up.weight[up]", up, _rows(ff, 2 * ff), "mlp", d,
                                    ff, i, False))
        else:
            specs.append(MatrixSpec(f"{p}mlp.up.weight", up, ALL, "mlp", d, ff, i, False))
        specs.append(MatrixSpec(f"{p}mlp.down.weight", block.mlp.down.weight, ALL, "mlp_out",
                                ff, d, i, True))
    if not cfg.tie_embeddings:
        specs.append(MatrixSpec("head.weight", model.head.weight, ALL, "head", d,
                                cfg.vocab_size, 0, False))
    return specs


# ----------------------------------------------------------------------------- Hugging Face
_LAYER = re.compile(r"\.(?:h|layers)\.(\d+)\.")

_LLAMA_PARTS = {  # module name → (part, residual_out); nn.Linear weights are (out, in)
    "q_proj": ("qk", False), "k_proj": ("qk", False), "v_proj": ("vo", False),
    "o_proj": ("vo", True), "gate_proj": ("mlp", False), "up_proj": ("mlp", False),
    "down_proj": ("mlp_out", True), "lm_head": ("head", False),
    "embed_tokens": ("embedding", False),
}


def _hf_specs(model: nn.Module) -> list[MatrixSpec]:
    config = model.config
    d = config.hidden_size
    specs: list[MatrixSpec] = []
    seen: set[int] = set()
    for name, param in model.named_parameters():  # tied parameters are listed once
        if param.dim() < 2:
            continue
        if id(param) in seen:
            continue
        seen.add(id(param))
        module = name.rsplit(".", 1)[0].rsplit(".", 1)[-1]
        match = _LAYER.search(name)
        layer = int(match.group(1)) if match else 0
        if module in ("wte", "wpe", "embed_tokens", "embed_positions"):
            specs.append(MatrixSpec(name, param, ALL, "embedding", d, param.shape[0], 0, False))
        elif module == "c_attn":  # GPT-2 Conv1D (in, out) = (d, 3d): columns q | k | v
            for j, (tag, part) in enumerate((("q", "qk"), ("k", "qk"), ("v", "vo"))):
                specs.append(MatrixSpec(f"{name}[{tag}]", param, _cols(j * d, (j + 1) * d),
                                        part, d, d, layer, False))
        elif module in ("c_proj", "c_fc"):  # GPT-2 Conv1D (in, out)
            d_in, d_out = param.shape
            if ".attn." in name:
                part, residual = "vo", True
            elif module == "c_fc":
                part, residual = "mlp", False
            else:
                part, residual = "mlp_out", True
            specs.append(MatrixSpec(name, param, ALL, part, d_in, d_out, layer, residual))
        elif module in _LLAMA_PARTS:
            part, residual = _LLAMA_PARTS[module]
            d_out, d_in = param.shape
            if part in ("head", "embedding"):
                d_in, d_out = d, param.shape[0]
            specs.append(MatrixSpec(name, param, ALL, part, d_in, d_out, layer, residual))
        else:
            raise ValueError(
                f"parameter {name} {tuple(param.shape)} of {type(model).__name__} has no known "
                "init part; supported: this package's Transformer, GPT-2 and Llama-family models"
            )
    return specs


def _n_layers(model: nn.Module) -> int:
    if hasattr(model, "cfg"):
        return model.cfg.n_layers
    config = model.config
    return getattr(config, "num_hidden_layers", None) or config.n_layer


def matrix_specs(model: nn.Module) -> list[MatrixSpec]:
    """Every weight matrix of ``model`` with its part, fan-in, fan-out and layer."""
    from smallinit.llm.model.transformer import Transformer

    if isinstance(model, Transformer):
        return _own_specs(model)
    if hasattr(model, "config") and hasattr(model.config, "hidden_size"):
        return _hf_specs(model)
    raise ValueError(f"apply_init does not know how to read {type(model).__name__}; "
                     "supported: smallinit.llm Transformer, Hugging Face GPT-2 and Llama")


# ----------------------------------------------------------------------------- drawing
def as_scheme(scheme: InitScheme | str) -> InitScheme:
    return parse_scheme(scheme) if isinstance(scheme, str) else scheme


def spec_std(spec: MatrixSpec, scheme: InitScheme, n_layers: int) -> float:
    """σ of one matrix under ``scheme`` (through theory's ``matrix_std``)."""
    return matrix_std(scheme, spec.part, spec.d_in, spec.d_out, n_layers=n_layers,
                      layer=spec.layer, residual_out=spec.residual_out)


def apply_init(model: nn.Module, scheme: InitScheme | str, *, seed: int = 0) -> nn.Module:
    """Re-initialize ``model`` in place by ``scheme`` (an :class:`InitScheme` or a string
    such as ``"gamma:1.0"``) and return it. Draws come from one CPU generator seeded with
    ``seed``, in parameter order, so the result is the same on every device."""
    scheme = as_scheme(scheme)
    specs = matrix_specs(model)
    n_layers = _n_layers(model)
    k = truncation(scheme)
    gen = torch.Generator().manual_seed(seed)
    covered = {id(s.param) for s in specs}
    with torch.no_grad():
        for spec in specs:
            sigma = spec_std(spec, scheme, n_layers)
            target = spec.param[spec.index]
            draw = torch.empty(target.shape, dtype=torch.float32)
            if k is None:
                draw.normal_(0.0, sigma, generator=gen)
            else:
                nn.init.trunc_normal_(draw, 0.0, sigma, -k * sigma, k * sigma, generator=gen)
            target.copy_(draw.to(target.dtype))
        for name, param in model.named_parameters():
            if id(param) in covered:
                continue
            if param.dim() != 1:
                raise ValueError(f"parameter {name} {tuple(param.shape)} has no init rule")
            is_bias = name.endswith("bias")
            param.fill_(0.0 if is_bias else 1.0)
    return model


def truncated_std_factor(k: float | None) -> float:
    """Std of N(0,1) truncated at ±k relative to 1: √(1 − 2kφ(k)/(2Φ(k) − 1))."""
    if k is None:
        return 1.0
    phi = math.exp(-k * k / 2) / math.sqrt(2 * math.pi)
    mass = math.erf(k / math.sqrt(2))
    return math.sqrt(1 - 2 * k * phi / mass)


def init_table(model: nn.Module, scheme: InitScheme | str) -> list[dict[str, Any]]:
    """One row per matrix: name, part, shape, d_in, d_out, layer, σ and γ_eff."""
    scheme = as_scheme(scheme)
    specs = matrix_specs(model)
    n_layers = _n_layers(model)
    rows = []
    for spec in specs:
        sigma = spec_std(spec, scheme, n_layers)
        rows.append({
            "name": spec.name, "part": spec.part, "shape": list(spec.shape),
            "d_in": spec.d_in, "d_out": spec.d_out, "layer": spec.layer,
            "residual_out": spec.residual_out, "std": sigma,
            "gamma_eff": effective_gamma(sigma, spec.d_in),
        })
    return rows
