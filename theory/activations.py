"""The activation registry: every named activation once, as an exact sympy expression, with
its multiplicity derived from that expression (docs/science.md §3; Zhou et al., NeurIPS 2022).

Multiplicity (Zhou et al. Def. 1): σ has multiplicity p when σ^{(k)}(0) = 0 for 1 ≤ k < p
and σ^{(p)}(0) ≠ 0 (:func:`multiplicity`, from one-sided limits of the derivatives). It needs
σ smooth at 0. ReLU is the special case: its first derivative jumps at 0 (0 on the left, 1 on
the right), so it has no multiplicity in this sense and is reported as not covered
(:func:`multiplicity` raises; :func:`multiplicities` gives None).

Derived values: tanh, sigmoid, softplus, gelu, silu: p = 1; x·tanh x: p = 2; x²·tanh x: p = 3.

The toy's JAX functions and the kernels' NumPy (and CUDA) forms are numeric copies of these
expressions; ``tests/theory/test_theory_activations.py`` checks every copy against the expression
lambdified here, on a grid, value and first derivative.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import sympy as sp

#: The variable of every activation expression.
x = sp.Symbol("x", real=True)


@dataclasses.dataclass(frozen=True)
class Activation:
    """A named activation: σ as a sympy expression in :data:`x` and its formula in words."""

    name: str
    expr: sp.Expr
    formula: str


#: Named activations, in display order.
REGISTRY: dict[str, Activation] = {
    a.name: a
    for a in (
        Activation("tanh", sp.tanh(x), "tanh x"),
        Activation("sigmoid", 1 / (1 + sp.exp(-x)), "1/(1+e^-x)"),
        Activation("softplus", sp.log(1 + sp.exp(x)), "log(1+e^x)"),
        Activation("xtanh", x * sp.tanh(x), "x tanh x"),
        Activation("x2tanh", x**2 * sp.tanh(x), "x^2 tanh x"),
        Activation("gelu", x * (1 + sp.erf(x / sp.sqrt(2))) / 2, "x Φ(x)"),
        Activation("silu", x / (1 + sp.exp(-x)), "x sigmoid(x)"),
        Activation("relu", sp.Max(0, x), "max(0, x)"),
    )
}

#: Activation name -> its sympy expression in :data:`x`.
ACTIVATIONS: dict[str, sp.Expr] = {name: a.expr for name, a in REGISTRY.items()}
#: Activation name -> its formula, for tables.
FORMULAS: dict[str, str] = {name: a.formula for name, a in REGISTRY.items()}
#: Every registered name.
NAMES: tuple[str, ...] = tuple(REGISTRY)


def check_name(name: Any) -> str:
    """``name`` if it is a registered activation, else ValueError listing the names."""
    if not isinstance(name, str) or name not in REGISTRY:
        raise ValueError(f"activation={name!r} is not known; choose one of {', '.join(NAMES)}")
    return name


def activation(name_or_expr: Any) -> sp.Expr:
    """A named activation, or a sympy expression in :data:`x` as given."""
    if isinstance(name_or_expr, sp.Basic):
        return name_or_expr
    if not isinstance(name_or_expr, str) or name_or_expr not in REGISTRY:
        raise ValueError(
            f"activation={name_or_expr!r} is not known; choose one of {', '.join(NAMES)} "
            "or pass a sympy expression in x"
        )
    return REGISTRY[name_or_expr].expr


@functools.lru_cache(maxsize=64)
def _multiplicity(expr: sp.Expr, max_order: int) -> tuple[int, sp.Expr]:
    deriv = expr
    for k in range(1, max_order + 1):
        deriv = sp.diff(deriv, x)
        left = sp.limit(deriv, x, 0, "-")
        right = sp.limit(deriv, x, 0, "+")
        if left != right or not left.is_finite:
            raise ValueError(
                f"activation {expr} is not covered: its derivative of order {k} is not "
                f"continuous at 0 (left {left}, right {right}); multiplicity needs σ smooth at 0"
            )
        if left != 0:
            return k, sp.nsimplify(left)
    raise ValueError(f"activation {expr} has σ^(k)(0) = 0 for every k ≤ {max_order}")


def multiplicity(name_or_expr: Any, max_order: int = 12) -> int:
    """p = min{k ≥ 1: σ^{(k)}(0) ≠ 0} (Zhou et al. Def. 1), from one-sided limits.

    A σ whose derivatives jump at 0 (ReLU) raises ValueError saying it is not covered.
    """
    return _multiplicity(activation(name_or_expr), max_order)[0]


def leading_derivative(name_or_expr: Any, max_order: int = 12) -> sp.Expr:
    """σ^{(p)}(0), the coefficient of the leading term of the early dynamics."""
    return _multiplicity(activation(name_or_expr), max_order)[1]


@functools.cache
def multiplicities() -> dict[str, int | None]:
    """Every registered name -> its derived p, or None where it is not covered (ReLU)."""
    out: dict[str, int | None] = {}
    for name in REGISTRY:
        try:
            out[name] = multiplicity(name)
        except ValueError:
            out[name] = None
    return out


def multiplicity_table() -> list[dict[str, Any]]:
    """Every named activation with its p and σ^{(p)}(0), or why it is not covered."""
    rows = []
    for name, act in REGISTRY.items():
        try:
            p, lead = _multiplicity(act.expr, 12)
            rows.append(
                {
                    "activation": name,
                    "formula": act.formula,
                    "p": p,
                    "leading": str(lead),
                    "covered": True,
                    "note": "",
                }
            )
        except ValueError:
            rows.append(
                {
                    "activation": name,
                    "formula": act.formula,
                    "p": None,
                    "leading": None,
                    "covered": False,
                    "note": "not covered: not differentiable at 0",
                }
            )
    return rows


def numeric(name: str):
    """(σ, σ') of a registered activation as NumPy/SciPy functions, lambdified from the
    expression (the reference the numeric copies are tested against)."""
    expr = REGISTRY[check_name(name)].expr
    modules = ["scipy", "numpy"]
    return sp.lambdify(x, expr, modules), sp.lambdify(x, sp.diff(expr, x), modules)
