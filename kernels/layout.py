"""The ragged layout of the grouped two-layer step (see :mod:`batched`), shared by its NumPy
reference, its CUDA dispatcher (:mod:`gpu`) and the emulated launches (:mod:`launch`): the
step's result type and the check of the arrays' shapes. Imports nothing of this package, so
that the three can import it without a circle.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np


class GroupedStep(NamedTuple):
    """Loss (G,), gradients w.r.t. a (M,), W (M, d), b (M,) or None, and outputs f (G, n)."""

    loss: Any
    grad_a: Any
    grad_W: Any
    grad_b: Any
    f: Any


def check_layout(X, y, a, W, b, offsets, alpha):
    """(G, n) of host arrays in the ragged layout; ``ValueError`` naming the first misfit."""
    if W.ndim != 2:
        raise ValueError(f"W has shape {W.shape}; the ragged layout needs (M, d)")
    M, d = W.shape
    if a.shape != (M,) or (b is not None and b.shape != (M,)):
        raise ValueError(
            f"a {a.shape} / b {None if b is None else b.shape} must both be ({M},) to match W"
        )
    if offsets.ndim != 1 or offsets.size < 1 or offsets[0] != 0 or offsets[-1] != M:
        raise ValueError(f"offsets={offsets.tolist()} must run from 0 to M={M} (length G+1)")
    if np.any(np.diff(offsets) < 0):
        raise ValueError(f"offsets={offsets.tolist()} must be nondecreasing")
    G = offsets.size - 1
    if X.ndim == 2:
        n = X.shape[0]
        ok = X.shape[1] == d and y.shape in ((n,), (G, n))
    else:
        n = X.shape[1] if X.ndim == 3 else -1
        ok = X.ndim == 3 and X.shape[0] == G and X.shape[2] == d and y.shape == (G, n)
    if not ok:
        raise ValueError(
            f"X {X.shape} / y {y.shape} do not fit G={G}, d={d}: "
            "use X (n, d) with y (n,) or (G, n), or X (G, n, d) with y (G, n)"
        )
    if n < 1:
        raise ValueError("X has no data points (n=0); at least one is required")
    if alpha.shape not in ((), (G,)) or np.any(alpha == 0):
        raise ValueError(f"alpha of shape {alpha.shape} must be a nonzero scalar or ({G},)")
    return G, n
