"""Model families: how a model that does not declare its matrices maps onto the γ rule's table.

A model that is not this package's :class:`~smallinit.llm.model.transformer.Transformer`
(whose modules declare their matrices, :mod:`.matrices`) is read by a *family*: a name, a
test that recognises the model, and a declarative mapping from parameter-name patterns to
matrix roles. A role is one of theory's kinds (docs/science.md §1;
:func:`smallinit.theory.transformer.matrix_kinds`: ``embedding``, ``positions``,
``attn.q``, ``attn.k``, ``attn.v``, ``attn.o``, ``attn.gate``, ``mlp.gate``, ``mlp.up``,
``mlp.down``, ``head``); theory's table gives each role its part and whether it writes
into the residual stream, and the module holding the parameter gives its orientation:

* ``nn.Linear`` stores (d_out, d_in); ``nn.Embedding`` (rows, d_model): a table's fan-in is
  d_model (docs/science.md §1, rows are tokens or positions);
* Hugging Face's ``Conv1D`` (GPT-2) stores (d_in, d_out).

A pattern mapped to several roles is a fused parameter split into equal blocks along its
output axis (GPT-2's ``c_attn``: q | k | v; Phi-3's ``gate_up_proj``: gate | up). The block
index of a matrix is the first ``.<n>.`` of its name. Any other layout (interleaved heads,
3-D expert tensors) is given by a ``table`` function returning the
:class:`~.matrices.MatrixSpec` records directly.

One-dimensional parameters are never guessed. Their meaning comes from the family's
``vectors`` patterns (``"gain"`` → 1, ``"bias"`` → 0, ``"offset_gain"`` → 0, for a norm
computing x̂·(1 + w) as Gemma's does, whose gain is 1 at w = 0), else from the module
that holds them when its computation is known: the gain and bias of ``nn.LayerNorm``,
``nn.RMSNorm`` and the Hugging Face RMSNorms in :data:`GAIN_NORMS` (each computes
w ⊙ x̂, checked in the tests), and the bias of ``nn.Linear``, ``nn.Embedding`` and
``Conv1D``. Anything else is refused, naming the parameter.

Two families are built in: ``gpt2`` and ``llama`` (Llama's module names, shared by
Mistral, Qwen2/3 and others). :func:`register_family` adds one; families registered later
are tried first. Example (OPT, whose norms and biases are plain LayerNorm and Linear)::

    from smallinit.llm import register_family
    register_family("opt", lambda m: m.config.model_type == "opt", matrices={
        r"embed_tokens\\.weight$": "embedding", r"embed_positions\\.weight$": "positions",
        r"q_proj\\.weight$": "attn.q", r"k_proj\\.weight$": "attn.k",
        r"v_proj\\.weight$": "attn.v", r"out_proj\\.weight$": "attn.o",
        r"fc1\\.weight$": "mlp.up", r"fc2\\.weight$": "mlp.down", r"lm_head\\.weight$": "head"})
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from torch import nn

from smallinit.core.errors import ConfigError
from smallinit.llm.model.matrices import ALL, MatrixSpec, cols, rows
from smallinit.theory.transformer import TransformerShape, matrix_kinds

#: role → (part, writes into the residual stream), read off theory's table of a model that
#: has every kind of matrix (learned positions, gated attention, SwiGLU, untied head).
ROLES: dict[str, tuple[str, bool]] = {
    k.kind: (k.part, k.residual_out)
    for k in matrix_kinds(TransformerShape(d_model=4, positions="learned", context=4,
                                           gated_attention=True, mlp="swiglu"))
}
#: the value each meaning of a one-dimensional parameter is set to
VECTOR_VALUES: dict[str, float] = {"gain": 1.0, "bias": 0.0, "offset_gain": 0.0}
#: Hugging Face norm classes that compute w ⊙ x̂ (gain 1 at w = 1); a class not listed here
#: (GemmaRMSNorm computes x̂ ⊙ (1 + w)) is refused unless a family says what it is.
GAIN_NORMS = frozenset({
    "LlamaRMSNorm", "MistralRMSNorm", "MixtralRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm",
    "Qwen3MoeRMSNorm", "Phi3RMSNorm", "Olmo2RMSNorm", "GraniteRMSNorm",
})
_BIAS_MODULES = (nn.Linear, nn.Embedding, nn.LayerNorm, nn.Conv1d)
_LAYER = re.compile(r"\.(\d+)\.")

Matcher = Callable[[nn.Module], bool]
TableFn = Callable[[nn.Module], list[MatrixSpec]]


def _is_hf_conv1d(module: nn.Module) -> bool:
    """GPT-2's ``transformers.pytorch_utils.Conv1D`` (weight stored (d_in, d_out))."""
    cls = type(module)
    return cls.__name__ == "Conv1D" and cls.__module__.startswith("transformers")


