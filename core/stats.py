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
collapses to the point and p is 0 if the effect is in the tested direction, else 1 (the
reading of docs/science.md §13; §13.2 decides such values by the exact sign test below).

The tests of docs/science.md §13.2, each a function of per-seed values:

* :func:`holm`, :func:`bh` — adjusted p-values over a family (Holm 1979, step-down
  family-wise; Benjamini & Hochberg 1995, false discovery rate);
* :func:`one_sided` — the deciding one-sided test of a mean against μ₀: Student's t, or the
  exact sign test when every value is identical (sd 0, where t is undefined), with its
  one-sided bound (:func:`t_bound`, :func:`sign_bound`);
* :func:`sign_test` — exact binomial sign test (Dixon & Mood 1946);
* :func:`permutation_paired` — exact sign-flip permutation test of a mean (Fisher 1935,
  Pitman 1937), exhaustive up to 16 values, Monte-Carlo with a fixed seed beyond;
* :func:`tost` — two one-sided tests of equivalence within ±Δ (Schuirmann 1987);
* :func:`t_power`, :func:`t_sample_size` — power and seed count of the one-sided
  one-sample (paired) t test, from the noncentral t distribution (Cohen 1988, ch. 2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal, cast

import numpy as np
from scipy import stats as sps

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

        p = (
            "p = nan"
            if not math.isfinite(self.p_value)
            else ("p < 1e-4" if self.p_value < 1e-4 else f"p = {self.p_value:.2g}")
        )
        return f"{name} = {f(self.effect)} [{f(self.ci_low)}, {f(self.ci_high)}], {p}, n = {self.n}"


def _values(x: Sequence[float] | np.ndarray, what: str) -> np.ndarray:
    arr = np.asarray(x, dtype=float).ravel()
    if arr.size == 0:
        raise ValueError(f"{what}: no values (need at least one seed)")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what}: non-finite value in {arr.tolist()}")
    return arr


#: scipy's name of a test's alternative (the functions check a given one, then pass it on)
Alternative = Literal["two-sided", "greater", "less"]


def _check_alternative(alternative: str) -> None:
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative {alternative!r}: use two-sided, greater or less")


