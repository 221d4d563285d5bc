"""docs/science.md §13.2's verdicts on per-seed values: Holm over a profile's claims, the
exact sign test at sd 0, intersection-union and Bonferroni combinations, TOST for `not at
this scale`, bounds at Holm's level; each p checked against scipy on the same values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from smallinit.core import stats
from smallinit.study.verdicts import Condition, Design, decide_family, examine

ONE = Design((Condition("x"),), margin=0.01)


def seeds(values) -> dict[int, float]:
    return dict(enumerate(values))


def t_p(x, ref=0.0, alt="greater") -> float:
    return float(sps.ttest_1samp(x, ref, alternative=alt).pvalue)


def test_holm_adjusts_the_claimed_direction_over_the_profiles_claims():
    xs = [
        [0.02, 0.03, 0.025, 0.018, 0.031],
        [0.01, -0.005, 0.02, 0.004, 0.012],
        [0.03, 0.01, 0.05, 0.02, 0.04],
    ]
    decisions = decide_family([({"x": seeds(x)}, ONE) for x in xs])
    raw = [t_p(x) for x in xs]
    assert [d.p_raw for d in decisions] == pytest.approx(raw, rel=1e-12)
    assert [d.p_holm for d in decisions] == pytest.approx(list(stats.holm(raw)), rel=1e-12)
    for d in decisions:
        assert (d.verdict == "holds") == (d.p_holm < 0.05)
        assert d.test == "t"


def test_a_claim_that_passes_alone_can_fail_in_its_family():
    x = [0.02, -0.004, 0.03, 0.012, 0.025]  # one-sided p ≈ 0.02 alone
    alone = decide_family([({"x": seeds(x)}, ONE)])[0]
    assert alone.p_raw < 0.05 and alone.verdict == "holds"
    noise = [({"x": seeds([0.3, -0.2, 0.1, -0.25, 0.05])}, ONE)] * 5  # five p ≈ 0.5 claims
    crowded = decide_family([({"x": seeds(x)}, ONE), *noise])[0]
    assert crowded.p_raw == alone.p_raw and crowded.p_holm == pytest.approx(6 * alone.p_raw)
    assert crowded.verdict == "undecided"


def test_identical_seeds_get_the_exact_sign_test_never_0():
    """reasoning-above-chance at fair-reasoning: 5 of 5 seeds at 0.95 above the baseline."""
    flat = {"x": seeds([0.95] * 5)}
    d = decide_family([(flat, Design((Condition("x"),), opposite=False))])[0]
    assert d.test == "sign" and d.p_raw == pytest.approx(1 / 32)
    assert d.p_raw == pytest.approx(sps.binomtest(5, 5, 0.5, alternative="greater").pvalue)
    assert d.bound == 0.95 and d.verdict == "holds"  # the order statistic x_(1)
    # over 9 cells of one γ ("any"): 9/32 = 0.28, undecided
    cells = {
        f"c{k}": seeds([0.95] * 5 if k == 0 else [0.0, 0.01, -0.01, 0.0, 0.005]) for k in range(9)
    }
    chance = Design(tuple(Condition(n) for n in cells), combine="any", opposite=False)
    d9 = decide_family([(cells, chance)])[0]
    assert d9.p_raw == pytest.approx(9 / 32) and d9.verdict == "undecided"
    assert d9.test == "sign"


def test_intersection_union_takes_the_largest_condition_p():
    end = [0.02, 0.03, 0.025, 0.018, 0.031]
    early = [-0.01, 0.002, -0.02, -0.005, -0.012]
    design = Design((Condition("end"), Condition("early", alternative="less")), margin=0.01)
    t = examine({"end": seeds(end), "early": seeds(early)}, design)
    assert t.p_raw == pytest.approx(max(t_p(end), t_p(early, alt="less")), rel=1e-12)
    assert t.main.series == "end" and t.p_opposite == pytest.approx(t_p(end, alt="less"))
    assert t.p_permutation == pytest.approx(
        sps.permutation_test(
            (np.array(end),),
            np.mean,
            permutation_type="samples",
            alternative="greater",
            n_resamples=np.inf,
        ).pvalue
    )
    # a threshold tested with its margin: mean c = 0.1008 does not pass c > 0.1
    c = [0.1, 0.104, 0.098, 0.101, 0.101]
    thr = Design((Condition("x"), Condition("c", 0.1)))
    d = decide_family([({"x": seeds(end), "c": seeds(c)}, thr)])[0]
    assert d.p_raw == pytest.approx(t_p(c, 0.1)) and d.verdict == "undecided"


def test_not_at_this_scale_only_by_equivalence_else_undecided():
    tight = [0.002, -0.001, 0.001, 0.0, -0.002, 0.001]  # within ±0.01, narrow
    wide = [0.05, -0.06, 0.02, -0.03, 0.01]  # no effect shown, but not equivalent either
    d_tight, d_wide = decide_family([({"x": seeds(tight)}, ONE), ({"x": seeds(wide)}, ONE)])
    assert d_tight.p_equivalence == pytest.approx(
        max(t_p(tight, -0.01), t_p(tight, 0.01, "less")), rel=1e-12
    )
    assert d_tight.verdict == "not at this scale"
    assert d_wide.verdict == "undecided" and d_wide.p_equivalence > 0.05
    against = [-0.02, -0.03, -0.025, -0.018, -0.031]
    assert decide_family([({"x": seeds(against)}, ONE)])[0].verdict == "contradicted"
    no_margin = Design((Condition("x"),))
    assert decide_family([({"x": seeds(tight)}, no_margin)])[0].verdict == "undecided"


def test_bounds_one_sided_at_alpha_and_at_holms_step():
    xs = [[0.02, 0.03, 0.025, 0.018, 0.031], [0.01, -0.005, 0.02, 0.004, 0.012]]
    d = decide_family([({"x": seeds(x)}, ONE) for x in xs])
    assert d[0].bound == pytest.approx(stats.t_bound(xs[0], "greater", 0.95), rel=1e-12)
    # the smaller raw p is Holm's first step (level 1 − α/2), the other its second (1 − α)
    assert d[0].bound_holm == pytest.approx(stats.t_bound(xs[0], "greater", 1 - 0.05 / 2))
    assert d[1].bound_holm == pytest.approx(stats.t_bound(xs[1], "greater", 0.95))
    for dec in d:  # the step's bound excludes 0 exactly when its raw p passes the step
        step_level = 0.05 / 2 if dec is d[0] else 0.05
        assert (dec.bound_holm > 0) == (dec.p_raw < step_level)


def test_share_bounds_are_clipped_to_0_1_and_no_seed_no_test():
    share = Design((Condition("s", 0.5),), share=True)
    d = decide_family([({"s": seeds([1.0, 0.2, 1.0])}, share)])[0]
    assert stats.t_bound([1.0, 0.2, 1.0], "greater") < 0 and d.bound == 0.0
    lone = decide_family([({"x": seeds([0.3])}, ONE), ({"x": seeds([0.2, 0.3, 0.25])}, ONE)])
    assert math.isnan(lone[0].p_raw) and lone[0].verdict == "undecided"
    assert lone[1].p_holm == lone[1].p_raw  # the lone seed is outside the family


def test_a_designs_note_reaches_the_detail_and_survives_json():
    design = Design(
        (Condition("edge low"), Condition("edge high")),
        opposite=False,
        note="reference γ 0.9 chosen on the same seeds",
    )
    assert Design.from_json(design.as_json()) == design
    series = {"edge low": seeds([0.1, 0.2, 0.15]), "edge high": seeds([0.05, 0.1, 0.08])}
    assert "chosen on the same seeds" in decide_family([(series, design)])[0].detail


def test_a_value_written_as_null_reads_as_no_test():
    """print_json writes NaN and ±∞ as null: read back, the condition has no test."""
    d = decide_family([({"x": {"0": 0.1, "1": None, "2": 0.2}}, ONE)])[0]
    assert math.isnan(d.p_raw) and d.verdict == "undecided"
