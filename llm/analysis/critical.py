"""Critical initialization (fig 9): where small init stops helping and starts costing.

docs/science.md §4: from scale ε an L-homogeneous model first sits on a plateau of length
~ ln(1/ε) (L = 2) or ~ ε^{2−L} (L > 2); with ε = d^{−γ} the plateau grows with γ — the
optimization *cost* of small init. Its *benefit* (docs/science.md §5) is better reasoning. The
critical γ is where the two meet. Definitions used here, all on logged training curves:

* :func:`plateau_steps` — steps until the training loss first reaches a threshold θ,
  linearly interpolated between the two log steps around the crossing (NaN if never);
* :func:`knee_gamma` — the smallest γ whose reasoning score is within ``tol`` of the
  best over the grid: beyond it more small init buys no reasoning (within noise). The
  score of a run is its :func:`excess_accuracy` (accuracy above the prompt-blind
  baseline, pooled over tasks and levels) and ``tol`` one standard error of the best;
* :func:`best_gamma` — the loss-optimal γ of one seed: the vertex of the parabola through
  the grid minimum of the held-out loss and its two neighbours (the minimum itself at an
  edge of the grid);
* :func:`escape_fit` — theory's escape time T(γ) = escape_time_gamma(L, γ, d, c)
  (``smallinit.theory.escape``) with the rate c fitted by least squares to measured
  plateau lengths T_meas ≈ a + b·T(γ) (one offset, one scale b ≥ 0; a negative
  least-squares slope means the data contradict the predicted growth, and the fit falls
  back to b = 0, R² = 0).
"""

from __future__ import annotations

import math

import numpy as np

from smallinit.llm.analysis.reasoning import cells
from smallinit.llm.data.synthetic import CATEGORIES, REASONING
from smallinit.theory.escape import escape_time_gamma


def plateau_steps(steps, loss, threshold: float) -> float:
    """Interpolated step at which the loss first reaches ``threshold`` (NaN if never)."""
    steps = np.asarray(steps, dtype=float)
    loss = np.asarray(loss, dtype=float)
    hit = np.flatnonzero(loss <= threshold)
    if not hit.size:
        return float("nan")
    i = int(hit[0])
    if i == 0:
        return float(steps[0])
    l0, l1 = loss[i - 1], loss[i]
    return float(steps[i - 1] + (steps[i] - steps[i - 1]) * (l0 - threshold) / (l0 - l1))


def knee_gamma(gammas, acc, tol: float) -> float:
    """Smallest γ with accuracy ≥ max(acc) − tol (the grid sorted by γ first)."""
    order = np.argsort(gammas)
    g = np.asarray(gammas, dtype=float)[order]
    a = np.asarray(acc, dtype=float)[order]
    best = np.nanmax(a)
    return float(g[np.flatnonzero(a >= best - tol - 1e-12)[0]])


def excess_accuracy(summary: dict) -> tuple[float, float]:
    """Reasoning accuracy above what a prompt-blind model scores, pooled over every scored
    (task, level) cell with its item count as weight: Σ n_c (acc_c − b_c) / Σ n_c, b_c the
    cell's baseline max(chance, majority) (:mod:`smallinit.llm.analysis.reasoning`), and
    its binomial standard error √(Σ n_c acc_c (1 − acc_c)) / Σ n_c. 0 means no reasoning
    the answer distribution alone does not explain; NaN for a run without cells."""
    got = cells(summary)
    n = sum(c.n for c in got)
    if n == 0:
        return float("nan"), float("nan")
    excess = sum(c.n * (c.acc - c.baseline) for c in got) / n
    se = math.sqrt(sum(c.n * c.acc * (1 - c.acc) for c in got)) / n
    return float(excess), float(se)


def escape_fit(gammas, measured, d: int, L: float) -> dict:
    """Fit T_meas ≈ a + b·T_L(γ), T_L = ``escape_time_gamma(L, γ, d)``; returns a, b, R²
    and the prediction function (NaN measurements are left out)."""
    g = np.asarray(gammas, dtype=float)
    y = np.asarray(measured, dtype=float)
    ok = np.isfinite(y)
    x = np.array([escape_time_gamma(L, gi, d) for gi in g])
    A = np.stack([np.ones(ok.sum()), x[ok]], axis=1)
    (a, b), *_ = np.linalg.lstsq(A, y[ok], rcond=None)
    if b < 0:  # theory allows no shorter plateau at smaller init: best scale-free fit
        a, b = float(y[ok].mean()), 0.0
    pred = a + b * x[ok]
    ss_res = float(np.sum((y[ok] - pred) ** 2))
    ss_tot = float(np.sum((y[ok] - y[ok].mean()) ** 2))
    r2 = 1 - ss_res / ss_tot if ss_tot > 0 else float("nan")

    def predict(gs):
        return a + b * np.array([escape_time_gamma(L, gi, d) for gi in np.asarray(gs, float)])

    return {"a": float(a), "b": float(b), "r2": r2, "predict": predict, "L": L}


def reasoning_answer_loss(arrays: dict) -> tuple[float, float]:
    """Mean held-out loss on the *answer* tokens of reasoning items (arith, anchor, logic)
    and its standard error over tokens — a continuous companion of greedy accuracy, which
    sits near chance for tiny models. ``arrays``: an ``llm-train`` run's per-token arrays."""
    tags = np.asarray(arrays["tags"])
    sel = (np.asarray(arrays["answer"]) == 1) & np.isin(
        tags, [CATEGORIES.index(c) for c in REASONING]
    )
    loss = np.asarray(arrays["losses"], dtype=float)[sel]
    if loss.size == 0:
        return float("nan"), float("nan")
    return float(loss.mean()), float(loss.std(ddof=1) / math.sqrt(loss.size))


THRESHOLD_FACTOR = 1.2


def loss_threshold(final_losses, factor: float = THRESHOLD_FACTOR) -> float:
    """θ for :func:`plateau_steps`: ``factor`` × the median final training loss of a sweep —
    a level the typical run reaches well before its end, so the crossing time measures
    the early phase (plateau plus first descent), not the tail."""
    return float(factor * np.nanmedian(np.asarray(final_losses, dtype=float)))


def best_gamma(gammas, losses) -> float:
    """The loss-optimal γ of a grid (fig 7's rule, docs/science.md §11): the vertex of the
    parabola through the grid minimum and its two neighbours; the grid minimum itself when
    it lies at an edge of the grid or the parabola opens downward. NaN losses are skipped
    when finding the minimum; an all-NaN curve gives NaN."""
    order = np.argsort(np.asarray(gammas, dtype=float))
    g = np.asarray(gammas, dtype=float)[order]
    y = np.asarray(losses, dtype=float)[order]
    if not np.isfinite(y).any():
        return float("nan")
    i = int(np.nanargmin(y))
    if i == 0 or i == len(g) - 1:
        return float(g[i])
    a, b, _ = np.polyfit(g[i - 1 : i + 2], y[i - 1 : i + 2], 2)
    return float(-b / (2 * a)) if a > 0 else float(g[i])
