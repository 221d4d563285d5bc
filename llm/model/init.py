"""Apply an init scheme to a transformer: this package's model, a Hugging Face one, or any
model whose family is registered.

Every weight matrix is drawn from N(0, σ²) with σ from
:func:`smallinit.theory.init_rules.matrix_std` (the single source of σ; docs/science.md §1),
truncated at ±kσ when :func:`~smallinit.theory.init_rules.truncation` says so; norm gains are
set to 1 and biases to 0. What a matrix *is* — its part, role, true fan-in d_in, fan-out
d_out, block index and whether it writes into the residual stream — is one
:class:`~smallinit.llm.model.matrices.MatrixSpec` per matrix (:func:`matrix_table`):

* this package's :class:`~smallinit.llm.model.transformer.Transformer` declares its own as its
  modules build them (fused Q|K|V rows and fused SwiGLU gate|up rows are separate matrices,
  each with its own part and d_out); this module does not know the model class;
* any other model is read by its family (:mod:`.families`): GPT-2 (``Conv1D`` weights are
  stored (in, out), ``c_attn`` holds Q|K|V as column blocks), Llama-named models
  (``q_proj`` … ``down_proj``: Llama, Mistral, Qwen2 and others), GPT-NeoX
  (``query_key_value`` interleaves Q, K, V per head) and Phi are built in, and
  :func:`~.families.register_family` adds more (OPT, ...).

One-dimensional parameters are set only when their meaning is known (a Gemma norm computing
x·(1+w) is refused unless its family says ``offset_gain``). A tied LM head shares the
embedding table and is drawn once, as ``embedding``. Draws come from torch's global
generator unless ``seed`` is given, and the scheme is recorded on the model.

Three lines for a Hugging Face model::

    from transformers import LlamaConfig, LlamaForCausalLM
    from smallinit.llm import apply_init
    model = apply_init(LlamaForCausalLM(LlamaConfig(...)), "gamma:1.0")
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from smallinit.core.errors import ConfigError, SmallinitWarning
from smallinit.llm.model.families import (
    VECTOR_VALUES,
    families,
    family_of,
    vector_meaning,
)
from smallinit.llm.model.matrices import MatrixSpec, declared_matrices, has_declarations
from smallinit.theory.init_rules import (
    PARTS,
    InitScheme,
    effective_gamma,
    matrix_std,
    number_text,
    parse_scheme,
    sigma_part,
    truncation,
)


# ----------------------------------------------------------------------------- reading a model
def unwrap(model: Any) -> nn.Module:
    """The model inside its wrappers: ``torch.compile``'s ``OptimizedModule`` (``_orig_mod``)
    and data-parallel wrappers that hold it as ``.module`` (DDP, ``nn.DataParallel``, FSDP1)
    — a module whose one child is ``.module`` and that has no parameter of its own. They
    share the wrapped model's parameters, so initializing the inner model initializes both."""
    seen = set()
    while isinstance(model, nn.Module) and id(model) not in seen:
        seen.add(id(model))
        inner = getattr(model, "_orig_mod", None)
        if isinstance(inner, nn.Module):
            model = inner
            continue
        inner = model._modules.get("module")
        if (
            isinstance(inner, nn.Module)
            and len(model._modules) == 1
            and not any(True for _ in model.named_parameters(recurse=False))
        ):
            model = inner
            continue
        break
    return model


