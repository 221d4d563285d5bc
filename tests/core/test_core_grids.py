"""Grids that enter run keys are correctly rounded, so every processor computes the same
doubles (smallinit.core.grids); the reference is sympy's arbitrary-precision 10^x."""

from __future__ import annotations

import numpy as np
import pytest
import sympy

from smallinit.core import grids


def exact_logspace(start, stop, num):
    """The double nearest to 10^(start + i(stop − start)/(num − 1)), from 60 exact digits."""
    lo, hi = sympy.Rational(repr(start)), sympy.Rational(repr(stop))
    return tuple(
        float(sympy.Float((10 ** (lo + (hi - lo) * sympy.Rational(i, num - 1))).evalf(60), 60))
        for i in range(num)
    )


@pytest.mark.parametrize("start, stop, num", [(-3.0, 2.0, 41), (-2.5, 1.25, 17), (0.0, 3.0, 7)])
def test_logspace_is_the_correctly_rounded_grid(start, stop, num):
    assert grids.logspace(start, stop, num) == exact_logspace(start, stop, num)


def test_logspace_ends_are_exact_powers_of_ten_and_it_tracks_numpy_within_an_ulp():
    values = grids.logspace(-3.0, 2.0, 41)
    assert values[0] == 1e-3 and values[-1] == 100.0
    ref = np.logspace(-3.0, 2.0, 41)
    assert np.all(np.abs(np.array(values) - ref) <= np.spacing(ref))  # SIMD rounds within 1 ulp


def test_logspace_refuses_an_empty_grid():
    with pytest.raises(ValueError, match="num=0"):
        grids.logspace(0.0, 1.0, 0)
