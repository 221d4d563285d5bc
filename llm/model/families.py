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

A pattern mapped to several roles is a fused parameter, split along its output axis by one
of three layouts (``layouts``, pattern → layout; :data:`LAYOUTS`):

* ``"blocks"`` (the default): equal contiguous blocks, one per role (GPT-2's ``c_attn``:
  q | k | v; Phi-3's ``gate_up_proj``: gate | up);
* ``"per_head"``: the output axis is (heads, roles, head size), each head's parts side by
  side (GPT-NeoX's ``query_key_value``, which its attention reads as
  ``view(..., heads, 3 · head_size).chunk(3)``: q₀ k₀ v₀ q₁ k₁ v₁ ...); the heads are the
  model config's ``num_attention_heads`` (or ``n_head``, ``num_heads``);
* ``"grouped"``: q | k | v as contiguous blocks of grouped-query attention (Ainslie et al.
  2023), n_heads·head_dim rows of q, then n_kv_heads·head_dim rows each of k and v (Phi-3's
  ``qkv_proj``, which its attention slices as ``[:q_pos]``, ``[q_pos:q_pos + kv]``,
  ``[q_pos + kv:]``); n_kv_heads is the config's ``num_key_value_heads`` (n_heads when
  unset), head_dim its ``head_dim`` (hidden_size / n_heads when unset).

