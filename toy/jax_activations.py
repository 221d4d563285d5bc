"""Activation functions by name, in JAX (docs/science.md §3).

The names and what each activation is come from theory's registry
(:mod:`smallinit.theory.activations`): this module only gives a JAX form of each registered
activation the toy runs (``tests/theory/test_theory_activations.py`` checks every form, value and
derivative, against theory's expression). The multiplicity p of an activation is derived in
theory from its expression (:func:`multiplicity`); ReLU has none (None here).

Derivatives are taken by forward-mode autodiff (``jax.jvp`` with a unit tangent), which for
an elementwise function gives σ' (and, nested, σ'') elementwise.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from smallinit.theory import activations as _theory

#: JAX forms of the registered activations the toy runs (theory's names).
ACTIVATIONS = {
    "relu": jax.nn.relu,
    "tanh": jnp.tanh,
    "sigmoid": jax.nn.sigmoid,
    "softplus": jax.nn.softplus,
    "xtanh": lambda z: z * jnp.tanh(z),
    "x2tanh": lambda z: z * z * jnp.tanh(z),
    "gelu": lambda z: jax.nn.gelu(z, approximate=False),
}


def check_activation(name: str) -> str:
    """Return ``name`` if the toy runs it, else raise ValueError listing them."""
    if name not in ACTIVATIONS:
        raise ValueError(
            f"activation {name!r} is not allowed; choose one of {', '.join(ACTIVATIONS)}"
        )
    return name


def multiplicity(name: str) -> int | None:
    """p of ``name`` as theory derives it (None where theory finds none: ReLU)."""
    check_activation(name)
    return _theory.multiplicities()[name]


def activation(name: str):
    """The elementwise function σ for ``name``."""
    return ACTIVATIONS[check_activation(name)]


def derivative(fn):
    """σ' of an elementwise ``fn`` (forward mode, unit tangent)."""

    def d(z):
        return jax.jvp(fn, (z,), (jnp.ones_like(z),))[1]

    return d
