"""Escape from small initialization (docs/science.md §4): plateau length of L-homogeneous models."""

import math

import pytest
import sympy as sp

from smallinit.theory import escape as E

eps, c, rho, t = E.eps, E.c, E.rho, E.t


@pytest.mark.parametrize("L", [1, sp.Rational(3, 2), 2, 3, 4])
def test_trajectory_solves_the_norm_ode(L):
    r = E.norm_trajectory(L)
    assert r.subs(t, 0) == eps
    assert sp.simplify(sp.diff(r, t) - c * r ** (sp.sympify(L) - 1)) == 0
    # the escape time is when the trajectory reaches ρ
    T = E.escape_time(L)
    assert sp.simplify(r.subs(t, T) - rho) == 0


def test_escape_time_scalings():
    assert sp.simplify(E.escape_time(2, target=1) - sp.log(1 / eps) / c) == 0
    assert sp.simplify(E.escape_time(3, rate=1, target=1) - (1 / eps - 1)) == 0
    assert E.escape_time_leading(2) == sp.log(1 / eps) / c
    assert sp.simplify(E.escape_time_leading(4) - eps**-2 / (2 * c)) == 0
    assert E.escape_time_leading(1) == 1 / c  # L < 2: no plateau
    general = E.escape_time(E.L_s)
    assert sp.simplify(general - (eps ** (2 - E.L_s) - rho ** (2 - E.L_s)) / (c * (E.L_s - 2))) == 0


def test_gamma_rule_cost():
    # ε = d^-γ: T = γ ln d for L = 2 and d^γ − 1 for L = 3 (c = 1, ρ = 1)
    assert E.escape_time_gamma(2, 1, 256) == pytest.approx(math.log(256))
    assert E.escape_time_gamma(2, 0.5, 256) == pytest.approx(0.5 * math.log(256))
    assert E.escape_time_gamma(3, 1, 256) == pytest.approx(255.0)


def test_bad_inputs():
    with pytest.raises(ValueError, match="L=0"):
        E.escape_time(0)
    with pytest.raises(ValueError, match="d=1"):
        E.escape_time_gamma(2, 1, 1)
    with pytest.raises(ValueError, match="gamma"):
        E.escape_time_gamma(2, -1, 256)
