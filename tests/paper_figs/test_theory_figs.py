"""Figures 1, 4 and 5 render their theory layers (docs/science.md §7)."""

import pytest

from smallinit.paper_figs import fig01_phase_diagram, fig04_lazy_vs_rich, fig05_transformer_phase
from smallinit.theory import diagram

MODULES = {1: fig01_phase_diagram, 4: fig04_lazy_vs_rich, 5: fig05_transformer_phase}


@pytest.mark.parametrize("number", [1, 4, 5])
def test_theory_layers_render(number, tmp_path):
    """Each theory layer draws on its own (the simulated/measured layers need runs and are
    exercised by `make figs`); the saved PNG is a real, non-trivial image."""
    import matplotlib.pyplot as plt

    from smallinit.core.plotting import save_figure, use_style

    module = MODULES[number]
    with use_style():
        fig, ax = plt.subplots()
        module.draw_theory_layer(ax)
        assert ax.has_data()
        paths = save_figure(fig, tmp_path, f"theory{number}")
    png = paths[0].read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


@pytest.mark.parametrize("number", [1, 4, 5])
def test_theory_layer_is_a_separate_function(number):
    module = MODULES[number]
    assert callable(module.draw_theory_layer) and module.FIGURE.make is module.make


def test_condensed_region_polygon():
    poly = diagram.condensed_polygon((0, 2), (-1, 1))
    # {γ ≥ 1, γ' ≤ γ − 1} in the box [0, 2] × [−1, 1]
    assert sorted(poly) == sorted([(1.0, -1.0), (2.0, -1.0), (2.0, 1.0), (1.0, 0.0)])
    labels = {label: (g, gp) for label, g, gp in diagram.scheme_points()}
    assert labels["Xavier, mean field"] == (1.0, 0.0)
    assert labels["LeCun, He"] == (0.5, 0.5)
