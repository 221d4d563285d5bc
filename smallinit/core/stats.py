"""Statistics over seeds: the one place the study turns per-seed numbers into a claim.

Every comparison in the figures, the compare table and ``smallinit claims`` is an
:class:`Estimate`: the mean effect over n seeds, its 95% confidence interval and a p-value,
computed with Student's t (scipy.stats). Two designs (docs/science.md §11):

* :func:`paired` — the same seeds under two settings (γ = 1 against γ = 0.5 with seed s
  drawing both runs' data order): effect = mean(a − b); t-test on the per-seed differences
  (``scipy.stats.ttest_rel``), CI mean ± t_{n−1, 0.975} · sd/√n.
* :func:`one_sample` — per-seed values against a fixed reference (accuracy against the
  task's chance): effect = mean(x) − μ₀, ``scipy.stats.ttest_1samp``.

Both take ``alternative`` as scipy does (``two-sided``, ``greater``, ``less``); the CI is
always the two-sided one. With n < 2 there is no spread: the effect is reported, the CI and
p are NaN. When every difference is identical (sd = 0) the t statistic is undefined; the CI
collapses to the point and p is 0 if the effect is in the tested direction, else 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

LEVEL = 0.95


@dataclass(frozen=True)
class Estimate:
    """A mean effect over ``n`` seeds with its confidence interval and p-value."""

    effect: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)

    def label(self, name: str = "Δ", digits: int = 3) -> str:
        """``Δ = -0.051 [-0.070, -0.032], p = 0.003, n = 5`` (for titles and captions)."""
        def f(x: float) -> str:
            return "nan" if not math.isfinite(x) else f"{x:.{digits}f}"
        p = "p = nan" if not math.isfinite(self.p_value) else (
            "p < 1e-4" if self.p_value < 1e-4 else f"p = {self.p_value:.2g}")
        return (f"{name} = {f(self.effect)} [{f(self.ci_low)}, {f(self.ci_high)}], "
                f"{p}, n = {self.n}")


def _values(x: Sequence[float], what: str) -> np.ndarray:
    arr = np.asarray(x, dtype=float).ravel()
    if arr.size == 0:
        raise ValueError(f"{what}: no values (need at least one seed)")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what}: non-finite value in {arr.tolist()}")
    return arr


def _check_alternative(alternative: str) -> None:
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative {alternative!r}: use two-sided, greater or less")


def _t_estimate(d: np.ndarray, alternative: str, level: float) -> Estimate:
    """t-interval and t-test of mean(d) = 0."""
    from scipy import stats

    _check_alternative(alternative)
    n = int(d.size)
    mean = float(d.mean())
    if n < 2:
        return Estimate(mean, math.nan, math.nan, math.nan, n)
    sd = float(d.std(ddof=1))
    if sd == 0.0:
        in_direction = {"two-sided": mean != 0.0, "greater": mean > 0.0,
                        "less": mean < 0.0}[alternative]
        return Estimate(mean, mean, mean, 0.0 if in_direction else 1.0, n)
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    p = float(stats.ttest_1samp(d, 0.0, alternative=alternative).pvalue)
    return Estimate(mean, mean - half, mean + half, p, n)


def paired(a: Sequence[float], b: Sequence[float], *, alternative: str = "two-sided",
           level: float = LEVEL) -> Estimate:
    """Effect mean(a − b) over paired seeds, its t CI and the paired t-test's p-value
    (``scipy.stats.ttest_rel`` is the same test)."""
    xa, xb = _values(a, "paired a"), _values(b, "paired b")
    if xa.shape != xb.shape:
        raise ValueError(f"paired: {xa.size} values against {xb.size}; pairs need equal counts")
    return _t_estimate(xa - xb, alternative, level)


def one_sample(x: Sequence[float], reference: float, *, alternative: str = "two-sided",
               level: float = LEVEL) -> Estimate:
    """Effect mean(x) − reference, its t CI and the one-sample t-test's p-value."""
    return _t_estimate(_values(x, "one_sample") - float(reference), alternative, level)


def mean_ci(x: Sequence[float], *, level: float = LEVEL) -> Estimate:
    """The mean of ``x`` with its t CI (p-value against 0, two-sided)."""
    return one_sample(x, 0.0, level=level)
