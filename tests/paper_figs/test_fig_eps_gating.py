"""Fig 8's gap panel draws only what was measured: on a corpus that scores no reasoning
answers (fair's Shakespeare) the answer-token series has no bars and no legend entry."""

from __future__ import annotations

import math

from smallinit.paper_figs import fig08_eps_gating as fig8


def _gaps(ans: float) -> dict:
    return {
        s: [{"seed": 0, "val": -0.03, "ans": ans, "ans_se": 0.0, "acc": math.nan}]
        for s in fig8.SETTINGS
    }


def test_answer_series_is_drawn_only_where_answers_were_scored():
    assert [k for k, *_ in fig8.gap_series(_gaps(-0.05))] == ["val", "ans"]
    assert [k for k, *_ in fig8.gap_series(_gaps(math.nan))] == ["val"]


def test_one_finite_setting_keeps_a_series():
    g = _gaps(math.nan)
    g[fig8.SETTINGS[2]][0]["ans"] = 0.01
    assert [k for k, *_ in fig8.gap_series(g)] == ["val", "ans"]
