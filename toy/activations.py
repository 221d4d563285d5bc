"""Activation functions by name, in JAX, with their multiplicity (SPEC §3).

The multiplicity p of σ is the order of the first non-vanishing derivative at 0 beyond the
value itself: σ^{(k)}(0) = 0 for 1 ≤ k < p and σ^{(p)}(0) ≠ 0 (Zhou et al., NeurIPS 2022).
tanh, sigmoid, softplus and gelu have p = 1; x·tanh x has p = 2; x²·tanh x has p = 3.
ReLU is not differentiable at 0 and has no multiplicity in this sense (``None``).

Derivatives are taken by forward-mode autodiff (``jax.jvp`` with a unit tangent), which for
an elementwise function gives σ' (and, nested, σ'') elementwise.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

ACTIVATIONS = {
    "relu": jax.nn.relu,
    "tanh": jnp.tanh,
    "sigmoid": jax.nn.sigmoid,
    "softplus": jax.nn.softplus,
    "xtanh": lambda z: z * jnp.tanh(z),
    "x2tanh": lambda z: z * z * jnp.tanh(z),
    "gelu": lambda z: jax.nn.gelu(z, approximate=False),
}

MULTIPLICITY = {
    "relu": None,
    "tanh": 1,
    "sigmoid": 1,
    "softplus": 1,
    "gelu": 1,
    "xtanh": 2,
    "x2tanh": 3,
}


def check_activation(name: str) -> str:
    """Return ``name`` if it is a known activation, else raise ValueError listing them."""
    if name not in ACTIVATIONS:
        raise ValueError(
            f"activation {name!r} is not allowed; choose one of {', '.join(ACTIVATIONS)}"
        )
    return name


def activation(name: str):
    """The elementwise function σ for ``name``."""
    return ACTIVATIONS[check_activation(name)]


def derivative(fn):
    """σ' of an elementwise ``fn`` (forward mode, unit tangent)."""

    def d(z):
        return jax.jvp(fn, (z,), (jnp.ones_like(z),))[1]

    return d
