"""Initial condensation under small initialization (docs/science.md §3; Zhou et al., NeurIPS 2022).

Multiplicity (Zhou et al. Def. 1): an activation σ has multiplicity p when
σ^{(k)}(0) = 0 for 1 ≤ k < p and σ^{(p)}(0) ≠ 0. The activations and their derived p live
in :mod:`smallinit.theory.activations` (re-exported here: :func:`multiplicity`,
:func:`leading_derivative`, :func:`multiplicity_table`). It needs σ smooth at 0; ReLU is not,
and is reported as not covered.

Early dynamics. With w_k small, σ'(w·x̃) ≈ σ^{(p)}(0) (w·x̃)^{p−1} / (p−1)!, so

    dw_k/dt ≈ −a_k σ^{(p)}(0)/(p−1)! · (1/n) Σ_i e_i (w_k·x̃_i)^{p−1} x̃_i,     e_i = f(x_i) − y_i,

a vector field homogeneous of degree p − 1 in w_k. Directions it leaves invariant
(w ∥ F(w)) attract the input weights, giving at most 2p orientations (Zhou et al. §4):

* p = 1: F does not depend on w, every neuron moves along ±Σ_i e_i x̃_i, and at the start
  (f ≈ 0) e_i ≈ −y_i: ±normalize(Σ_i y_i x̃_i) (:func:`condensed_direction_p1`).
* 1-d inputs, x̃ = (x, 1), w = (u, b): w ∥ F(w) ⟺ F_u b − F_b u = 0, i.e.
  Σ_i e_i (u x_i + b)^{p−1} (x_i b − u) = 0, homogeneous of degree p in (u, b). With
  t = u/b this is the degree-p polynomial P(t) = Σ_i e_i (t x_i + 1)^{p−1} (x_i − t)
  (:func:`direction_polynomial`); if its degree drops, b = 0 is a root "at infinity".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import sympy as sp

from .activations import (  # noqa: F401  (the registry, re-exported for old callers)
    ACTIVATIONS,
    FORMULAS,
    activation,
    leading_derivative,
    multiplicity,
    multiplicity_table,
    x,
)
from .exact import ORDER_LIMIT, to_exact

t = sp.Symbol("t", real=True)


def _with_bias(X: np.ndarray, bias: bool) -> np.ndarray:
    X = np.asarray(X, dtype=float)
    if X.ndim == 1:
        X = X[:, None]
    return np.hstack([X, np.ones((X.shape[0], 1))]) if bias else X


def condensed_direction_p1(X: Any, y: Any, residual: Any = None, bias: bool = True):
    """Unit vector of Σ_i y_i x̃_i (or −Σ_i e_i x̃_i given ``residual`` e): the p = 1
    orientation. Neurons align with ± this vector (docs/science.md §3; Zhou et al. §4.1)."""
    Xt = _with_bias(X, bias)
    weights = (
        -np.asarray(residual, dtype=float) if residual is not None else np.asarray(y, dtype=float)
    )
    if weights.shape != (Xt.shape[0],):
        raise ValueError(f"y/residual has shape {weights.shape}; expected ({Xt.shape[0]},)")
    v = weights @ Xt
    norm = np.linalg.norm(v)
    if norm == 0:
        raise ValueError("Σ_i y_i x̃_i is zero: no p = 1 direction for these data")
    return v / norm


def direction_polynomial(xs: Sequence[Any], es: Sequence[Any], p: int) -> sp.Poly:
    """P(t) = Σ_i e_i (t x_i + 1)^{p−1} (x_i − t), exact for exact data (1-d, docs/science.md §3).

    Its real roots t give the invariant orientations w ∝ (t, 1) of the early flow; ``es``
    is the residual (at the start −y; its sign and scale do not move the roots).
    """
    if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= ORDER_LIMIT:
        raise ValueError(f"p={p!r} is not allowed; it must be an integer in 1..{ORDER_LIMIT}")
    xs, es = list(xs), list(es)
    if len(xs) != len(es) or not xs:
        raise ValueError(f"x has {len(xs)} points and e has {len(es)}; they must match (> 0)")
    xs = [to_exact(v, "x") for v in xs]
    es = [to_exact(v, "e") for v in es]
    expr = sum(e * (t * xi + 1) ** (p - 1) * (xi - t) for xi, e in zip(xs, es, strict=True))
    return sp.Poly(sp.expand(expr), t)


def candidate_directions_1d(xs: Sequence[Any], es: Sequence[Any], p: int) -> np.ndarray:
    """Unit vectors (u, b), b ≥ 0, of the invariant orientations: one per real root of
    :func:`direction_polynomial`, plus (1, 0) when the degree drops below p."""
    poly = direction_polynomial(xs, es, p)
    if poly.is_zero:
        raise ValueError("the direction polynomial is identically zero for these data")
    dirs = []
    for root in sp.real_roots(poly) if poly.degree() > 0 else []:
        v = np.array([float(root), 1.0])
        dirs.append(v / np.linalg.norm(v))
    if poly.degree() < p:
        dirs.append(np.array([1.0, 0.0]))
    out = np.array(dirs).reshape(-1, 2)
    return np.unique(np.round(out, 12), axis=0)