Reading a per-head parameter as blocks would put the σ of a per-part override
(``gamma:0.5,qk=1.0``) on the wrong rows without any error, so the layout is stated, not
guessed: a family says it per pattern, every fused matrix's record carries the layout it was
split by (``init_table``'s ``layout`` column, :meth:`Family.describe`), and
:func:`register_family` logs the layout it assumed for a fused pattern given none. The block
index of a matrix is the first ``.<n>.`` of its name. Any other layout (3-D expert tensors)
is given by a ``table`` function returning the :class:`~.matrices.MatrixSpec` records
directly.

One-dimensional parameters are never guessed. Their meaning comes from the family's
``vectors`` patterns (``"gain"`` → 1, ``"bias"`` → 0, ``"offset_gain"`` → 0, for a norm
computing x̂·(1 + w) as Gemma's does, whose gain is 1 at w = 0), else from the module
that holds them when its computation is known: the gain and bias of ``nn.LayerNorm``,
``nn.RMSNorm`` and the Hugging Face RMSNorms in :data:`GAIN_NORMS` (each computes
w ⊙ x̂, checked in the tests), and the bias of ``nn.Linear``, ``nn.Embedding`` and
``Conv1D``. Anything else is refused, naming the parameter.

Five families are built in: ``gpt2``, ``llama`` (Llama's module names, shared by Mistral,
Qwen2/3 and others), ``gpt_neox`` (Pythia; ``query_key_value`` per head, the head
``embed_out`` in transformers 4 and ``lm_head`` in 5), ``phi`` (Phi-1/1.5/2: q, k, v,
``dense``, ``fc1``, ``fc2``, a head with a bias) and ``phi3`` (Phi-3: ``qkv_proj`` grouped,
``gate_up_proj`` as blocks gate | up). :func:`register_family` adds one;
families registered later are tried first. A model no family reads is refused with a
template of the :func:`register_family` call for it (:func:`template`), its parameter
patterns filled in. Example (OPT, whose norms and biases are plain LayerNorm and Linear)::

    from smallinit.llm import register_family
    register_family("opt", lambda m: m.config.model_type == "opt", matrices={
        r"embed_tokens\\.weight$": "embedding", r"embed_positions\\.weight$": "positions",
        r"q_proj\\.weight$": "attn.q", r"k_proj\\.weight$": "attn.k",
        r"v_proj\\.weight$": "attn.v", r"out_proj\\.weight$": "attn.o",
        r"fc1\\.weight$": "mlp.up", r"fc2\\.weight$": "mlp.down", r"lm_head\\.weight$": "head"})
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from torch import nn

from smallinit.core.errors import ConfigError
from smallinit.llm.model.matrices import ALL, MatrixSpec, col_set, cols, row_set, rows
from smallinit.theory.transformer import TransformerShape, matrix_kinds

#: role → (part, writes into the residual stream), read off theory's table of a model that
#: has every kind of matrix (learned positions, gated attention, SwiGLU, untied head).
ROLES: dict[str, tuple[str, bool]] = {
    k.kind: (k.part, k.residual_out)
    for k in matrix_kinds(
        TransformerShape(
            d_model=4, positions="learned", context=4, gated_attention=True, mlp="swiglu"
        )
    )
}
#: the value each meaning of a one-dimensional parameter is set to
VECTOR_VALUES: dict[str, float] = {"gain": 1.0, "bias": 0.0, "offset_gain": 0.0}
#: Hugging Face norm classes that compute w ⊙ x̂ (gain 1 at w = 1); a class not listed here
#: (GemmaRMSNorm computes x̂ ⊙ (1 + w)) is refused unless a family says what it is.
GAIN_NORMS = frozenset(
    {
        "LlamaRMSNorm",
        "MistralRMSNorm",
        "MixtralRMSNorm",
        "Qwen2RMSNorm",
        "Qwen3RMSNorm",
        "Qwen3MoeRMSNorm",
        "Phi3RMSNorm",
        "Olmo2RMSNorm",
        "GraniteRMSNorm",
    }
)
_BIAS_MODULES = (nn.Linear, nn.Embedding, nn.LayerNorm, nn.Conv1d)
_LAYER = re.compile(r"\.(\d+)\.")
#: how a fused parameter holds its matrices along the output axis (module docstring)
LAYOUTS = {
    "blocks": "equal contiguous blocks, one per role",
    "per_head": "(heads, roles, head size): each head's parts side by side",
    "grouped": "q | k | v blocks of n_heads·head_dim, n_kv_heads·head_dim and "
    "n_kv_heads·head_dim rows (grouped-query attention)",
}
#: the roles of a ``grouped`` fused parameter, in its order
GROUPED_ROLES = ("attn.q", "attn.k", "attn.v")
#: config attributes that give a Hugging Face model's number of attention heads
HEAD_ATTRS = ("num_attention_heads", "n_head", "num_heads")
log = logging.getLogger(__name__)

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
    if attr == "bias" and (
        isinstance(module, _BIAS_MODULES) or _is_gain_norm(module) or _is_hf_conv1d(module)
    ):
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
    layouts: tuple[tuple[re.Pattern, str], ...] = ()

    def roles_of(self, name: str) -> tuple[str, ...] | None:
        return next((r for p, r in self.matrices if p.search(name)), None)

    def layout_of(self, name: str) -> str:
        """The layout of the fused parameter ``name``: its pattern's, else ``"blocks"``."""
        return next((v for p, v in self.layouts if p.search(name)), "blocks")

    def describe(self) -> list[str]:
        """One line per fused pattern: its roles and the layout they are split by."""
        out = []
        for pattern, roles in self.matrices:
            if len(roles) > 1:
                layout = next(
                    (v for p, v in self.layouts if p.pattern == pattern.pattern), "blocks"
                )
                out.append(
                    f"{pattern.pattern}: {' | '.join(roles)} as {layout} ({LAYOUTS[layout]})"
                )
        return out

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
                raise with_template(
                    ConfigError(
                        f"parameter {name} {tuple(param.shape)} of {type(model).__name__} has no "
                        f"matrix role in model family {self.name!r}; add a pattern for it "
                        f"(smallinit.llm.register_family; {TEMPLATE_HINT})"
                    ),
                    model,
                    self.name,
                )
            module_name, _, attr = name.rpartition(".")
            layout = self.layout_of(name) if len(roles) > 1 else ""
            specs += _split(
                name,
                param,
                modules[module_name],
                roles,
                self.name,
                layout,
                _heads(model) if layout == "per_head" else 0,
                _grouped_sizes(model) if layout == "grouped" else (),
            )
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
            "register_family(..., vectors={pattern: 'gain' | 'offset_gain' | 'bias'})"
        )
    return meaning


def _heads(model: nn.Module) -> int:
    """The number of attention heads in a Hugging Face model's config (:data:`HEAD_ATTRS`)."""
    config = getattr(model, "config", None)
    for attr in HEAD_ATTRS:
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    raise ConfigError(
        f"{type(model).__name__}: a per_head layout needs the number of "
        f"attention heads, and its config has none of {', '.join(HEAD_ATTRS)}"
    )


def _grouped_sizes(model: nn.Module) -> tuple[int, int, int]:
    """Rows of q, k and v in a grouped q | k | v parameter: n_heads·head_dim and twice
    n_kv_heads·head_dim, from the model's config (the module docstring)."""
    config = getattr(model, "config", None)
    heads = _heads(model)
    kv = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or getattr(config, "hidden_size", 0) // heads
    if not (isinstance(kv, int) and isinstance(head_dim, int) and kv > 0 and head_dim > 0):
        raise ConfigError(
            f"{type(model).__name__}: a grouped layout needs num_key_value_heads "
            f"and head_dim (or hidden_size) in its config; got {kv!r}, "
            f"{head_dim!r}"
        )
    return heads * head_dim, kv * head_dim, kv * head_dim


def _split(
    name: str,
    param: nn.Parameter,
    module: nn.Module,
    roles: tuple[str, ...],
    family: str,
    layout: str = "",
    heads: int = 0,
    sizes: tuple[int, ...] = (),
) -> list[MatrixSpec]:
    """The matrix records of one parameter: its orientation from its module; a fused
    parameter split along its output axis by ``layout`` (``blocks``: equal contiguous
    blocks; ``per_head``: ``heads`` groups of one head-size slice per role; ``grouped``:
    contiguous blocks of ``sizes`` rows)."""
    if param.dim() != 2:
        raise ConfigError(
            f"parameter {name} {tuple(param.shape)} is not a matrix; model "
            f"family {family!r} needs a table function for it"
        )
    in_out = _is_hf_conv1d(module)
    if not (in_out or isinstance(module, nn.Linear | nn.Embedding)):
        raise ConfigError(
            f"parameter {name} of {type(module).__name__}: its orientation "
            "is not known (nn.Linear, nn.Embedding and Conv1D are); model "
            f"family {family!r} needs a table function for it"
        )
    d_in, d_out = param.shape if in_out else param.shape[::-1]
    n = len(roles)
    groups = heads if layout == "per_head" else 1
    if layout == "grouped" and sum(sizes) != d_out:
        raise ConfigError(
            f"parameter {name} {tuple(param.shape)}: {d_out} outputs are not "
            f"q | k | v of {' + '.join(map(str, sizes))} rows (n_heads·head_dim, "
            "n_kv_heads·head_dim twice, from the model's config)"
        )
    if layout != "grouped" and d_out % (n * groups):
        what = (
            f"{heads} heads × {n} parts ({', '.join(roles)}) per head"
            if layout == "per_head"
            else f"{n} equal blocks ({', '.join(roles)})"
        )
        raise ConfigError(
            f"parameter {name} {tuple(param.shape)}: {d_out} outputs do not split into {what}"
        )
    size = d_out // n  # outputs of one role
    width = size // groups  # a head's slice of one role (per_head); the block (blocks)
    starts = (
        [sum(sizes[:j]) for j in range(n)] if layout == "grouped" else [j * size for j in range(n)]
    )
    match = _LAYER.search(name)
    layer = int(match.group(1)) if match else 0
    out = []
    for j, role in enumerate(roles):
        part, residual = ROLES[role]
        if n == 1:
            label, index = name, ALL
        elif layout == "per_head":
            label = f"{name}[{role.rpartition('.')[2]}]"
            numbers = [(h * n + j) * width + i for h in range(groups) for i in range(width)]
            index = (col_set if in_out else row_set)(numbers)
        else:
            if layout == "grouped":
                size = sizes[j]
            label = f"{name}[{role.rpartition('.')[2]}]"
            index = (cols if in_out else rows)(starts[j], starts[j] + size)
        out.append(
            MatrixSpec(
                label,
                param,
                index,
                part,
                int(d_in),
                int(size),
                layer,
                residual,
                role,
                in_out=in_out,
                layout=layout if n > 1 else "",
            )
        )
    return out


# ----------------------------------------------------------------------------- the registry
_FAMILIES: list[Family] = []


def _patterns(mapping: Mapping[str, object], what: str) -> list[tuple[str, re.Pattern]]:
    if not isinstance(mapping, Mapping):
        raise ConfigError(
            f"{what} must be a mapping of name patterns, got {type(mapping).__name__}"
        )
    out = []
    for pattern in mapping:
        try:
            out.append((pattern, re.compile(pattern)))
        except (re.error, TypeError) as err:
            raise ConfigError(
                f"{what} pattern {pattern!r} is not a regular expression ({err})"
            ) from None
    return out


def make_family(
    name: str,
    match: Matcher,
    *,
    matrices: Mapping[str, str | Sequence[str]] | None = None,
    vectors: Mapping[str, str] | None = None,
    table: TableFn | None = None,
    layouts: Mapping[str, str] | None = None,
) -> Family:
    """A checked :class:`Family` (see :func:`register_family`)."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"model family name {name!r} is not allowed; give a non-empty string")
    if not callable(match):
        raise ConfigError(f"model family {name!r}: match must be a function of the model")
    if table is not None and not callable(table):
        raise ConfigError(f"model family {name!r}: table must be a function of the model")
    if not matrices and table is None:
        raise ConfigError(
            f"model family {name!r} needs matrices (pattern → role) or a table function"
        )
    compiled_m = []
    for text, pattern in _patterns(matrices or {}, "matrices"):
        roles = (matrices[text],) if isinstance(matrices[text], str) else tuple(matrices[text])
        bad = [r for r in roles if r not in ROLES] or ([] if roles else ["(none)"])
        if bad:
            raise ConfigError(
                f"model family {name!r}: role {bad[0]!r} of pattern {text!r} is "
                f"not known; choose from {', '.join(ROLES)}"
            )
        compiled_m.append((pattern, roles))
    compiled_v = []
    for text, pattern in _patterns(vectors or {}, "vectors"):
        if vectors[text] not in VECTOR_VALUES:
            raise ConfigError(
                f"model family {name!r}: vector meaning {vectors[text]!r} of "
                f"pattern {text!r} is not known; choose from "
                f"{', '.join(VECTOR_VALUES)}"
            )
        compiled_v.append((pattern, vectors[text]))
    fused = {p.pattern for p, roles in compiled_m if len(roles) > 1}
    compiled_l = []
    for text, pattern in _patterns(layouts or {}, "layouts"):
        if layouts[text] not in LAYOUTS:
            raise ConfigError(
                f"model family {name!r}: layout {layouts[text]!r} of pattern "
                f"{text!r} is not known; choose from {', '.join(LAYOUTS)}"
            )
        if text not in fused:
            raise ConfigError(
                f"model family {name!r}: layout pattern {text!r} is not a "
                "fused pattern of matrices (one mapped to a tuple of roles); "
                f"fused patterns: {', '.join(sorted(fused)) or 'none'}"
            )
        roles = next(r for p, r in compiled_m if p.pattern == text)
        if layouts[text] == "grouped" and roles != GROUPED_ROLES:
            raise ConfigError(
                f"model family {name!r}: the grouped layout of {text!r} needs "
                f"the roles {', '.join(GROUPED_ROLES)} in this order, not "
                f"{', '.join(roles)}"
            )
        compiled_l.append((pattern, layouts[text]))
    return Family(name, match, tuple(compiled_m), tuple(compiled_v), table, tuple(compiled_l))


def register_family(
    name: str,
    match: Matcher,
    *,
    matrices: Mapping[str, str | Sequence[str]] | None = None,
    vectors: Mapping[str, str] | None = None,
    table: TableFn | None = None,
    layouts: Mapping[str, str] | None = None,
) -> Family:
    """Teach :func:`~smallinit.llm.model.init.apply_init` a model family and return it.

    ``match(model) -> bool`` recognises the (unwrapped) model. ``matrices`` maps regular
    expressions, searched in each parameter's name in order, to a role (``"attn.q"``) or a
    tuple of roles (a fused parameter split along its output axis). ``layouts`` maps a fused
    pattern (the same text as in ``matrices``) to its layout, ``"blocks"`` (equal contiguous
    blocks, the default), ``"per_head"`` (interleaved head by head, as GPT-NeoX's
    ``query_key_value``) or ``"grouped"`` (q | k | v of grouped-query sizes, as Phi-3's
    ``qkv_proj``); the layout assumed for a fused pattern given none is logged, and
    :meth:`Family.describe` lists them all.
    ``vectors`` maps patterns of one-dimensional parameters to ``"gain"`` (set to 1),
    ``"bias"`` (0) or ``"offset_gain"`` (0: a norm computing x̂·(1 + w)); parameters of
    LayerNorm, RMSNorm, Linear and Embedding need no entry. ``table(model)`` may instead
    return the :class:`~.matrices.MatrixSpec` list itself. A family registered under an
    existing name replaces it; later families are tried first."""
    family = make_family(
        name, match, matrices=matrices, vectors=vectors, table=table, layouts=layouts
    )
    stated = {p.pattern for p, _ in family.layouts}
    for pattern, roles in family.matrices:
        if len(roles) > 1 and pattern.pattern not in stated:
            log.info(
                "model family %r: fused pattern %r read as blocks (%s: %s); pass "
                "layouts={%r: 'per_head'} if it interleaves them per head",
                name,
                pattern.pattern,
                " | ".join(roles),
                LAYOUTS["blocks"],
                pattern.pattern,
            )
    _FAMILIES[:] = [f for f in _FAMILIES if f.name != name]
    _FAMILIES.append(family)
    return family


def unregister_family(name: str) -> None:
    """Forget a registered family (built-in ones included); unknown names are an error."""
    if not any(f.name == name for f in _FAMILIES):
        raise ConfigError(
            f"model family {name!r} is not registered; registered: "
            f"{', '.join(f.name for f in _FAMILIES)}"
        )
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
    raise with_template(
        ConfigError(
            f"apply_init does not know how to read {type(model).__name__}; supported: "
            f"smallinit.llm Transformer and the model families {', '.join(families())}. Add one "
            f"with smallinit.llm.register_family ({TEMPLATE_HINT})"
        ),
        model,
    )


TEMPLATE_HINT = (
    "a template of the call for this model is the error's note, also "
    "smallinit.llm.model.families.template(model)"
)


def with_template(err: ConfigError, model: nn.Module, name: str | None = None) -> ConfigError:
    """``err`` (one line, as every refusal) with the :func:`template` of a register_family
    call for ``model`` as its note: shown under a traceback in a script or notebook, read
    as ``err.__notes__``."""
    err.add_note(
        "a template for this model (replace each ? by a role, check each guessed "
        "one):\n" + template(model, name)
    )
    return err


def _model_type(model: nn.Module) -> str | None:
    return getattr(getattr(model, "config", None), "model_type", None)


def _pattern_text(name: str) -> str:
    """A pattern for the parameter ``name`` and its namesakes in every block: the parts
    after its block number (else its last two parts), anchored at a dot."""
    parts = name.split(".")
    numbered = [i for i, p in enumerate(parts) if p.isdigit()]
    tail = parts[numbered[-1] + 1 :] if numbered else parts[-2:]
    return r"(^|\.)" + r"\.".join(re.escape(p) for p in tail) + "$"


def template(model: nn.Module, name: str | None = None) -> str:
    """The :func:`register_family` call for ``model`` to complete: one ``matrices`` line per
    matrix pattern (its shape and module class as a comment), with the role a registered
    family gives a parameter of that name (a guess to check) or ``"?"``, and a ``vectors``
    line for each one-dimensional parameter whose meaning no module states."""
    model_type = _model_type(model)
    name = name or model_type or type(model).__name__.lower()
    match = (
        f'lambda m: m.config.model_type == "{model_type}"'
        if model_type
        else f'lambda m: type(m).__name__ == "{type(model).__name__}"'
    )
    modules = dict(model.named_modules())
    matrices: dict[str, tuple[str, str]] = {}
    vectors: dict[str, str] = {}
    for pname, param in model.named_parameters():
        module = modules.get(pname.rpartition(".")[0], model)
        pattern = _pattern_text(pname)
        if param.dim() >= 2 and pattern not in matrices:
            guess, layout = "?", ""
            for family in reversed(_FAMILIES):
                roles = family.roles_of(pname)
                if roles is not None:
                    quoted = [f'"{r}"' for r in roles]
                    guess = quoted[0] if len(roles) == 1 else f"({', '.join(quoted)})"
                    if len(roles) > 1:
                        layout = family.layout_of(pname)
                    break
            note = f"{tuple(param.shape)} {type(module).__name__}"
            if layout:
                note += f"; fused, {layout}"
            matrices[pattern] = ('"?"' if guess == "?" else guess, note)
        elif param.dim() == 1 and known_vector(module, pname.rpartition(".")[2]) is None:
            vectors.setdefault(pattern, f"{tuple(param.shape)} {type(module).__name__}")
    lines = [
        "from smallinit.llm import register_family",
        f'register_family("{name}", {match}, matrices={{',
    ]
    keys = {p: f'r"{p}":' for p in [*matrices, *vectors]}
    width = max(map(len, keys.values()), default=0)
    role_width = max((len(r) for r, _ in matrices.values()), default=0) + 1
    for pattern, (role, note) in matrices.items():
        lines.append(f"    {keys[pattern]:<{width}} {role + ',':<{role_width}}  # {note}")
    if vectors:
        lines.append("}, vectors={")
        for pattern, note in vectors.items():
            lines.append(f'    {keys[pattern]:<{width}} "?",  # {note}: gain, offset_gain or bias')
    lines.append("})")
    lines.append(
        f"# roles: {', '.join(ROLES)}; a fused parameter maps to a tuple of roles, "
        "split as blocks (equal, contiguous) unless layouts={pattern: 'per_head'} "
        "or, for q | k | v of grouped-query sizes, 'grouped'"
    )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- built-in
_GPT2 = {
    r"(^|\.)wte\.weight$": "embedding",
    r"(^|\.)wpe\.weight$": "positions",
    r"\.attn\.c_attn\.weight$": ("attn.q", "attn.k", "attn.v"),
    r"\.attn\.c_proj\.weight$": "attn.o",
    r"\.mlp\.c_fc\.weight$": "mlp.up",
    r"\.mlp\.c_proj\.weight$": "mlp.down",
    r"(^|\.)lm_head\.weight$": "head",
}
_LLAMA = {
    r"(^|\.)embed_tokens\.weight$": "embedding",
    r"(^|\.)q_proj\.weight$": "attn.q",
    r"(^|\.)k_proj\.weight$": "attn.k",
    r"(^|\.)v_proj\.weight$": "attn.v",
    r"(^|\.)o_proj\.weight$": "attn.o",
    r"(^|\.)gate_proj\.weight$": "mlp.gate",
    r"(^|\.)up_proj\.weight$": "mlp.up",
    r"(^|\.)down_proj\.weight$": "mlp.down",
    r"(^|\.)lm_head\.weight$": "head",
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


#: GPT-NeoX (Black et al. 2022; Pythia): query_key_value interleaves q, k, v per head (its
#: attention reads ``view(..., heads, 3 · head_size).chunk(3, dim=-1)``); the head is
#: ``embed_out`` in transformers 4, ``lm_head`` in transformers 5
_NEOX_QKV = r"(^|\.)attention\.query_key_value\.weight$"
_NEOX = {
    r"(^|\.)embed_in\.weight$": "embedding",
    _NEOX_QKV: ("attn.q", "attn.k", "attn.v"),
    r"(^|\.)attention\.dense\.weight$": "attn.o",
    r"(^|\.)mlp\.dense_h_to_4h\.weight$": "mlp.up",
    r"(^|\.)mlp\.dense_4h_to_h\.weight$": "mlp.down",
    r"(^|\.)(embed_out|lm_head)\.weight$": "head",
}
#: Phi-1, 1.5 and 2 (``PhiForCausalLM``): separate q, k, v, the attention output ``dense``,
#: an fc1/fc2 MLP beside the attention (one input LayerNorm), a head with a bias
_PHI = {
    **{p: r for p, r in _LLAMA.items() if r in ("embedding", "attn.q", "attn.k", "attn.v", "head")},
    r"(^|\.)self_attn\.dense\.weight$": "attn.o",
    r"(^|\.)mlp\.fc1\.weight$": "mlp.up",
    r"(^|\.)mlp\.fc2\.weight$": "mlp.down",
}

#: Phi-3 (``Phi3ForCausalLM``, Abdin et al. 2024): Llama's names, but q | k | v fused in
#: ``qkv_proj`` (grouped-query sizes; its attention slices ``[:q_pos]``, ``[q_pos:q_pos +
#: kv]``, ``[q_pos + kv:]``) and gate | up in ``gate_up_proj`` (its MLP reads
#: ``chunk(2)`` as gate, up)
_PHI3_QKV = r"(^|\.)self_attn\.qkv_proj\.weight$"
_PHI3_GATE_UP = r"(^|\.)mlp\.gate_up_proj\.weight$"
_PHI3 = {
    **{p: r for p, r in _LLAMA.items() if r in ("embedding", "attn.o", "mlp.down", "head")},
    _PHI3_QKV: ("attn.q", "attn.k", "attn.v"),
    _PHI3_GATE_UP: ("mlp.gate", "mlp.up"),
}

register_family("llama", _named_like(_LLAMA), matrices=_LLAMA)
register_family(
    "gpt2",
    lambda m: _model_type(m) == "gpt2",
    matrices=_GPT2,
    layouts={r"\.attn\.c_attn\.weight$": "blocks"},
)
register_family(
    "gpt_neox",
    lambda m: _model_type(m) == "gpt_neox",
    matrices=_NEOX,
    layouts={_NEOX_QKV: "per_head"},
)
register_family("phi", lambda m: _model_type(m) == "phi", matrices=_PHI)
register_family(
    "phi3",
    lambda m: _model_type(m) == "phi3",
    matrices=_PHI3,
    layouts={_PHI3_QKV: "grouped", _PHI3_GATE_UP: "blocks"},
)
