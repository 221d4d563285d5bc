"""The standard deviation of every transformer weight matrix under every init scheme.

This module is the single source of σ: ``smallinit.llm``'s ``apply_init`` draws weights
with it and the theory's transformer table reports it. A matrix is described by its *part*
(what it does), its true fan-in ``d_in`` and fan-out ``d_out``, the block index ``layer``
(0-based) and whether it writes into the residual stream (``residual_out``: the attention
output projection and the FFN down projection).

Parts (docs/science.md §1): ``embedding`` (token and learned position tables; d_in = d_model),
``qk`` (query/key), ``vo`` (value and attention output), ``attn_gate`` (the gated-attention
gate W_g, Qiu et al. arXiv 2505.06708), ``mlp`` (up and SwiGLU gate), ``mlp_out`` (down;
d_in = d_ff) and ``head`` (the LM head; d_in = d_model).

Per-part overrides of the γ rule name a part, or ``q`` or ``k`` alone (:data:`OVERRIDE_PARTS`):
``qk=G`` is the shorthand for ``q=G,k=G`` and is written so (``q=1,k=1`` reads back as
``qk=1``, one spelling per scheme); ``qk`` given with ``q`` or ``k`` is refused. The σ of a
query or key matrix is asked for by its sub-part, ``q`` or ``k`` (:func:`sigma_part`).

Schemes:

* ``gamma`` — the γ rule, σ = d_in^(−γ_part) (docs/science.md §1), with γ_part from ``overrides``
  or the global ``gamma``; ``depth_scaling`` multiplies residual outputs by 1/√(2·n_layers).
* ``nanogpt`` — σ = 0.02, residual outputs 0.02/√(2·n_layers) (GPT-2 paper §2.3 as
  implemented in nanoGPT).
* ``fixed`` — σ = ``std`` for every matrix (the plain "std 0.02" rule).
* ``megatron`` — σ = ``std``, residual outputs ``std``/√(2·n_layers) (Megatron-LM's
  ``scaled_init_method_normal``; Shoeybi et al. 2019).
* ``mitchell`` — OLMo's default (Groeneveld et al. 2024): σ = 1/√d_in for inputs
  (d_in = d_model for embeddings, Q/K/V, up/gate and head); the attention output
  projection 1/√(2·d_model·(layer+1)) and the FFN down projection 1/√(2·d_ff·(layer+1));
  every draw truncated at ±3σ.
* ``mup`` — width-relative μP scaling (Yang et al., Tensor Programs V, Table 3) anchored
  at ``base_width`` b: embeddings σ = 1/√b (constant in width), hidden matrices
  σ = 1/√d_in, the head σ = √b / d_in (∝ 1/fan-in).
* ``xavier`` — σ = √(2/(d_in + d_out)) (Glorot & Bengio 2010).
* ``kaiming`` — σ = √(2/d_in) (He et al. 2015, ReLU gain).

The effective rate of any σ is γ_eff = −ln σ / ln d_in (docs/science.md §1): std 0.02 is γ_eff ≈
0.59 at d = 768 but ≈ 0.81 at d = 128.

One rule table (``_sigma``) serves both forms: :func:`matrix_std` gives floats (what llm
draws with), :func:`matrix_std_expr` the same σ as an exact sympy expression, also with
symbolic widths, from which the theory derives width laws and phase-diagram coordinates
(:mod:`smallinit.theory.transformer`); :func:`effective_gamma_expr` is γ_eff exactly.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # sympy is imported where it is used: llm imports this module for floats
    import sympy as sp

#: The usable range of a drawn σ: below the smallest normal float (about 2.2e-308) a
#: weight underflows to zero or loses its precision, and above 1e150 its square overflows.
SIGMA_MIN = 2.0**-1022  # sys.float_info.min
SIGMA_MAX = 1e150

PARTS = ("embedding", "qk", "vo", "attn_gate", "mlp", "mlp_out", "head")
#: the halves of the ``qk`` part: the query and the key matrices, each its own override
SUB_PARTS = {"q": "qk", "k": "qk"}
#: what a per-part override may name, in the order :meth:`InitScheme.describe` writes them
OVERRIDE_PARTS = ("embedding", "qk", "q", "k", "vo", "attn_gate", "mlp", "mlp_out", "head")
#: the sub-part of a matrix by its role (theory's kinds, :mod:`.transformer`)
_KIND_SUB_PARTS = {"attn.q": "q", "attn.k": "k"}
SCHEMES = ("gamma", "nanogpt", "fixed", "megatron", "mitchell", "mup", "xavier", "kaiming")


@dataclass(frozen=True)
class InitScheme:
    """An init scheme by name with its knobs (only the ones its rule uses matter)."""

    name: str = "gamma"
    gamma: float = 1.0
    overrides: tuple[tuple[str, float], ...] = ()
    depth_scaling: bool = False
    std: float = 0.02
    base_width: int = 128

    def __post_init__(self) -> None:
        if self.name not in SCHEMES:
            raise ValueError(
                f"init scheme {self.name!r} is not known; choose one of {', '.join(SCHEMES)}"
            )
        for part, value in self.overrides:
            if part not in OVERRIDE_PARTS:
                raise ValueError(
                    f"override part {part!r} is not known; choose one of "
                    f"{', '.join(OVERRIDE_PARTS)}"
                )
            _check_finite(f"override {part}", value)
        object.__setattr__(self, "overrides", _joined_qk(self.overrides))
        _check_finite("gamma", self.gamma)
        if not (math.isfinite(self.std) and self.std > 0):
            raise ValueError(f"std={self.std!r} is not allowed; it must be a positive number")
        if not (isinstance(self.base_width, int) and self.base_width > 0):
            raise ValueError(f"base_width={self.base_width!r} must be a positive integer")

    def gamma_for(self, part: str) -> float:
        """γ of ``part`` under the γ rule: its override, else (``q``, ``k``) the ``qk``
        override, else the global γ. ``qk`` itself is refused once q and k differ."""
        given = dict(self.overrides)
        if part == "qk" and ("q" in given or "k" in given):
            raise ValueError(
                f"init {self.describe()} sets q and k apart, so the qk part has "
                "no one γ; ask for the q or the k matrix (sigma_part)"
            )
        if part in given:
            return given[part]
        return given.get(SUB_PARTS.get(part, ""), self.gamma)

    def without(self, parts: list[str] | tuple[str, ...]) -> InitScheme:
        """This scheme without the per-part overrides of ``parts`` (they take the global γ)."""
        return dataclasses.replace(
            self, overrides=tuple((p, g) for p, g in self.overrides if p not in parts)
        )

    def describe(self) -> str:
        """The scheme's canonical text, which :func:`parse_scheme` reads back exactly: every
        knob the rule uses written out (``fixed:0.02``, ``mup:128``), numbers in
        :func:`number_text` form, per-part overrides in :data:`OVERRIDE_PARTS` order,
        ``depth`` last.
        """
        if self.name == "gamma":
            bits = [f"gamma:{number_text(self.gamma)}"]
            order = {part: i for i, part in enumerate(OVERRIDE_PARTS)}
            bits += [
                f"{p}={number_text(g)}"
                for p, g in sorted(self.overrides, key=lambda pg: order[pg[0]])
            ]
            bits += ["depth"] if self.depth_scaling else []
            return ",".join(bits)
        if self.name in ("fixed", "megatron"):
            return f"{self.name}:{number_text(self.std)}"
        if self.name == "mup":
            return f"mup:{self.base_width}"
        return self.name


def _joined_qk(overrides: tuple[tuple[str, float], ...]) -> tuple[tuple[str, float], ...]:
    """The overrides with ``q=G,k=G`` written as ``qk=G`` (one spelling for one σ table); a
    ValueError for ``qk`` beside ``q`` or ``k`` (a shorthand and its halves at once)."""
    given = dict(overrides)
    halves = [p for p in SUB_PARTS if p in given]
    if "qk" in given and halves:
        raise ValueError(
            f"override qk={number_text(given['qk'])} is the shorthand for q= and "
            f"k=, and {halves[0]}={number_text(given[halves[0]])} is given too; "
            "give qk= alone, or q= and k="
        )
    if len(halves) == 2 and given["q"] == given["k"]:
        return tuple((("qk", g) if p == "q" else (p, g)) for p, g in overrides if p != "k")
    return tuple(overrides)


def sigma_part(part: str, kind: str) -> str:
    """The part whose γ a matrix takes: ``q`` or ``k`` for the query and key matrices of the
    ``qk`` part (``kind`` ``attn.q``, ``attn.k``), else ``part`` itself."""
    return _KIND_SUB_PARTS.get(kind, part) if part == "qk" else part


def number_text(value: float) -> str:
    """The shortest text that reads back as exactly this float (Python's ``repr``), without
    a trailing ``.0``: 1.0 → ``1``, 0.5 → ``0.5``, 1e-05 → ``1e-05``, −0.0 → ``0``.
    Unlike ``:g`` it never rounds (``:g`` keeps 6 digits: 0.1234567 → 0.123457)."""
    text = repr(float(value) + 0.0)  # + 0.0 turns −0.0 into 0.0
    return text[:-2] if text.endswith(".0") else text


def gamma_scheme(gamma: float) -> str:
    """The scheme text of the γ rule at ``gamma``: ``gamma_scheme(1.0)`` is ``gamma:1``
    (:func:`number_text`, exact to the last digit)."""
    return f"gamma:{number_text(gamma)}"


def canonical_scheme(text: str) -> str:
    """One spelling per scheme, for run keys: ``parse_scheme(text).describe()``.

    ``gamma:1``, ``gamma:1.0``, ``gamma:1.00`` and ``gamma:1e0`` all give ``gamma:1``;
    ``GAMMA:0.5, qk=1`` gives ``gamma:0.5,qk=1``; ``fixed`` gives ``fixed:0.02``. Two texts
    get the same canonical form exactly when they parse to the same :class:`InitScheme`.
    ValueError (one line) for a text :func:`parse_scheme` rejects.
    """
    return parse_scheme(text).describe()


def _check_finite(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name}={value!r} is not allowed; it must be a finite number")


def _check_part(part: str) -> None:
    if part not in PARTS and part not in SUB_PARTS:
        raise ValueError(
            f"part {part!r} is not known; choose one of {', '.join([*PARTS, *SUB_PARTS])}"
        )


def _check_dim(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} is not allowed; it must be a positive integer")


def matrix_std(
    scheme: InitScheme,
    part: str,
    d_in: int,
    d_out: int,
    *,
    n_layers: int,
    layer: int = 0,
    residual_out: bool = False,
) -> float:
    """σ of one weight matrix (see the module docstring for every rule and its source);
    ``part`` is one of :data:`PARTS`, or ``q`` or ``k`` for a query or key matrix."""
    _check_part(part)
    _check_dim("d_in", d_in)
    _check_dim("d_out", d_out)
    _check_dim("n_layers", n_layers)
    if not (isinstance(layer, int) and 0 <= layer < max(n_layers, 1)):
        raise ValueError(f"layer={layer!r} is not allowed; it must be in 0..{n_layers - 1}")
    try:
        sigma = float(
            _sigma(
                scheme, part, d_in, d_out, n_layers, layer, residual_out, num=float, sqrt=math.sqrt
            )
        )
    except (OverflowError, ZeroDivisionError):
        sigma = math.inf
    if not (math.isfinite(sigma) and sigma >= SIGMA_MIN):
        raise ValueError(
            f"init {scheme.describe()} gives σ={sigma!r} for the {part} matrix with "
            f"d_in={d_in}, which a float cannot hold as a usable std; choose a scheme whose "
            f"σ = d_in^-γ stays between {SIGMA_MIN:g} and {SIGMA_MAX:g} (|γ| much smaller)"
        )
    if sigma > SIGMA_MAX:
        raise ValueError(
            f"init {scheme.describe()} gives σ={sigma:g} for the {part} matrix with "
            f"d_in={d_in}; σ must be at most {SIGMA_MAX:g} (choose a larger γ)"
        )
    return sigma


def matrix_std_expr(
    scheme: InitScheme,
    part: str,
    d_in: Any,
    d_out: Any,
    *,
    n_layers: int,
    layer: int = 0,
    residual_out: bool = False,
) -> sp.Expr:
    """σ as an exact sympy expression: the same rule as :func:`matrix_std`, with ``d_in`` and
    ``d_out`` integers or positive symbols (a width law, for the phase-diagram limits) and
    the scheme's numbers read as the decimals they print as (0.02 is 1/50)."""
    import sympy as sp

    _check_part(part)
    _check_dim("n_layers", n_layers)
    return _sigma(
        scheme,
        part,
        sp.sympify(d_in),
        sp.sympify(d_out),
        sp.Integer(n_layers),
        sp.Integer(layer),
        residual_out,
        num=_exact,
        sqrt=sp.sqrt,
    )


def _exact(value: float) -> sp.Rational:
    import sympy as sp

    return sp.Rational(repr(float(value)))


def _sigma(
    scheme: InitScheme,
    part: str,
    d_in,
    d_out,
    n_layers,
    layer,
    residual_out: bool,
    *,
    num: Callable[[float], Any],
    sqrt: Callable[[Any], Any],
):
    """The rule table behind :func:`matrix_std` (floats) and :func:`matrix_std_expr` (sympy)."""
    depth = 1 / sqrt(2 * n_layers)
    name = scheme.name
    if name == "gamma":
        sigma = d_in ** (-num(scheme.gamma_for(part)))
        return sigma * depth if (scheme.depth_scaling and residual_out) else sigma
    if name == "nanogpt":
        return num(0.02) * depth if residual_out else num(0.02)
    if name == "fixed":
        return num(scheme.std)
    if name == "megatron":
        return num(scheme.std) * depth if residual_out else num(scheme.std)
    if name == "mitchell":
        if residual_out:
            return 1 / sqrt(2 * d_in * (layer + 1))
        return 1 / sqrt(d_in)
    if name == "mup":
        if part == "embedding":
            return 1 / sqrt(scheme.base_width)
        if part == "head":
            return sqrt(scheme.base_width) / d_in
        return 1 / sqrt(d_in)
    if name == "xavier":
        return sqrt(2 / (d_in + d_out))
    if name == "kaiming":
        return sqrt(2 / d_in)
    raise AssertionError(name)  # unreachable: InitScheme validates the name


def truncation(scheme: InitScheme) -> float | None:
    """Draws are truncated at ±k·σ with this k, or not at all (None)."""
    return 3.0 if scheme.name == "mitchell" else None


def effective_gamma(std: float, d_in: int) -> float:
    """γ_eff = −ln σ / ln d_in, the γ that would give this σ at this fan-in (docs/science.md §1)."""
    _check_dim("d_in", d_in)
    if d_in == 1:
        raise ValueError("d_in=1 is not allowed for an effective γ: ln 1 = 0")
    if not (math.isfinite(std) and std > 0):
        raise ValueError(f"std={std!r} is not allowed; it must be a positive number")
    return -math.log(std) / math.log(d_in)


def effective_gamma_expr(sigma: Any, d_in: Any) -> sp.Expr:
    """γ_eff = −ln σ / ln d_in exactly: σ = d_in^{−γ} gives γ itself, a constant std a ratio
    of logarithms (evaluate it with ``float``)."""
    import sympy as sp

    sigma, d_in = sp.sympify(sigma), sp.sympify(d_in)
    if d_in.is_number and not d_in > 1:
        raise ValueError(f"d_in={d_in} is not allowed for an effective γ; it must be > 1")
    if sigma.is_number and not sigma > 0:
        raise ValueError(f"std={sigma} is not allowed; it must be a positive number")
    # Logarithms of integers split into logarithms of primes (factor=True), so that the
    # ratio is a rational function of those logs and cancel() finds σ = d_in^{−γ} → γ
    # without simplify(), which takes hours on exponents with long decimals (γ = 1e-8).
    num = sp.expand_log(-sp.log(sigma), force=True, factor=True)
    den = sp.expand_log(sp.log(d_in), force=True, factor=True)
    ratio = sp.cancel(num / den)
    return ratio if ratio.is_Rational else sp.simplify(ratio) if _small(ratio) else ratio


def _small(expr: sp.Expr) -> bool:
    """Whether simplify() is safe on ``expr``: its rationals have short numerators and
    denominators (simplify's power rewrites are slow on 300-digit exponents)."""
    import sympy as sp

    return all(abs(q.p) < 10**12 and q.q < 10**12 for q in expr.atoms(sp.Rational))


def parse_scheme(text: str) -> InitScheme:
    """Read a scheme from a short string.

    ``gamma:1.0``; ``gamma:0.5,qk=1.0,mlp_out=0.8,depth``; ``fixed:0.02``;
    ``megatron:0.02``; ``mup:256`` (base width); ``nanogpt``; ``mitchell``; ``xavier``;
    ``kaiming``. The γ rule needs its γ (a bare ``gamma`` is an error, not γ = 1); ``fixed``
    and ``megatron`` default to std 0.02, ``mup`` to base width 128. Each part (or ``q``,
    ``k``) may be overridden once; overrides are kept in :data:`OVERRIDE_PARTS` order.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"init scheme {text!r} is empty; e.g. gamma:1.0, nanogpt, fixed:0.02")
    head, *rest = [piece.strip() for piece in text.strip().split(",")]
    name, _, arg = head.partition(":")
    name = name.strip().lower()
    if name not in SCHEMES:
        raise ValueError(f"init scheme {name!r} is not known; choose one of {', '.join(SCHEMES)}")
    if rest and name != "gamma":
        raise ValueError(f"{text!r}: only the gamma scheme takes per-part overrides")

    def number(piece: str, what: str) -> float:
        try:
            value = float(piece)
        except ValueError:
            raise ValueError(f"{what} {piece!r} in {text!r} is not a number") from None
        _check_finite(what, value)
        return value

    if name == "gamma":
        if not arg:
            raise ValueError(f"init scheme {text!r} has no γ; write gamma:G, e.g. gamma:0.5")
        gamma = number(arg, "gamma")
        overrides: list[tuple[str, float]] = []
        depth = False
        for piece in rest:
            if piece == "depth":
                depth = True
                continue
            part, sep, value = piece.partition("=")
            if not sep or part not in OVERRIDE_PARTS:
                raise ValueError(
                    f"override {piece!r} in {text!r} is not allowed; write PART=GAMMA with "
                    f"PART one of {', '.join(OVERRIDE_PARTS)}, or 'depth'"
                )
            if part in dict(overrides):
                raise ValueError(f"override of {part!r} is given twice in {text!r}; give it once")
            overrides.append((part, number(value, f"gamma of {part}")))
        overrides.sort(key=lambda pg: OVERRIDE_PARTS.index(pg[0]))
        return InitScheme("gamma", gamma=gamma, overrides=tuple(overrides), depth_scaling=depth)
    if name in ("fixed", "megatron"):
        return InitScheme(name, std=number(arg, "std") if arg else 0.02)
    if name == "mup":
        if not arg:
            return InitScheme("mup")
        if not arg.isdigit() or int(arg) < 1:
            raise ValueError(f"base width {arg!r} in {text!r} must be a positive integer")
        return InitScheme("mup", base_width=int(arg))
    if arg:
        raise ValueError(f"init scheme {name!r} takes no argument (got {arg!r})")
    return InitScheme(name)