def _is_gain_norm(module: nn.Module) -> bool:
    if isinstance(module, nn.LayerNorm | nn.RMSNorm):
        return True
    cls = type(module)
    return cls.__name__ in GAIN_NORMS and cls.__module__.startswith("transformers")


def known_vector(module: nn.Module, attr: str) -> str | None:
    """What a one-dimensional parameter ``attr`` of ``module`` is, when the module's
    computation is known (``"gain"`` or ``"bias"``); else None."""
    if attr == "weight" and _is_gain_norm(module):
        return "gain"
    if attr == "bias" and (isinstance(module, _BIAS_MODULES) or _is_gain_norm(module)
                           or _is_hf_conv1d(module)):
        return "bias"
    return None


@dataclass(frozen=True)
class Family:
    """A model family: ``match(model)`` recognises it; ``matrices`` (pattern → role or
    roles of equal blocks) and ``vectors`` (pattern → ``gain``/``bias``/``offset_gain``)
    say what its parameters are; ``table(model)``, when given, lists the matrices instead."""

    name: str
    match: Matcher
    matrices: tuple[tuple[re.Pattern, tuple[str, ...]], ...] = ()
    vectors: tuple[tuple[re.Pattern, str], ...] = ()
    table: TableFn | None = None

    def roles_of(self, name: str) -> tuple[str, ...] | None:
        return next((r for p, r in self.matrices if p.search(name)), None)

    def vector_of(self, name: str) -> str | None:
        return next((v for p, v in self.vectors if p.search(name)), None)

    def matrix_table(self, model: nn.Module) -> list[MatrixSpec]:
        """The model's matrices, in parameter order (a tied parameter listed once)."""
        if self.table is not None:
            return list(self.table(model))
        modules = dict(model.named_modules())
        specs: list[MatrixSpec] = []
        for name, param in model.named_parameters():  # tied parameters are listed once
            if param.dim() < 2:
                continue
            roles = self.roles_of(name)
            if roles is None:
                raise ConfigError(
                    f"parameter {name} {tuple(param.shape)} of {type(model).__name__} has no "
                    f"matrix role in model family {self.name!r}; add a pattern for it "
                    "(smallinit.llm.register_family)")
            module_name, _, attr = name.rpartition(".")
            specs += _split(name, param, modules[module_name], roles, self.name)
        return specs


def vector_meaning(model: nn.Module, name: str, family: Family | None = None) -> str:
    """``gain``, ``bias`` or ``offset_gain`` for the one-dimensional parameter ``name`` of
    ``model``: the family's pattern, else what its module computes (:func:`known_vector`);
    a ConfigError naming it when neither says (nothing is guessed)."""
    meaning = family.vector_of(name) if family is not None else None
    if meaning is not None:
        return meaning
    module_name, _, attr = name.rpartition(".")
    module = model.get_submodule(module_name) if module_name else model
    meaning = known_vector(module, attr)
    if meaning is None:
        raise ConfigError(
            f"parameter {name} of {type(module).__name__} in {type(model).__name__}: its "
            "meaning is not known (a norm gain computing x·w, one computing x·(1+w) as "
            "Gemma's, a bias?) and is not guessed; say it with smallinit.llm."
            "register_family(..., vectors={pattern: 'gain' | 'offset_gain' | 'bias'})")
    return meaning


