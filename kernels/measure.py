"""The shared measurements (docs/science.md §2, §3, §5): one implementation, called by toy and llm.

Inputs may be NumPy, torch, JAX or CuPy arrays; results are Python floats or NumPy arrays.

- relative_distance: RD = ‖θ − θ₀‖_F / ‖θ₀‖_F over everything passed (Luo et al. 2021, §2).
- cosine_gram (from :mod:`batched`), leading_eigvec_order, mean_abs_cosine (Zhou et al. 2022).
- cluster_labels / cluster_count: greedy *leader* clustering of row orientations at a cosine
  threshold. Rows are visited in decreasing weight (row norm unless weights are given, ties
  by index); the first unassigned row becomes a leader and takes every still-unassigned row
  whose cosine with it is ≥ threshold (|cosine| with ``sign_invariant=True``). Each cluster
  thus lies in a cap of angular radius acos(threshold) around its leader, so, unlike
  single linkage, a continuum of orientations (e.g. uniform on a circle) never chains into
  one cluster. Zero rows get label −1 and are not counted. Cost O(m² d) flops, O(m) memory
  per leader block.
- condensation_score: share of the total amplitude carried by the ``top_k`` heaviest clusters.
- effective_rank (Roy & Vetterli 2007): exp(−Σ p_i ln p_i) with p_i = σ_i / Σ_j σ_j;
  top_singular_share: σ₁ / Σ_j σ_j. Both 0.0 for an all-zero matrix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.special import betainc

from .backend import to_numpy
from .batched import cosine_gram  # noqa: F401  (re-exported: one implementation)
from .cpu import row_normalize, segment_sum

DEFAULT_THRESHOLD = 0.95
DEFAULT_TOP_K = 4
_LEADER_BLOCK = 256


def _np(x: Any, name: str) -> np.ndarray:
    arr = np.asarray(to_numpy(x))
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{name} has dtype {arr.dtype}; a real numeric array is required")
    return arr.astype(np.float64, copy=False)


def _parts(x: Any, name: str) -> list[np.ndarray]:
    if isinstance(x, list | tuple):
        return [_np(p, f"{name}[{i}]") for i, p in enumerate(x)]
    return [_np(x, name)]


def relative_distance(w: Any, w0: Any) -> float:
    """RD = ‖w − w0‖_F / ‖w0‖_F; lists/tuples (e.g. [W, b]) count as one concatenated vector."""
    p, p0 = _parts(w, "w"), _parts(w0, "w0")
    if len(p) != len(p0) or any(a.shape != b.shape for a, b in zip(p, p0, strict=True)):
        raise ValueError(
            f"w shapes {[a.shape for a in p]} differ from w0 shapes {[b.shape for b in p0]}"
        )
    num = sum(float(np.sum((a - b) ** 2)) for a, b in zip(p, p0, strict=True))
    den = sum(float(np.sum(b * b)) for b in p0)
    if den == 0:
        raise ValueError("w0 has zero norm; the relative distance is undefined")
    return float(np.sqrt(num / den))


def segment_relative_distance(w: Any, w0: Any, offsets: Any) -> np.ndarray:
    """RD per network of a ragged batch: rows offsets[g]:offsets[g+1] of w (M, ...) vs w0.

    Pass ``w`` as (M, d+1) with the bias as a column (or a list [W, b]) to include biases.
    Networks with ‖θ₀‖ = 0 get NaN.
    """
    p, p0 = _parts(w, "w"), _parts(w0, "w0")
    if len(p) != len(p0) or any(a.shape != b.shape for a, b in zip(p, p0, strict=True)):
        raise ValueError("w and w0 must have the same shapes, part by part")
    off = np.asarray(to_numpy(offsets)).astype(np.int64)
    num = sum(
        segment_sum(((a - b) ** 2).reshape(a.shape[0], -1).sum(1), off)
        for a, b in zip(p, p0, strict=True)
    )
    den = sum(segment_sum((b * b).reshape(b.shape[0], -1).sum(1), off) for b in p0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, np.sqrt(num / np.where(den > 0, den, 1)), np.nan)


def leading_eigvec_order(G: Any) -> np.ndarray:
    """Indices that sort the leading eigenvector of a symmetric G (for reordered heatmaps).

    The eigenvector's sign is fixed so that its largest-magnitude entry is positive.
    """
    g = _np(G, "G")
    if g.ndim != 2 or g.shape[0] != g.shape[1]:
        raise ValueError(f"G has shape {g.shape}; a square (m, m) matrix is required")
    if g.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    vals, vecs = np.linalg.eigh(0.5 * (g + g.T))
    v = vecs[:, -1]
    if v[np.argmax(np.abs(v))] < 0:
        v = -v
    return np.argsort(v, kind="stable")


def mean_abs_cosine(W: Any) -> float:
    """Mean |cos| over distinct pairs of rows of W (m, d) (docs/science.md §3); 0.0 when m < 2."""
    g = np.abs(_np(cosine_gram(_np(W, "W")), "G"))
    m = g.shape[0]
    if m < 2:
        return 0.0
    return float((g.sum() - np.trace(g)) / (m * (m - 1)))


def _check_threshold(threshold: float) -> float:
    t = float(threshold)
    if not -1.0 < t <= 1.0:
        raise ValueError(f"threshold={threshold!r} must lie in (-1, 1]")
    return t


def _leaders(order: np.ndarray, free: np.ndarray, near) -> np.ndarray:
    """The greedy leader loop: rows in ``order``; ``near(cand)`` gives the (len(cand), m)
    boolean rows "cosine ≥ t" of the candidates (blocks of ``_LEADER_BLOCK``)."""
    labels = np.full(free.shape[0], -1, dtype=np.int64)
    free = free.copy()
    c = 0
    for start in range(0, order.size, _LEADER_BLOCK):
        cand = order[start : start + _LEADER_BLOCK]
        cand = cand[free[cand]]
        if cand.size == 0:
            continue
        S = near(cand)
        for j, k in enumerate(cand):
            if not free[k]:
                continue
            members = free & S[j]
            members[k] = True
            labels[members] = c
            free[members] = False
            c += 1
    return labels


def cluster_labels(
    W: Any,
    threshold: float = DEFAULT_THRESHOLD,
    *,
    sign_invariant: bool = False,
    weights: Any = None,
) -> np.ndarray:
    """Greedy leader-cluster labels (0, 1, ... in order of creation) of the rows of W (m, d).

    Leaders are taken in decreasing ``weights`` (default: row norms); zero rows get −1.
    """
    w = _np(W, "W")
    if w.ndim != 2:
        raise ValueError(f"W has shape {w.shape}; a 2-d (m, d) matrix is required")
    t = _check_threshold(threshold)
    m = w.shape[0]
    norms = np.linalg.norm(w, axis=1)
    wt = norms if weights is None else _np(weights, "weights")
    if wt.shape != (m,):
        raise ValueError(f"weights has shape {wt.shape}; ({m},) is required")
    N = row_normalize(w)

    def near(cand: np.ndarray) -> np.ndarray:
        S = N[cand] @ N.T
        return (np.abs(S) if sign_invariant else S) >= t

    return _leaders(np.argsort(-wt, kind="stable"), norms > 0, near)


def cluster_count(
    W: Any, threshold: float = DEFAULT_THRESHOLD, *, sign_invariant: bool = False
) -> int:
    """Number of orientation clusters of the nonzero rows of W at a cosine threshold."""
    labels = cluster_labels(W, threshold, sign_invariant=sign_invariant)
    return int(labels.max() + 1) if labels.size else 0


def condensation_score(
    W: Any,
    amplitude: Any = None,
    *,
    top_k: int = DEFAULT_TOP_K,
    threshold: float = DEFAULT_THRESHOLD,
    sign_invariant: bool = False,
) -> float:
    """Share of the total amplitude in the ``top_k`` heaviest orientation clusters, in [0, 1].

    Rows of W (m, d) are orientations; ``amplitude`` (m,) ≥ 0 defaults to the row norms (the
    toy passes |a_k|·‖w_k‖). Clusters are the leader clusters of :func:`cluster_labels`, led
    by the heaviest amplitudes. Defaults: top_k = 4 (condensation onto at most 2p ≤ 4 lines
    for p ≤ 2, docs/science.md §3; ReLU nets condense onto a few orientations), threshold = 0.95
    (cos, ≈ 18°). The score is ≈ 1 when neurons condense onto ≤ top_k orientations.

    Baseline for random isotropic rows (see :func:`condensation_baseline`): a leader's cap
    catches a fraction P_d(acos t) of the other rows, so with equal amplitudes the score is
    ≈ min(1, top_k (1 + (m−1) P)/m); in high dimension P ≈ 0 and the score is ≈ top_k/m
    (a little more with unequal amplitudes), while in d = 2 it is ≈ top_k·acos(t)/π.
    """
    w = _np(W, "W")
    if w.ndim != 2:
        raise ValueError(f"W has shape {w.shape}; a 2-d (m, d) matrix is required")
    if int(top_k) != top_k or top_k < 1:
        raise ValueError(f"top_k={top_k!r} must be a positive integer")
    amp = np.linalg.norm(w, axis=1) if amplitude is None else _np(amplitude, "amplitude")
    if amp.shape != (w.shape[0],) or np.any(amp < 0) or not np.all(np.isfinite(amp)):
        raise ValueError(
            f"amplitude of shape {amp.shape} must be finite, >= 0 and of shape ({w.shape[0]},)"
        )
    total = float(amp.sum())
    if total <= 0:
        raise ValueError("the total amplitude is zero; the condensation score is undefined")
    labels = cluster_labels(w, threshold, sign_invariant=sign_invariant, weights=amp)
    keep = labels >= 0
    mass = np.bincount(labels[keep], weights=amp[keep])
    top = np.sort(mass)[::-1][: int(top_k)]
    return float(min(1.0, top.sum() / total))


def cap_fraction(d: int, threshold: float, *, sign_invariant: bool = False) -> float:
    """P_d: fraction of the unit sphere in R^d within cosine ≥ t of a fixed point.

    P_d(θ) = ½ I_{sin²θ}((d−1)/2, ½) for θ = acos t ≤ π/2 (regularized incomplete beta),
    1 − P_d(π − θ) beyond; doubled (capped at 1) for |cos| ≥ t.
    """
    if d < 1:
        raise ValueError(f"d={d!r} must be a positive integer")
    t = _check_threshold(threshold)
    if d == 1:
        p = 0.5 if t > -1 else 1.0
    else:
        theta = float(np.arccos(t))
        if theta <= np.pi / 2:
            p = 0.5 * float(betainc((d - 1) / 2, 0.5, np.sin(theta) ** 2))
        else:
            p = 1 - 0.5 * float(betainc((d - 1) / 2, 0.5, np.sin(np.pi - theta) ** 2))
    return min(1.0, 2 * p) if sign_invariant else p


def condensation_baseline(
    m: int,
    d: int,
    *,
    top_k: int = DEFAULT_TOP_K,
    threshold: float = DEFAULT_THRESHOLD,
    sign_invariant: bool = False,
) -> float:
    """Approximate condensation score of m isotropic random rows in R^d with equal amplitude.

    ≈ min(1, top_k (1 + (m−1) P_d)/m): each of the first leaders holds itself plus the
    expected share of the others in its cap. It is accurate when (m−1)P_d ≪ 1 (high d:
    ≈ top_k/m) or ≫ 1 (low d, many rows: ≈ top_k P_d); in between it underestimates, because
    the heaviest clusters fluctuate above the mean (e.g. m = 500, d = 5: 0.015 vs ≈ 0.03).
    """
    p = cap_fraction(d, threshold, sign_invariant=sign_invariant)
    return float(min(1.0, top_k * (1 + (m - 1) * p) / m))


def _singular_values(W: Any) -> np.ndarray:
    w = _np(W, "W")
    if w.ndim < 2:
        raise ValueError(f"W has shape {w.shape}; (..., m, d) with ndim >= 2 is required")
    if 0 in w.shape[-2:]:
        return np.zeros(w.shape[:-2] + (0,))
    return np.linalg.svd(w, compute_uv=False)


def _scalar_or_array(x: np.ndarray) -> float | np.ndarray:
    return float(x) if x.ndim == 0 else x


def spectrum_measures(s: Any, xp: Any = np) -> tuple[Any, Any]:
    """(effective rank, top share) from singular values s (..., k) in decreasing order, with
    the array module ``xp`` (NumPy, or CuPy for device arrays)."""
    tot = s.sum(-1, keepdims=True)
    p = xp.where(tot > 0, s / xp.where(tot > 0, tot, 1), 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -xp.sum(xp.where(p > 0, p * xp.log(xp.where(p > 0, p, 1)), 0), axis=-1)
    total = tot[..., 0]
    erank = xp.where(total > 0, xp.exp(h), 0.0)
    top = s[..., 0] if s.shape[-1] else xp.zeros(s.shape[:-1])
    share = xp.where(total > 0, top / xp.where(total > 0, total, 1), 0.0)
    return erank, share


def effective_rank(W: Any) -> float | np.ndarray:
    """exp of the Shannon entropy of σ_i/Σσ (Roy & Vetterli 2007); batched over leading axes."""
    return _scalar_or_array(spectrum_measures(_singular_values(W))[0])


def top_singular_share(W: Any) -> float | np.ndarray:
    """σ₁ / Σ_i σ_i, batched over leading axes (0.0 for an all-zero matrix)."""
    return _scalar_or_array(spectrum_measures(_singular_values(W))[1])


def measure_all(W: Any, *, threshold: float = DEFAULT_THRESHOLD) -> dict[str, float]:
    """The per-matrix checkpoint summary llm tracks (docs/science.md §5): rank, share, clusters."""
    return {
        "effective_rank": float(effective_rank(W)),
        "top_singular_share": float(top_singular_share(W)),
        "cluster_count": float(cluster_count(W, threshold)),
        "mean_abs_cosine": mean_abs_cosine(W),
    }


__all__: Sequence[str] = (
    "relative_distance",
    "segment_relative_distance",
    "cosine_gram",
    "leading_eigvec_order",
    "mean_abs_cosine",
    "cluster_labels",
    "cluster_count",
    "condensation_score",
    "cap_fraction",
    "condensation_baseline",
    "effective_rank",
    "top_singular_share",
    "measure_all",
)
