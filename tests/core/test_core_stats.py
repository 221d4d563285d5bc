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


# ----------------------------------------------------------------------------- §13.2
# statsmodels is not in requirements.lock: Holm is checked against its step-down
# definition and hand-derived values, BH against scipy's false_discovery_control, the
# power against simulation and G*Power's published value.
def _holm_by_definition(p, alpha):
    """Holm's procedure itself: reject sorted p_(i) while p_(i) ≤ α / (m − i + 1)."""
    order = np.argsort(p)
    reject = np.zeros(len(p), bool)
    for i, j in enumerate(order):
        if p[j] > alpha / (len(p) - i):
            break
        reject[j] = True
    return reject


def test_holm_matches_hand_values_and_its_step_down_definition():
    p = [0.03, 0.01, 0.04, 0.005]
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04; running max
    assert stats.holm(p) == pytest.approx([0.06, 0.03, 0.06, 0.02])
    rng = np.random.default_rng(3)
    for _ in range(200):
        q = rng.uniform(0, 0.1, size=rng.integers(1, 12))
        adjusted = stats.holm(q)
        for alpha in (0.01, 0.05):
            assert np.array_equal(adjusted <= alpha, _holm_by_definition(q, alpha))
    with pytest.raises(ValueError, match="p-values must lie in"):
        stats.holm([0.1, 1.2])


def test_bh_matches_scipy_false_discovery_control():
    rng = np.random.default_rng(4)
    for _ in range(50):
        q = rng.uniform(0, 0.2, size=rng.integers(1, 15))
        assert stats.bh(q) == pytest.approx(sps.false_discovery_control(q, method="bh"), rel=1e-12)


def test_t_bound_is_scipys_one_sided_interval():
    x = [0.021, -0.004, 0.035, 0.012, 0.018]
    ref = sps.ttest_1samp(x, 0.0, alternative="greater").confidence_interval(0.95)
    assert stats.t_bound(x, "greater") == pytest.approx(ref.low, rel=1e-12)
    ref = sps.ttest_1samp(x, 0.0, alternative="less").confidence_interval(0.99)
    assert stats.t_bound(x, "less", 0.99) == pytest.approx(ref.high, rel=1e-12)
    # the bound excludes 0 exactly when the one-sided test rejects at 1 − level
    for level in (0.9, 0.95, 0.99):
        rejects = stats.one_sided(x).p_value < 1 - level
        assert (stats.t_bound(x, "greater", level) > 0) == rejects


def test_sign_test_is_scipys_binomtest_and_identical_seeds_give_one_in_2_to_the_n():
    x = [0.3, -0.1, 0.2, 0.25, 0.4, 0.1, -0.05]
    k = sum(v > 0 for v in x)
    assert stats.sign_test(x) == pytest.approx(
        sps.binomtest(k, len(x), 0.5, alternative="greater").pvalue, rel=1e-12
    )
    assert stats.sign_test(x, alternative="less") == pytest.approx(
        sps.binomtest(len(x) - k, len(x), 0.5, alternative="greater").pvalue, rel=1e-12
    )
    # five seeds at 0.95 above a baseline of 0: t is undefined, the sign test gives 1/32
    flat = [0.95] * 5
    assert stats.one_sided(flat) == stats.OneSided(1 / 32, "sign", 5)
    assert stats.one_sided(flat, alternative="less").p_value == 1.0
    # values at the reference stay in n: P(B ≥ 1 | n 3) = 7/8, not the 1/2 of dropping them
    assert stats.sign_test([0.0, 0.0, 1.0]) == pytest.approx(7 / 8)


def test_sign_bound_is_the_order_statistic_dual_to_the_sign_test():
    x = [5.0] * 5
    assert stats.sign_bound(x, "greater") == 5.0  # P(B ≤ 0) = 1/32 ≤ 0.05: x_(1)
    assert stats.sign_bound(x[:4], "greater") == -math.inf  # 1/16 > 0.05
    ten = np.arange(10.0)
    # P(B ≤ 1) = 11/1024 ≤ 0.05 < P(B ≤ 2) = 56/1024: the 2nd smallest, the 2nd largest
    assert stats.sign_bound(ten, "greater") == 1.0 and stats.sign_bound(ten, "less") == 8.0
    rng = np.random.default_rng(5)
    for _ in range(100):
        v = rng.normal(0.3, 1.0, size=int(rng.integers(5, 20)))
        b = stats.sign_bound(v, "greater", 0.95)
        for ref in (b - 1e-9, b + 1e-9):  # the test rejects median ≤ ref iff ref < bound
            assert (stats.sign_test(v, ref) <= 0.05) == (ref < b)
    assert stats.bound([2.0] * 5, "greater") == 2.0  # sd 0: the sign bound
    assert stats.bound([1.0, 2.0, 3.0], "greater") == stats.t_bound([1.0, 2.0, 3.0], "greater")