def _split(name: str, param: nn.Parameter, module: nn.Module, roles: tuple[str, ...],
           family: str) -> list[MatrixSpec]:
    """The matrix records of one parameter: its orientation from its module, equal blocks
    along its output axis for a fused parameter."""
    if param.dim() != 2:
        raise ConfigError(f"parameter {name} {tuple(param.shape)} is not a matrix; model "
                          f"family {family!r} needs a table function for it")
    in_out = _is_hf_conv1d(module)
    if not (in_out or isinstance(module, nn.Linear | nn.Embedding)):
        raise ConfigError(f"parameter {name} of {type(module).__name__}: its orientation "
                          "is not known (nn.Linear, nn.Embedding and Conv1D are); model "
                          f"family {family!r} needs a table function for it")
    d_in, d_out = param.shape if in_out else param.shape[::-1]
    n = len(roles)
    if d_out % n:
        raise ConfigError(f"parameter {name} {tuple(param.shape)}: {d_out} outputs do not "
                          f"split into {n} equal blocks ({', '.join(roles)})")
    size = d_out // n
    match = _LAYER.search(name)
    layer = int(match.group(1)) if match else 0
    out = []
    for j, role in enumerate(roles):
        part, residual = ROLES[role]
        if n == 1:
            label, index = name, ALL
        else:
            label = f"{name}[{role.rpartition('.')[2]}]"
            index = (cols if in_out else rows)(j * size, (j + 1) * size)
        out.append(MatrixSpec(label, param, index, part, int(d_in), int(size), layer, residual,
                              role, in_out=in_out))
    return out


# ----------------------------------------------------------------------------- the registry
_FAMILIES: list[Family] = []


def _patterns(mapping: Mapping[str, object], what: str) -> list[tuple[str, re.Pattern]]:
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"{what} must be a mapping of name patterns, got "
                          f"{type(mapping).__name__}")
    out = []
    for pattern in mapping:
        try:
            out.append((pattern, re.compile(pattern)))
        except (re.error, TypeError) as err:
            raise ConfigError(f"{what} pattern {pattern!r} is not a regular expression "
                              f"({err})") from None
    return out