def _t_estimate(d: np.ndarray, alternative: str, level: float) -> Estimate:
    """t-interval and t-test of mean(d) = 0."""
    _check_alternative(alternative)
    n = int(d.size)
    mean = float(d.mean())
    if n < 2:
        return Estimate(mean, math.nan, math.nan, math.nan, n)
    sd = float(d.std(ddof=1))
    if sd == 0.0:
        in_direction = {"two-sided": mean != 0.0, "greater": mean > 0.0, "less": mean < 0.0}[
            alternative
        ]
        return Estimate(mean, mean, mean, 0.0 if in_direction else 1.0, n)
    half = float(sps.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    p = float(sps.ttest_1samp(d, 0.0, alternative=cast(Alternative, alternative)).pvalue)
    return Estimate(mean, mean - half, mean + half, p, n)


def paired(
    a: Sequence[float], b: Sequence[float], *, alternative: str = "two-sided", level: float = LEVEL
) -> Estimate:
    """Effect mean(a − b) over paired seeds, its t CI and the paired t-test's p-value
    (``scipy.stats.ttest_rel`` is the same test)."""
    xa, xb = _values(a, "paired a"), _values(b, "paired b")
    if xa.shape != xb.shape:
        raise ValueError(f"paired: {xa.size} values against {xb.size}; pairs need equal counts")
    return _t_estimate(xa - xb, alternative, level)


def one_sample(
    x: Sequence[float], reference: float, *, alternative: str = "two-sided", level: float = LEVEL
) -> Estimate:
    """Effect mean(x) − reference, its t CI and the one-sample t-test's p-value."""
    return _t_estimate(_values(x, "one_sample") - float(reference), alternative, level)


def mean_ci(x: Sequence[float], *, level: float = LEVEL) -> Estimate:
    """The mean of ``x`` with its t CI (p-value against 0, two-sided)."""
    return one_sample(x, 0.0, level=level)


# ----------------------------------------------------------------------------- §13.2
ALTERNATIVES = ("greater", "less")
EXACT_MAX = 16  # permutation_paired: exhaustive up to this many values
DRAWS = 100_000  # permutation_paired: Monte-Carlo draws beyond EXACT_MAX


def _p_vector(p: Sequence[float], what: str) -> np.ndarray:
    arr = np.asarray(p, dtype=float).ravel()
    if np.any(~np.isfinite(arr)) or np.any((arr < 0) | (arr > 1)):
        raise ValueError(f"{what}: p-values must lie in [0, 1], got {arr.tolist()}")
    return arr


def holm(p: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (Holm 1979), in the input order: with p sorted
    p_(1) ≤ … ≤ p_(m), p̃_(i) = max_{j ≤ i} min(1, (m − j + 1) p_(j)). Rejecting p̃ < α
    controls the family-wise error rate at α under any dependence."""
    arr = _p_vector(p, "holm")
    m = arr.size
    order = np.argsort(arr, kind="stable")
    steps = np.minimum(1.0, (m - np.arange(m)) * arr[order])
    out = np.empty(m)
    out[order] = np.maximum.accumulate(steps)
    return out


def bh(p: Sequence[float]) -> np.ndarray:
    """Benjamini–Hochberg q-values (Benjamini & Hochberg 1995), in the input order: with p
    sorted, q_(i) = min_{j ≥ i} min(1, m p_(j) / j). Rejecting q < α controls the false
    discovery rate at α for independent (or positively dependent) tests."""
    arr = _p_vector(p, "bh")
    m = arr.size
    order = np.argsort(arr, kind="stable")
    steps = np.minimum(1.0, m * arr[order] / np.arange(1, m + 1))
    out = np.empty(m)
    out[order] = np.minimum.accumulate(steps[::-1])[::-1]
    return out


def _one_sided_alternative(alternative: str) -> None:
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative {alternative!r}: a one-sided test is greater or less")


def t_bound(x: Sequence[float] | np.ndarray, alternative: str, level: float = LEVEL) -> float:
    """The one-sided Student-t confidence bound for mean(x) at ``level``: the lower bound
    mean − t_{level, n−1}·sd/√n for ``greater``, the upper mean + … for ``less`` (the bound
    that excludes μ₀ exactly when the one-sided t test rejects at 1 − level). NaN below 2
    values."""
    _one_sided_alternative(alternative)
    arr = _values(x, "t_bound")
    if arr.size < 2:
        return math.nan
    half = float(sps.t.ppf(level, arr.size - 1)) * float(arr.std(ddof=1)) / math.sqrt(arr.size)
    return float(arr.mean()) + (-half if alternative == "greater" else half)


def sign_test(
    x: Sequence[float] | np.ndarray, reference: float = 0.0, *, alternative: str = "greater"
) -> float:
    """Exact sign test of the median against ``reference`` (Dixon & Mood 1946): with k the
    number of values strictly on the ``alternative`` side, p = P(B ≥ k), B ~ Bin(n, 1/2).
    Values equal to the reference count against the alternative (a conservative
    reading: they stay in n)."""
    _one_sided_alternative(alternative)
    arr = _values(x, "sign_test") - float(reference)
    k = int(np.sum(arr > 0) if alternative == "greater" else np.sum(arr < 0))
    return float(sps.binom.sf(k - 1, arr.size, 0.5))


def sign_bound(x: Sequence[float] | np.ndarray, alternative: str, level: float = LEVEL) -> float:
    """The sign test's one-sided confidence bound for the median at ``level``: for
    ``greater`` the k-th smallest value with k the largest integer such that
    P(B ≤ k − 1) ≤ 1 − level, B ~ Bin(n, 1/2) (then P(x_(k) ≤ median) ≥ level); for
    ``less`` the k-th largest. −∞ (+∞) when no k qualifies (n too small for the level)."""
    _one_sided_alternative(alternative)
    arr = np.sort(_values(x, "sign_bound"))
    n = arr.size
    ks = [k for k in range(1, n + 1) if sps.binom.cdf(k - 1, n, 0.5) <= 1 - level]
    if not ks:
        return -math.inf if alternative == "greater" else math.inf
    k = max(ks)
    return float(arr[k - 1] if alternative == "greater" else arr[n - k])


@dataclass(frozen=True)
class OneSided:
    """A deciding one-sided test of mean(x) against μ₀ (docs/science.md §13.2, 4): ``test``
    is ``t``, ``sign`` (every value identical) or ``none`` (fewer than 2 values)."""

    p_value: float
    test: str
    n: int


def _degenerate(arr: np.ndarray) -> bool:
    return bool(np.all(arr == arr[0]))


def one_sided(
    x: Sequence[float], reference: float = 0.0, *, alternative: str = "greater"
) -> OneSided:
    """§13.2's deciding test: the one-sided one-sample t test of mean(x) against
    ``reference``; when every value is identical (sd 0) the exact sign test; below 2 values
    no test (p NaN)."""
    _one_sided_alternative(alternative)
    arr = _values(x, "one_sided")
    if arr.size < 2:
        return OneSided(math.nan, "none", int(arr.size))
    if _degenerate(arr):
        return OneSided(sign_test(arr, reference, alternative=alternative), "sign", arr.size)
    p = float(
        sps.ttest_1samp(arr, float(reference), alternative=cast(Alternative, alternative)).pvalue
    )
    return OneSided(p, "t", int(arr.size))


def bound(x: Sequence[float], alternative: str, level: float = LEVEL) -> float:
    """The one-sided bound of :func:`one_sided`'s test: :func:`sign_bound` when every value
    is identical, else :func:`t_bound`."""
    arr = _values(x, "bound")
    if arr.size >= 2 and _degenerate(arr):
        return sign_bound(arr, alternative, level)
    return t_bound(arr, alternative, level)


def permutation_paired(
    d: Sequence[float],
    reference: float = 0.0,
    *,
    alternative: str = "greater",
    draws: int = DRAWS,
    seed: int = 0,
) -> float:
    """Exact sign-flip permutation test of mean(d) against ``reference`` (Fisher 1935;
    Pitman 1937): under H₀ each centred value's sign is + or − with probability 1/2, so
    p = #{s : Σ s_i d_i ≥ Σ d_i} / 2^n over every sign vector s (n ≤ 16, the identity
    included), or (1 + #{draws at least as extreme}) / (1 + draws) from ``draws``
    Monte-Carlo sign vectors with generator ``seed`` beyond. ``less`` mirrors ``greater``."""
    _one_sided_alternative(alternative)
    arr = _values(d, "permutation_paired") - float(reference)
    if alternative == "less":
        arr = -arr
    n = arr.size
    observed = float(arr.sum())
    tol = 1e-12 * max(1.0, float(np.abs(arr).sum()))  # float ties count as ties
    if n <= EXACT_MAX:
        signs = 1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)
        return float(np.mean(signs @ arr >= observed - tol))
    rng = np.random.default_rng(seed)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(draws, n))
    return float((1 + np.sum(signs @ arr >= observed - tol)) / (1 + draws))


def tost(x: Sequence[float], margin: float, reference: float = 0.0) -> float:
    """Two one-sided tests (Schuirmann 1987) that mean(x) lies within reference ± margin:
    max of :func:`one_sided`'s p for mean > reference − margin and for mean < reference +
    margin (t tests, or sign tests when sd is 0). NaN below 2 values."""
    if not margin > 0:
        raise ValueError(f"tost margin {margin}: must be positive")
    low = one_sided(x, reference - margin, alternative="greater").p_value
    high = one_sided(x, reference + margin, alternative="less").p_value
    return max(low, high)


def t_power(n: int, effect: float, sd: float, alpha: float = 0.05) -> float:
    """Power of the one-sided one-sample (paired) t test at level ``alpha`` with ``n``
    values, true mean ``effect`` (in the tested direction) and per-value sd ``sd``:
    1 − F(t_{1−α, n−1}; n − 1, effect·√n/sd), F the noncentral t CDF (Cohen 1988, ch. 2)."""
    if n < 2:
        raise ValueError(f"t_power n {n}: the t test needs at least 2 values")
    if not sd > 0 or not 0 < alpha < 1:
        raise ValueError(f"t_power sd {sd}, alpha {alpha}: need sd > 0 and 0 < alpha < 1")
    df = n - 1
    crit = float(sps.t.ppf(1 - alpha, df))
    return float(sps.nct.sf(crit, df, effect * math.sqrt(n) / sd))


def t_sample_size(
    effect: float, sd: float, alpha: float = 0.05, power: float = 0.9, *, most: int = 100_000
) -> int:
    """The smallest n ≥ 2 at which :func:`t_power` reaches ``power`` (power grows with n
    for a positive effect)."""
    if not effect > 0:
        raise ValueError(f"t_sample_size effect {effect}: must be positive")
    if not 0 < power < 1:
        raise ValueError(f"t_sample_size power {power}: must lie in (0, 1)")
    low, high = 2, 2
    while t_power(high, effect, sd, alpha) < power:
        low, high = high + 1, high * 2
        if high > most:
            raise ValueError(
                f"t_sample_size: more than {most} values needed for effect {effect} at sd {sd}"
            )
    while low < high:  # smallest n in [low, high] with enough power
        mid = (low + high) // 2
        if t_power(mid, effect, sd, alpha) >= power:
            high = mid
        else:
            low = mid + 1
    return high
