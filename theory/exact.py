"""Reading user numbers as exact values, and the checks every theory function shares.

The theory answers exactly where the mathematics is exact, so inputs are turned into sympy
numbers first: an ``int`` or :class:`fractions.Fraction` stays what it is, a ``float`` is
read as the decimal it prints as (``0.1`` is 1/10, not the binary double nearest to it), a
string may be ``"1/2"``, ``"0.75"`` or ``"1e-3"``, and a sympy expression is kept. Bad input
raises a plain :class:`ValueError` naming the value and what is allowed (this package
imports nothing else of smallinit; the CLI turns the error into one line and exit 2).
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import Any

import sympy as sp


def to_exact(value: Any, name: str = "value") -> sp.Expr:
    """``value`` as an exact sympy number (or the sympy expression it already is)."""
    if isinstance(value, sp.Basic):
        if value.has(sp.nan, sp.zoo) or value in (sp.oo, -sp.oo):
            raise ValueError(f"{name}={value} is not allowed; it must be a finite number")
        return value
    if isinstance(value, bool):
        raise ValueError(f"{name}={value!r} is not a number")
    if isinstance(value, numbers.Integral):
        return sp.Integer(int(value))
    if isinstance(value, Fraction):
        return sp.Rational(value.numerator, value.denominator)
    if isinstance(value, numbers.Real):
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"{name}={value!r} is not allowed; it must be a finite number")
        return sp.Rational(repr(value))
    if isinstance(value, str):
        text = value.strip()
        mantissa, _, exponent = text.lower().partition("e")
        if exponent.lstrip("+-").isdigit() and len(exponent.lstrip("+-")) > 3:
            raise ValueError(
                f"{name}={value!r} is out of range; give a number whose decimal "
                "exponent has at most 3 digits (e.g. 1e-300)"
            )
        try:
            frac = Fraction(text)
        except (ValueError, ZeroDivisionError):
            raise ValueError(
                f"{name}={value!r} is not a number; give e.g. 0.5, 1/2 or 1e-3"
            ) from None
        return sp.Rational(frac.numerator, frac.denominator)
    raise ValueError(f"{name}={value!r} is not a number; give e.g. 0.5, 1/2 or 1e-3")


#: Largest |γ| (and |γ'|, or any other exponent rate) the theory accepts: σ = d^{−γ} with
#: |γ| > 100 is outside every float at any width that matters, and exact powers with
#: such exponents make sympy's arithmetic crawl.
GAMMA_LIMIT = 100


#: Largest integer order (depth D, homogeneity L, multiplicity p, derivative order) the
#: theory expands: symbolic powers of degree ~10^5 take sympy minutes to hours.
ORDER_LIMIT = 100


def rate_value(value: Any, name: str = "gamma") -> sp.Expr:
    """An exponent rate (γ, γ', a family's parameter) as an exact number with
    |value| <= :data:`GAMMA_LIMIT`; a symbolic expression is returned unchecked."""
    exact = to_exact(value, name)
    if exact.is_number and abs(exact) > GAMMA_LIMIT:
        raise ValueError(
            f"{name}={show(value)} is out of range; |{name}| must be at most {GAMMA_LIMIT}"
        )
    return exact


def to_float(value: Any, name: str = "value") -> float:
    """``value`` as a finite float (through :func:`to_exact`, so strings like 1/2 work)."""
    exact = to_exact(value, name)
    try:
        out = float(exact)
    except TypeError:
        raise ValueError(f"{name}={value!r} is not a number") from None
    if not math.isfinite(out):
        raise ValueError(f"{name}={value!r} is not allowed; it must be a finite number")
    return out


def positive_float(value: Any, name: str) -> float:
    """A finite number > 0 as a float."""
    out = to_float(value, name)
    if out <= 0:
        raise ValueError(f"{name}={value!r} is not allowed; it must be > 0")
    return out


def positive_int(value: Any, name: str) -> int:
    """An integer >= 1 (bools and non-integral numbers are rejected)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ValueError(f"{name}={value!r} is not allowed; it must be a positive integer")
    if value < 1:
        raise ValueError(f"{name}={value!r} is not allowed; it must be a positive integer")
    return int(value)


def show(value: Any) -> str:
    """Short text of an exact value: ``1/2``, ``-oo``, ``2*gamma``; floats to 4 digits."""
    if isinstance(value, float):
        return f"{value:.4g}"
    value = sp.sympify(value)
    if value == sp.oo:
        return "+inf"
    if value == -sp.oo:
        return "-inf"
    if value.is_Number and not value.is_Rational:
        return f"{float(value):.4g}"
    if value.is_Rational and value.q > 1000:
        return f"{float(value):.4g}"
    return sp.sstr(value)
