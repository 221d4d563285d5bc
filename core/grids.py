"""Numeric grids that enter run keys, computed the same on every processor.

A run key hashes its config's floats bit for bit, so a grid value must not depend on which
SIMD kernels a library picks: NumPy's ``logspace`` goes through its vectorised ``power``,
whose AVX-512 and AVX2 paths round some values to different neighbouring doubles (on
``logspace(-3, 2, 41)``, points 5, 14, 23 and 30 move by one ulp). Here every point is
computed in decimal arithmetic (``decimal``: integer-only, so identical everywhere) with
far more digits than a double holds, then rounded once to the nearest double.

The rule, stated once: point i of ``logspace(start, stop, num)`` is the double nearest to
10^(start + i·(stop − start)/(num − 1)), the exponent taken exactly from the decimal
spellings of ``start`` and ``stop`` (``repr``, which round-trips every double).
"""

from __future__ import annotations

import decimal

#: Decimal digits carried before the one rounding to a double (a double holds about 17).
DIGITS = 40


def logspace(start: float, stop: float, num: int) -> tuple[float, ...]:
    """``num`` points from 10^start to 10^stop, evenly spaced in the exponent, each the
    correctly rounded double of its exact value (to :data:`DIGITS` digits first; the
    ends are exact powers of ten when ``start`` and ``stop`` are integers)."""
    if num < 1:
        raise ValueError(f"num={num} must be at least 1")
    with decimal.localcontext() as ctx:
        ctx.prec = DIGITS
        lo, hi = decimal.Decimal(repr(float(start))), decimal.Decimal(repr(float(stop)))
        steps = max(num - 1, 1)
        ten = decimal.Decimal(10)
        return tuple(float(ten ** (lo + (hi - lo) * i / steps)) for i in range(num))
