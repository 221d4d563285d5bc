"""Figures 1, 4 and 5 render their theory layers (SPEC §7)."""

import pytest

from smallinit.figs import figure_scripts, load_script, make_figures
from smallinit.runs import RunStore
from smallinit.theory import diagram


def test_theory_figures_render(tmp_path):
    results = make_figures(only=[1, 4, 5], out_dir=tmp_path, store=RunStore(tmp_path / "runs"))
    for number, stem in ((1, "fig01_phase_diagram"), (4, "fig04_lazy_vs_rich"),
                         (5, "fig05_transformer_phase")):
        assert sorted(p.name for p in results[number]) == [f"{stem}.pdf", f"{stem}.png"]
        png = (tmp_path / f"{stem}.png").read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 10_000


@pytest.mark.parametrize("number", [1, 4, 5])
def test_theory_layer_is_a_separate_function(number):
    module = load_script(figure_scripts()[number])
    assert callable(module.draw_theory_layer) and callable(module.make)


def test_condensed_region_polygon():
    poly = diagram.condensed_polygon((0, 2), (-1, 1))
    # {γ ≥ 1, γ' ≤ γ − 1} in the box [0, 2] × [−1, 1]
    assert sorted(poly) == sorted([(1.0, -1.0), (2.0, -1.0), (2.0, 1.0), (1.0, 0.0)])
    labels = {label: (g, gp) for label, g, gp in diagram.scheme_points()}
    assert labels["Xavier, mean field"] == (1.0, 0.0)
    assert labels["LeCun, He"] == (0.5, 0.5)