def test_one_sided_is_scipys_t_test_when_there_is_spread():
    x = [0.1, 0.3, -0.05, 0.2]
    for alt in ("greater", "less"):
        got = stats.one_sided(x, 0.02, alternative=alt)
        assert got.test == "t" and got.p_value == pytest.approx(
            sps.ttest_1samp(x, 0.02, alternative=alt).pvalue, rel=1e-12
        )
    assert stats.one_sided([0.4]).test == "none" and math.isnan(stats.one_sided([0.4]).p_value)
    with pytest.raises(ValueError, match="one-sided"):
        stats.one_sided(x, alternative="two-sided")


def test_permutation_paired_is_scipys_exact_permutation_test():
    d = np.array([0.012, 0.031, -0.008, 0.022, 0.017, 0.004, -0.002])
    for alt in ("greater", "less"):
        ref = sps.permutation_test(
            (d,), np.mean, permutation_type="samples", alternative=alt, n_resamples=np.inf
        ).pvalue
        assert stats.permutation_paired(d, alternative=alt) == pytest.approx(ref, rel=1e-12)
    assert stats.permutation_paired([1.0] * 5) == pytest.approx(1 / 32)  # the sign test's
    # against a reference: the test of d − μ₀
    assert stats.permutation_paired(d, 0.01) == stats.permutation_paired(d - 0.01)


def test_permutation_paired_monte_carlo_beyond_16_values_is_seeded_and_near_exact(monkeypatch):
    rng = np.random.default_rng(6)
    d = rng.normal(0.25, 1.0, size=18)
    mc = stats.permutation_paired(d, draws=20_000)
    assert mc == stats.permutation_paired(d, draws=20_000)  # fixed seed: the same p
    monkeypatch.setattr(stats, "EXACT_MAX", 18)
    exact = stats.permutation_paired(d)
    # binomial error of a Monte-Carlo share from 20 000 draws: sd ≤ 0.0036; 4 sd
    assert abs(mc - exact) < 0.015


def test_tost_is_the_larger_of_two_scipy_one_sided_tests():
    x = [0.002, -0.004, 0.006, 0.001, -0.001, 0.003]
    low = sps.ttest_1samp(x, -0.01, alternative="greater").pvalue
    high = sps.ttest_1samp(x, 0.01, alternative="less").pvalue
    assert stats.tost(x, 0.01) == pytest.approx(max(low, high), rel=1e-12)
    assert stats.tost(x, 0.01) < 0.05  # equivalent within ±0.01
    assert stats.tost([0.02, 0.03, 0.025], 0.01) > 0.5  # outside the margin
    assert stats.tost([0.0] * 5, 0.01) == pytest.approx(1 / 32)  # sd 0: sign tests
    with pytest.raises(ValueError, match="margin"):
        stats.tost(x, 0.0)


def test_t_power_matches_simulation_and_g_power():
    # G*Power 3 (Faul et al. 2007), one-sample t, one tail, d = 0.5, α 0.05, power 0.8:
    # n = 27 with actual power 0.8118
    assert stats.t_sample_size(0.5, 1.0, 0.05, 0.8) == 27
    assert stats.t_power(27, 0.5, 1.0, 0.05) == pytest.approx(0.8118, abs=5e-4)
    rng = np.random.default_rng(7)
    n, effect, sd, reps = 8, 0.02, 0.03, 20_000
    x = rng.normal(effect, sd, size=(reps, n))
    rate = np.mean(sps.ttest_1samp(x, 0.0, axis=1, alternative="greater").pvalue < 0.05)
    # binomial error of the simulated rate with 20 000 repetitions: sd ≤ 0.0036; 4 sd
    assert rate == pytest.approx(stats.t_power(n, effect, sd, 0.05), abs=0.015)
    assert stats.t_power(5, 0.0, 1.0, 0.05) == pytest.approx(0.05)  # size at no effect


def test_t_sample_size_is_the_smallest_n_with_the_power():
    for effect, sd, alpha in ((0.01, 0.018, 0.05), (0.01, 0.018, 0.05 / 13), (0.3, 0.1, 0.05)):
        n = stats.t_sample_size(effect, sd, alpha, 0.9)
        assert stats.t_power(n, effect, sd, alpha) >= 0.9
        assert n == 2 or stats.t_power(n - 1, effect, sd, alpha) < 0.9
    with pytest.raises(ValueError, match="effect"):
        stats.t_sample_size(0.0, 1.0)
