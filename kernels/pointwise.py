"""Activations by name, with their derivatives, for the two-layer step (NumPy).

Multiplicities (docs/science.md §3): relu, tanh, sigmoid, softplus, gelu have p = 1 at 0 (in the
sense σ'(0) ≠ 0; relu/sigmoid/softplus/gelu are not odd), xtanh = x·tanh x has p = 2 and
x2tanh = x²·tanh x has p = 3. gelu is the exact form x·Φ(x) with Φ the normal CDF.
The integer code of each name is the switch value the CUDA kernel uses (grouped_step.cu).
"""

from __future__ import annotations

import numpy as np
from scipy.special import erf

CODES = {"relu": 0, "tanh": 1, "sigmoid": 2, "softplus": 3, "xtanh": 4, "x2tanh": 5, "gelu": 6}
NAMES = tuple(CODES)
_SQRT1_2 = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327


def check(name: str) -> str:
    if name not in CODES:
        raise ValueError(f"activation {name!r} is not allowed; use one of {', '.join(NAMES)}")
    return name


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def forward_and_derivative(name: str, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (σ(z), σ'(z)) elementwise."""
    check(name)
    if name == "relu":
        return np.maximum(z, 0), (z > 0).astype(z.dtype)
    if name == "sigmoid":
        s = _sigmoid(z)
        return s, s * (1 - s)
    if name == "softplus":
        return np.logaddexp(0, z).astype(z.dtype, copy=False), _sigmoid(z)
    if name == "gelu":
        cdf = 0.5 * (1 + erf(z * _SQRT1_2))
        pdf = _INV_SQRT_2PI * np.exp(-0.5 * z * z)
        return (z * cdf).astype(z.dtype, copy=False), (cdf + z * pdf).astype(z.dtype, copy=False)
    t = np.tanh(z)
    dt = 1 - t * t
    if name == "tanh":
        return t, dt
    if name == "xtanh":
        return z * t, t + z * dt
    return z * z * t, 2 * z * t + z * z * dt  # x2tanh


def apply(name: str, z: np.ndarray) -> np.ndarray:
    """σ(z) only."""
    return forward_and_derivative(name, z)[0]
