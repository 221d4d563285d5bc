"""smallinit.core.stats against scipy's own tests and the t distribution's defining properties."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from smallinit.core import stats


def test_paired_matches_scipy_ttest_rel_and_t_interval():
    rng = np.random.default_rng(0)
    a = rng.normal(1.0, 0.3, size=7)
    b = a - rng.normal(0.2, 0.1, size=7)
    est = stats.paired(a, b)
    ref = sps.ttest_rel(a, b)
    assert est.p_value == pytest.approx(ref.pvalue, rel=1e-12)
    ci = ref.confidence_interval(0.95)
    assert (est.ci_low, est.ci_high) == pytest.approx((ci.low, ci.high), rel=1e-12)
    assert est.effect == pytest.approx(float(np.mean(a - b)))
    assert est.n == 7


def test_one_sided_p_halves_two_sided_in_the_direction_of_the_effect():
    x = [0.31, 0.42, 0.38, 0.35, 0.40]
    two = stats.one_sample(x, 0.25)
    up = stats.one_sample(x, 0.25, alternative="greater")
    down = stats.one_sample(x, 0.25, alternative="less")
    assert up.p_value == pytest.approx(two.p_value / 2)
    assert down.p_value == pytest.approx(1 - two.p_value / 2)


def test_coverage_of_the_interval_is_nominal():
    rng = np.random.default_rng(1)
    inside = 0
    for _ in range(2000):
        est = stats.mean_ci(rng.normal(2.0, 1.0, size=5))
        inside += est.ci_low <= 2.0 <= est.ci_high
    assert 0.93 < inside / 2000 < 0.97


def test_degenerate_cases_are_explicit():
    single = stats.one_sample([0.7], 0.5)
    assert single.effect == pytest.approx(0.2) and math.isnan(single.p_value)
    flat = stats.paired([1.0, 1.0, 1.0], [0.5, 0.5, 0.5], alternative="greater")
    assert (flat.ci_low, flat.ci_high, flat.p_value) == (0.5, 0.5, 0.0)
    assert stats.paired([1.0, 1.0], [1.5, 1.5], alternative="greater").p_value == 1.0
    with pytest.raises(ValueError, match="equal counts"):
        stats.paired([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="alternative"):
        stats.one_sample([1, 2], 0, alternative="bigger")
    with pytest.raises(ValueError, match="non-finite"):
        stats.mean_ci([1.0, float("nan")])


def test_label_reads_like_a_caption():
    est = stats.paired([0.9, 0.8, 0.85], [1.0, 0.95, 0.9])
    text = est.label()
    assert text.startswith("Δ = -0.100 [") and text.endswith("n = 3")