def make_family(name: str, match: Matcher, *,
                matrices: Mapping[str, str | Sequence[str]] | None = None,
                vectors: Mapping[str, str] | None = None,
                table: TableFn | None = None) -> Family:
    """A checked :class:`Family` (see :func:`register_family`)."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"model family name {name!r} is not allowed; give a non-empty string")
    if not callable(match):
        raise ConfigError(f"model family {name!r}: match must be a function of the model")
    if table is not None and not callable(table):
        raise ConfigError(f"model family {name!r}: table must be a function of the model")
    if not matrices and table is None:
        raise ConfigError(f"model family {name!r} needs matrices (pattern → role) or a table "
                          "function")
    compiled_m = []
    for text, pattern in _patterns(matrices or {}, "matrices"):
        roles = (matrices[text],) if isinstance(matrices[text], str) else tuple(matrices[text])
        bad = [r for r in roles if r not in ROLES] or ([] if roles else ["(none)"])
        if bad:
            raise ConfigError(f"model family {name!r}: role {bad[0]!r} of pattern {text!r} is "
                              f"not known; choose from {', '.join(ROLES)}")
        compiled_m.append((pattern, roles))
    compiled_v = []
    for text, pattern in _patterns(vectors or {}, "vectors"):
        if vectors[text] not in VECTOR_VALUES:
            raise ConfigError(f"model family {name!r}: vector meaning {vectors[text]!r} of "
                              f"pattern {text!r} is not known; choose from "
                              f"{', '.join(VECTOR_VALUES)}")
        compiled_v.append((pattern, vectors[text]))
    return Family(name, match, tuple(compiled_m), tuple(compiled_v), table)


def register_family(name: str, match: Matcher, *,
                    matrices: Mapping[str, str | Sequence[str]] | None = None,
                    vectors: Mapping[str, str] | None = None,
                    table: TableFn | None = None) -> Family:
    """Teach :func:`~smallinit.llm.model.init.apply_init` a model family and return it.

    ``match(model) -> bool`` recognises the (unwrapped) model. ``matrices`` maps regular
    expressions, searched in each parameter's name in order, to a role (``"attn.q"``) or a
    tuple of roles (a fused parameter split into equal blocks along its output axis).
    ``vectors`` maps patterns of one-dimensional parameters to ``"gain"`` (set to 1),
    ``"bias"`` (0) or ``"offset_gain"`` (0: a norm computing x̂·(1 + w)); parameters of
    LayerNorm, RMSNorm, Linear and Embedding need no entry. ``table(model)`` may instead
    return the :class:`~.matrices.MatrixSpec` list itself. A family registered under an
    existing name replaces it; later families are tried first."""
    family = make_family(name, match, matrices=matrices, vectors=vectors, table=table)
    _FAMILIES[:] = [f for f in _FAMILIES if f.name != name]
    _FAMILIES.append(family)
    return family


def unregister_family(name: str) -> None:
    """Forget a registered family (built-in ones included); unknown names are an error."""
    if not any(f.name == name for f in _FAMILIES):
        raise ConfigError(f"model family {name!r} is not registered; registered: "
                          f"{', '.join(f.name for f in _FAMILIES)}")
    _FAMILIES[:] = [f for f in _FAMILIES if f.name != name]


def families() -> list[str]:
    """Names of the registered families, the first tried first."""
    return [f.name for f in reversed(_FAMILIES)]


def family_of(model: nn.Module) -> Family:
    """The family that recognises ``model`` (the latest registered first)."""
    for family in reversed(_FAMILIES):
        try:
            if family.match(model):
                return family
        except Exception:  # a matcher written for another kind of model: not this family
            continue
    raise ConfigError(f"apply_init does not know how to read {type(model).__name__}; "
                      f"supported: smallinit.llm Transformer and the model families "
                      f"{', '.join(families())} (add one with smallinit.llm.register_family)")


def _model_type(model: nn.Module) -> str | None:
    return getattr(getattr(model, "config", None), "model_type", None)


# ----------------------------------------------------------------------------- built-in
_GPT2 = {
    r"(^|\.)wte\.weight$": "embedding", r"(^|\.)wpe\.weight$": "positions",
    r"\.attn\.c_attn\.weight$": ("attn.q", "attn.k", "attn.v"),
    r"\.attn\.c_proj\.weight$": "attn.o",
    r"\.mlp\.c_fc\.weight$": "mlp.up", r"\.mlp\.c_proj\.weight$": "mlp.down",
    r"(^|\.)lm_head\.weight$": "head",
}
_LLAMA = {
    r"(^|\.)embed_tokens\.weight$": "embedding",
    r"(^|\.)q_proj\.weight$": "attn.q", r"(^|\.)k_proj\.weight$": "attn.k",
    r"(^|\.)v_proj\.weight$": "attn.v", r"(^|\.)o_proj\.weight$": "attn.o",
    r"(^|\.)gate_proj\.weight$": "mlp.gate", r"(^|\.)up_proj\.weight$": "mlp.up",
    r"(^|\.)down_proj\.weight$": "mlp.down", r"(^|\.)lm_head\.weight$": "head",
}


def _named_like(patterns: Mapping[str, object]) -> Matcher:
    """A matcher: a Hugging Face model (it has a config) whose every matrix has a role."""
    compiled = [re.compile(p) for p in patterns]

    def match(model: nn.Module) -> bool:
        if not hasattr(model, "config"):
            return False
        names = [n for n, p in model.named_parameters() if p.dim() >= 2]
        return bool(names) and all(any(c.search(n) for c in compiled) for n in names)

    return match


register_family("llama", _named_like(_LLAMA), matrices=_LLAMA)
register_family("gpt2", lambda m: _model_type(m) == "gpt2", matrices=_GPT2)
