"""Theory's activation registry is the one definition: multiplicity derived from each
expression, and every numeric copy (kernels' NumPy forms, the toy's JAX forms) equal to the
expression lambdified, value and first derivative, on a float64 grid (docs/science.md §3)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import sympy as sp

from smallinit.kernels import pointwise as kernel_acts
from smallinit.theory import activations as T

# 2000 points on [−8, 8], none at 0 (ReLU's derivative is a convention there), plus small
# and large magnitudes where cancellations would show
GRID = np.concatenate([np.linspace(-8.0, 8.0, 2000), [-30.0, -1e-3, 1e-6, 1e-3, 30.0]])
TOL = 1e-12
needs_jax = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs jax")


def reference(name: str):
    f, df = T.numeric(name)
    return np.broadcast_to(f(GRID), GRID.shape), np.broadcast_to(df(GRID), GRID.shape)


def close(a, b) -> None:
    np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL)


@pytest.mark.parametrize(
    "name,p",
    [
        ("tanh", 1),
        ("sigmoid", 1),
        ("softplus", 1),
        ("gelu", 1),
        ("silu", 1),
        ("xtanh", 2),
        ("x2tanh", 3),
    ],
)
def test_multiplicity_is_derived_from_the_expression(name, p):
    assert T.multiplicity(name) == p
    expr = T.REGISTRY[name].expr
    derivs = [sp.limit(sp.diff(expr, T.x, k), T.x, 0) for k in range(1, p + 1)]
    assert all(d == 0 for d in derivs[:-1]) and derivs[-1] != 0
    assert T.multiplicities()[name] == p


def test_relu_is_the_special_case():
    assert T.multiplicities()["relu"] is None
    with pytest.raises(ValueError, match="not covered"):
        T.multiplicity("relu")
    with pytest.raises(ValueError, match="not known"):
        T.check_name("swish")


def test_kernels_implement_theory_names():
    assert set(kernel_acts.NAMES) <= set(T.NAMES)
    assert set(T.NAMES) - set(kernel_acts.NAMES) == {"silu"}  # theory only, so far


@pytest.mark.parametrize("name", kernel_acts.NAMES)
def test_kernels_forms_equal_theory(name):
    value, slope = kernel_acts.forward_and_derivative(name, GRID.copy())
    ref_value, ref_slope = reference(name)
    close(value, ref_value)
    close(slope, ref_slope)
    close(kernel_acts.apply(name, GRID.copy()), ref_value)


def test_a_drifted_copy_would_fail():
    """The comparison is sharp enough to see a copy that drifts (tanh-approximate gelu)."""
    ref_value, _ = reference("gelu")
    approx = 0.5 * GRID * (1 + np.tanh(np.sqrt(2 / np.pi) * (GRID + 0.044715 * GRID**3)))
    with pytest.raises(AssertionError):
        close(approx, ref_value)


@needs_jax
def test_toy_implements_the_kernels_names():
    from smallinit.toy import jax_activations as toy_acts

    assert set(toy_acts.ACTIVATIONS) == set(kernel_acts.NAMES)
    assert set(toy_acts.ACTIVATIONS) <= set(T.NAMES)
    for name in toy_acts.ACTIVATIONS:  # multiplicity from theory, none hard-coded in toy
        assert toy_acts.multiplicity(name) == T.multiplicities()[name]


@needs_jax
@pytest.mark.parametrize("name", kernel_acts.NAMES)  # = the toy's names (test above)
def test_toy_forms_equal_theory(name):
    import jax.numpy as jnp

    from smallinit.toy import jax_activations as toy_acts
    from smallinit.toy.jaxsetup import enable_x64

    enable_x64()
    fn = toy_acts.activation(name)
    z = jnp.asarray(GRID, dtype=jnp.float64)
    ref_value, ref_slope = reference(name)
    close(np.asarray(fn(z)), ref_value)
    close(np.asarray(toy_acts.derivative(fn)(z)), ref_slope)
