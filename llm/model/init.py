"""Apply an init scheme to a transformer: this package's model or a Hugging Face one.

Every weight matrix is drawn from N(0, σ²) with σ from
:func:`smallinit.theory.init_rules.matrix_std` (the single source of σ; docs/science.md §1),
truncated at ±kσ when :func:`~smallinit.theory.init_rules.truncation` says so; norm gains are set
to 1 and biases to 0. What a matrix *is* — its part, role, true fan-in d_in, fan-out d_out,
block index and whether it writes into the residual stream — is one
:class:`~smallinit.llm.model.matrices.MatrixSpec` per matrix (:func:`matrix_table`):

* this package's :class:`~smallinit.llm.model.transformer.Transformer` declares its own as its
  modules build them (fused Q|K|V rows and fused SwiGLU gate|up rows are separate matrices,
  each with its own part and d_out); this module does not know the model class;
* Hugging Face models are read here by module name: GPT-2 (``Conv1D`` weights are stored
  (in, out): d_in is the row count, and ``c_attn`` holds Q|K|V as column blocks);
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
from typing import Any

import torch
from torch import nn

from smallinit.errors import ConfigError
from smallinit.llm.model.matrices import (
    ALL,
    MatrixSpec,
    cols,
    declared_matrices,
    has_declarations,
)
from smallinit.theory.init_rules import (
    InitScheme,
    effective_gamma,
    matrix_std,
    parse_scheme,
    truncation,
)

# ----------------------------------------------------------------------------- Hugging Face
_LAYER = re.compile(r"\.(?:h|layers)\.(\d+)\.")

_LLAMA_PARTS = {  # module name → (part, kind, residual_out); nn.Linear weights are (out, in)
    "q_proj": ("qk", "attn.q", False), "k_proj": ("qk", "attn.k", False),
    "v_proj": ("vo", "attn.v", False), "o_proj": ("vo", "attn.o", True),
    "gate_proj": ("mlp", "mlp.gate", False), "up_proj": ("mlp", "mlp.up", False),
    "down_proj": ("mlp_out", "mlp.down", True), "lm_head": ("head", "head", False),
}
_EMBEDDINGS = {"wte": "embedding", "embed_tokens": "embedding", "wpe": "positions",
               "embed_positions": "positions"}


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
        if module in _EMBEDDINGS:
            specs.append(MatrixSpec(name, param, ALL, "embedding", d, param.shape[0], 0, False,
                                    _EMBEDDINGS[module]))
        elif module == "c_attn":  # GPT-2 Conv1D (in, out) = (d, 3d): columns q | k | v
            for j, (tag, part) in enumerate((("q", "qk"), ("k", "qk"), ("v", "vo"))):
                specs.append(MatrixSpec(f"{name}[{tag}]", param, cols(j * d, (j + 1) * d),
                                        part, d, d, layer, False, f"attn.{tag}", in_out=True))
        elif module in ("c_proj", "c_fc"):  # GPT-2 Conv1D (in, out)
            d_in, d_out = param.shape
            if ".attn." in name:
                part, kind, residual = "vo", "attn.o", True
            elif module == "c_fc":
                part, kind, residual = "mlp", "mlp.up", False
            else:
                part, kind, residual = "mlp_out", "mlp.down", True
            specs.append(MatrixSpec(name, param, ALL, part, d_in, d_out, layer, residual, kind,
                                    in_out=True))
        elif module in _LLAMA_PARTS:
            part, kind, residual = _LLAMA_PARTS[module]
            d_out, d_in = param.shape
            if part in ("head", "embedding"):
                d_in, d_out = d, param.shape[0]
            specs.append(MatrixSpec(name, param, ALL, part, d_in, d_out, layer, residual, kind))
        else:
            raise ConfigError(
                f"parameter {name} {tuple(param.shape)} of {type(model).__name__} has no known "
                "init part; supported: this package's Transformer, GPT-2 and Llama-family models"
            )
    return specs


def _n_layers(model: nn.Module) -> int:
    if hasattr(model, "cfg"):
        return model.cfg.n_layers
    config = model.config
    return getattr(config, "num_hidden_layers", None) or config.n_layer


def matrix_table(model: nn.Module) -> list[MatrixSpec]:
    """Every weight matrix of ``model`` with its part, role, fan-in, fan-out and layer: the
    model's own declarations when it has them, else the Hugging Face reader."""
    if not isinstance(model, nn.Module):
        raise ConfigError(f"apply_init needs a torch.nn.Module, got {type(model).__name__}; "
                          "supported: smallinit.llm Transformer, Hugging Face GPT-2 and Llama")
    if has_declarations(model):
        return declared_matrices(model)
    if hasattr(model, "config") and hasattr(model.config, "hidden_size"):
        return _hf_specs(model)
    raise ConfigError(f"apply_init does not know how to read {type(model).__name__}; "
                      "supported: smallinit.llm Transformer, Hugging Face GPT-2 and Llama")


# ----------------------------------------------------------------------------- drawing


def as_scheme(scheme: InitScheme | str) -> InitScheme:
    """An :class:`InitScheme` from itself or its text; anything else is a ConfigError."""
    if isinstance(scheme, InitScheme):
        return scheme
    if not isinstance(scheme, str):
        raise ConfigError(f"init scheme {scheme!r} ({type(scheme).__name__}) is not allowed; "
                          "give a string such as 'gamma:0.5', 'nanogpt', 'fixed:0.02' or an "
                          "InitScheme")
    try:
        return parse_scheme(scheme)
    except ValueError as err:  # theory's message names the scheme and what is allowed
        raise ConfigError(str(err)) from None


def spec_std(spec: MatrixSpec, scheme: InitScheme, n_layers: int) -> float:
    """σ of one matrix under ``scheme``, from theory's ``matrix_std`` (which also refuses a σ
    no draw can use: zero, subnormal, infinite or absurdly large); its ValueError becomes a
    ConfigError naming the matrix."""
    try:
        return float(matrix_std(scheme, spec.part, spec.d_in, spec.d_out, n_layers=n_layers,
                                layer=spec.layer, residual_out=spec.residual_out))
    except (ValueError, OverflowError) as err:
        raise ConfigError(f"matrix {spec.name}: {err}") from None


def apply_init(model: nn.Module, scheme: InitScheme | str, *, seed: int = 0) -> nn.Module:
    """Re-initialize ``model`` in place by ``scheme`` (an :class:`InitScheme` or a string
    such as ``"gamma:1.0"``) and return it. Draws come from one CPU generator seeded with
    ``seed``, in parameter order, so the result is the same on every device."""
    scheme = as_scheme(scheme)
    specs = matrix_table(model)
    n_layers = _n_layers(model)
    sigmas = [spec_std(spec, scheme, n_layers) for spec in specs]  # all checked before a draw
    k = truncation(scheme)
    gen = torch.Generator().manual_seed(seed)
    covered = {id(s.param) for s in specs}
    with torch.no_grad():
        for spec, sigma in zip(specs, sigmas, strict=True):
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
                raise ConfigError(f"parameter {name} {tuple(param.shape)} has no init rule")
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
    specs = matrix_table(model)
    n_layers = _n_layers(model)
    rows = []
    for spec in specs:
        sigma = spec_std(spec, scheme, n_layers)
        rows.append({
            "name": spec.name, "kind": spec.kind, "part": spec.part, "shape": list(spec.shape),
            "d_in": spec.d_in, "d_out": spec.d_out, "layer": spec.layer,
            "residual_out": spec.residual_out, "std": sigma,
            "gamma_eff": effective_gamma(sigma, spec.d_in),
        })
    return rows