def _n_layers(model: nn.Module, specs: list[MatrixSpec]) -> int:
    """The depth L of the depth-scaled schemes: our config's, a Hugging Face config's, else
    one more than the largest block index of the table."""
    if hasattr(model, "cfg") and hasattr(model.cfg, "n_layers"):
        return model.cfg.n_layers
    config = getattr(model, "config", None)
    for attr in ("num_hidden_layers", "n_layer", "num_layers"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return 1 + max((s.layer for s in specs), default=0)


def matrix_table(model: nn.Module) -> list[MatrixSpec]:
    """Every weight matrix of ``model`` (wrappers removed, :func:`unwrap`) with its part,
    role, fan-in, fan-out and layer: the model's own declarations when it has them, else
    those of its family (:mod:`.families`)."""
    model = _checked_module(model)
    if has_declarations(model):
        return declared_matrices(model)
    return family_of(model).matrix_table(model)


def _checked_module(model: Any) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise ConfigError(
            f"apply_init needs a torch.nn.Module, got {type(model).__name__}; "
            "supported: smallinit.llm Transformer and the model families "
            f"{', '.join(families())}"
        )
    return unwrap(model)


def vector_values(
    model: nn.Module, specs: list[MatrixSpec]
) -> list[tuple[str, nn.Parameter, float]]:
    """(name, parameter, value) of every parameter that is not a matrix of ``specs``: norm
    gains 1, biases 0, offset gains (x·(1+w)) 0. A parameter whose meaning neither the model's
    family nor its module states is a ConfigError naming it (nothing is guessed)."""
    covered = {id(s.param) for s in specs}
    family = None if has_declarations(model) else family_of(model)
    out = []
    for name, param in model.named_parameters():
        if id(param) in covered:
            continue
        if param.dim() != 1:
            raise ConfigError(
                f"parameter {name} {tuple(param.shape)} of "
                f"{type(model).__name__} has no init rule (not a declared "
                "matrix, not a gain or bias)"
            )
        meaning = vector_meaning(model, name, family)
        out.append((name, param, VECTOR_VALUES[meaning]))
    return out


class UnusedOverrideWarning(SmallinitWarning):
    """A per-part override of the γ rule that acts on no matrix of the model, because the
    model has no matrix of that part (``attn_gate=`` without gated attention, ``head=`` on a
    model without an LM head): it is not applied, and the scheme recorded leaves it out."""


def check_storage(model: nn.Module) -> None:
    """Refuse a model :func:`apply_init` could only record an init on, not draw one into
    (ConfigError naming a parameter): a parameter on the ``meta`` device (a shape without
    storage), or one with no elements (its storage partitioned away or never allocated)."""
    storage_less = (
        (
            lambda p: p.is_meta,
            "is on the meta device (a shape without storage)",
            "materialize the model first, e.g. model.to_empty(device='cpu'), then apply_init",
        ),
        (
            lambda p: p.numel() == 0,
            "holds no elements (a partitioned or unallocated parameter, as under DeepSpeed ZeRO-3)",
            "apply_init before partitioning, or on the gathered parameters",
        ),
    )
    for test, what, advice in storage_less:
        found = [name for name, param in model.named_parameters() if test(param)]
        if found:
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            raise ConfigError(
                f"parameter {found[0]}{more} of {type(model).__name__} {what}, "
                f"so no init can be drawn into it; {advice}"
            )


def check_head(model: nn.Module, specs: list[MatrixSpec], scheme: InitScheme) -> None:
    """Refuse a ``head=`` override on a head tied to the embedding (ConfigError): one
    matrix, drawn once as ``embedding``, of which the override and the embedding's γ ask two
    σ. A ``head=`` on a model with no head at all acts on nothing, which
    :func:`applied_scheme` warns of."""
    head = dict(scheme.overrides).get("head")
    if head is None or any(s.part == "head" for s in specs):
        return
    names: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    tied = [
        (s.name, names[id(s.param)][1:])
        for s in specs
        if s.part == "embedding" and len(names.get(id(s.param), ())) > 1
    ]
    if tied:
        embedding, (alias, *_) = tied[0]
        raise ConfigError(
            f"init {scheme.describe()!r} sets the head's γ (head={head:g}), but "
            f"the LM head of {type(model).__name__} ({alias}) is tied to the "
            f"embedding {embedding}: one matrix, drawn once as the embedding; "
            "drop head= or untie the head (model.tie_embeddings=false, "
            "tie_word_embeddings=False in a Hugging Face config)"
        )


def idle_parts(specs: list[MatrixSpec], scheme: InitScheme) -> list[str]:
    """The parts of ``scheme``'s overrides that no matrix of ``specs`` takes its γ from (a
    matrix takes its part's, and a query or key matrix its ``q``/``k``'s)."""
    used = {s.part for s in specs} | {sigma_part(s.part, s.kind) for s in specs}
    return [part for part, _ in scheme.overrides if part not in used]


def applied_scheme(
    model: nn.Module, specs: list[MatrixSpec], scheme: InitScheme, *, stacklevel: int = 2
) -> InitScheme:
    """``scheme`` without the overrides that act on no matrix of ``model``
    (:func:`idle_parts`), each named in an :class:`UnusedOverrideWarning`: what was
    applied, and so what is recorded. The σ of every matrix is the same under both."""
    unused = idle_parts(specs, scheme)
    if not unused:
        return scheme
    applied = scheme.without(unused)
    given = dict(scheme.overrides)
    parts = sorted({s.part for s in specs}, key=PARTS.index)
    for part in unused:
        warnings.warn(
            UnusedOverrideWarning(
                f"init {scheme.describe()!r}: override {part}={number_text(given[part])} acts on "
                f"no matrix of {type(model).__name__}, which has no {part} matrix (its parts: "
                f"{', '.join(parts)}); it is not applied: the scheme applied is "
                f"{applied.describe()!r}"
            ),
            stacklevel=stacklevel + 1,
        )
    return applied


# ----------------------------------------------------------------------------- drawing
def as_scheme(scheme: InitScheme | str) -> InitScheme:
    """An :class:`InitScheme` from itself or its text; anything else is a ConfigError."""
    if isinstance(scheme, InitScheme):
        return scheme
    if not isinstance(scheme, str):
        raise ConfigError(
            f"init scheme {scheme!r} ({type(scheme).__name__}) is not allowed; "
            "give a string such as 'gamma:0.5', 'nanogpt', 'fixed:0.02' or an "
            "InitScheme"
        )
    try:
        return parse_scheme(scheme)
    except ValueError as err:  # theory's message names the scheme and what is allowed
        raise ConfigError(str(err)) from None


def spec_std(spec: MatrixSpec, scheme: InitScheme, n_layers: int) -> float:
    """σ of one matrix under ``scheme``, from theory's ``matrix_std`` (which also refuses a σ
    no draw can use: zero, subnormal, infinite or absurdly large); its ValueError becomes a
    ConfigError naming the matrix."""
    try:
        return float(
            matrix_std(
                scheme,
                sigma_part(spec.part, spec.kind),
                spec.d_in,
                spec.d_out,
                n_layers=n_layers,
                layer=spec.layer,
                residual_out=spec.residual_out,
            )
        )
    except (ValueError, OverflowError) as err:
        raise ConfigError(f"matrix {spec.name}: {err}") from None


#: the one record of how a model was initialized: a dict ``{"init": <canonical scheme>, ...}``
#: under this name, on ``model.config`` for a Hugging Face model (so ``config.json`` saves it
#: and ``from_pretrained`` reads it back), else on the model itself. :func:`apply_init`
#: writes ``{"init": ...}`` (and ``"seed"`` when given one); ``smallinit llm export`` writes
#: the same record with the run's ``"run"`` and ``"seed"`` (:func:`init_record`).
RECORD_ATTR = "smallinit"
#: the record's former name (a bare scheme string), still read by :func:`recorded_scheme`
LEGACY_RECORD_ATTR = "smallinit_init"


def init_record(scheme: InitScheme | str, **extra: Any) -> dict[str, Any]:
    """The record :func:`apply_init` and the export store: ``{"init": canonical, **extra}``
    (``extra`` entries that are None left out)."""
    return {
        "init": as_scheme(scheme).describe(),
        **{k: v for k, v in extra.items() if v is not None},
    }


def record_holder(model: nn.Module) -> Any:
    """Where the record lives: a Hugging Face model's ``config``, else the model."""
    inner = unwrap(model)
    config = getattr(inner, "config", None)
    return config if config is not None and not has_declarations(inner) else inner


def apply_init(model: nn.Module, scheme: InitScheme | str, *, seed: int | None = None) -> nn.Module:
    """Re-initialize ``model`` in place by ``scheme`` (an :class:`InitScheme` or a string
    such as ``"gamma:1.0"``) and return it.

    Matrices are drawn in parameter order on the CPU (so the result is the same on every
    device): from torch's global CPU generator by default, so ``torch.manual_seed(s)``
    before the call decides the weights as it does for any torch init; with ``seed`` from
    a fresh generator seeded with it, which leaves the global generator untouched. Norm gains
    are set to 1, biases to 0, x·(1+w) gains to 0; a parameter whose meaning is not known is
    refused before anything is drawn (:mod:`.families`). ``torch.compile`` and
    data-parallel wrappers are looked through (:func:`unwrap`). A model on the meta device
    or with empty parameters, and a ``head=`` override on a head tied to the embedding, are
    refused before anything is drawn or recorded (:func:`check_storage`, :func:`check_head`);
    an override of a part the model has no matrix of is an :class:`UnusedOverrideWarning`
    and is left out of the record (:func:`applied_scheme`). The scheme applied is recorded as
    ``model.config.smallinit = {"init": "<canonical scheme>"}`` (Hugging Face; saved with
    ``config.json``) or ``model.smallinit`` (:data:`RECORD_ATTR`, :func:`recorded_scheme`)."""
    scheme = as_scheme(scheme)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigError(
            f"seed={seed!r} is not allowed; give an integer or None (torch's global generator)"
        )
    inner = _checked_module(model)
    check_storage(inner)
    specs = matrix_table(inner)
    check_head(inner, specs, scheme)
    n_layers = _n_layers(inner, specs)
    sigmas = [spec_std(spec, scheme, n_layers) for spec in specs]  # all checked before a draw
    vectors = vector_values(inner, specs)  # every other parameter's value, also checked first
    applied = applied_scheme(inner, specs, scheme)  # warns of each override left out
    k = truncation(scheme)
    gen = None if seed is None else torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for spec, sigma in zip(specs, sigmas, strict=True):
            draw = torch.empty(spec.shape, dtype=torch.float32, device="cpu")
            if k is None:
                draw.normal_(0.0, sigma, generator=gen)
            else:
                nn.init.trunc_normal_(draw, 0.0, sigma, -k * sigma, k * sigma, generator=gen)
            spec.assign(draw.to(spec.param.device))
        for _, param, value in vectors:
            param.fill_(value)
    holder = record_holder(inner)
    setattr(holder, RECORD_ATTR, init_record(applied, seed=seed))
    if hasattr(holder, LEGACY_RECORD_ATTR):  # one record: the old name goes
        delattr(holder, LEGACY_RECORD_ATTR)
    return model


def recorded_scheme(model: nn.Module) -> str | None:
    """The canonical scheme recorded on ``model`` (None if none): by :func:`apply_init`, or
    by ``smallinit llm export`` in the folder's ``config.json`` (read back by
    ``from_pretrained``); also the bare string of the record's former name."""
    inner = unwrap(model)
    for holder in (getattr(inner, "config", None), inner):
        if holder is None:
            continue
        record = getattr(holder, RECORD_ATTR, None)
        if isinstance(record, dict) and isinstance(record.get("init"), str):
            return record["init"]
        legacy = getattr(holder, LEGACY_RECORD_ATTR, None)
        if isinstance(legacy, str):
            return legacy
    return None


def init_table(model: nn.Module, scheme: InitScheme | str) -> list[dict[str, Any]]:
    """One row per matrix: name, part, shape, d_in, d_out, layer, whether it writes into the
    residual stream, the layout a fused parameter was split by (``blocks``, ``per_head``,
    ``grouped``; empty for a whole parameter), σ and γ_eff: a description, which refuses
    nothing that :func:`apply_init` would (``smallinit llm init-table`` does)."""
    scheme = as_scheme(scheme)
    specs = matrix_table(model)
    n_layers = _n_layers(unwrap(model), specs)
    rows = []
    for spec in specs:
        sigma = spec_std(spec, scheme, n_layers)
        rows.append(
            {
                "name": spec.name,
                "kind": spec.kind,
                "part": spec.part,
                "shape": list(spec.shape),
                "d_in": spec.d_in,
                "d_out": spec.d_out,
                "layer": spec.layer,
                "residual_out": spec.residual_out,
                "layout": spec.layout,
                "std": sigma,
                "gamma_eff": effective_gamma(sigma, spec.d_in),
            }
        )
    return rows
