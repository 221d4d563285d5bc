"""The paper's figures by number (docs/science.md §7): number -> the stem suffix of its
script ``paper_figs/figNN_<name>.py``.

Kept apart from the figure driver (:mod:`smallinit.study.figs`, which imports the whole
study) and imports nothing, so that ``smallinit figs --only N`` checks ``N`` at once;
tests/study/test_study_figs.py checks that it lists exactly the package's figure scripts.
"""

from __future__ import annotations

FIGURES: dict[int, str] = {
    1: "phase_diagram",
    2: "rd_vs_width",
    3: "condensation",
    4: "lazy_vs_rich",
    5: "transformer_phase",
    6: "anchor_phase",
    7: "gamma_sweep",
    8: "eps_gating",
    9: "critical_init",
    10: "condense_expand",
    11: "token_gains",
    12: "gain_scaling",
    13: "gain_budget",
}
