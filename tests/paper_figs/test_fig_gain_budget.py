"""Fig 13 (gain against the training budget): the crossing step and theory's ΔT axis."""

from __future__ import annotations

import math

import pytest

from smallinit.core.jobs import Results, RunSpec
from smallinit.core.store import RunStore
from smallinit.paper_figs import fig13_gain_budget as fig13
from smallinit.study.figs import FigureContext


def test_crossing_interpolates_between_records_and_needs_a_sign_change():
    assert fig13.crossing({0: -0.2, 100: 0.2}) == pytest.approx(50.0)
    assert fig13.crossing({0: -0.3, 100: -0.1, 200: 0.1, 300: -0.1}) == pytest.approx(150.0)
    assert math.isnan(fig13.crossing({0: 0.1, 100: 0.2}))  # never paid
    assert math.isnan(fig13.crossing({0: -0.1, 100: -0.05}))  # never won


def test_extra_escape_is_half_log_width():
    """T₂(γ, d) = (γ ln d) / c at L = 2 (§4.3), so ΔT(1 − 0.5) = 0.5 ln d."""
    for d in (32, 64, 128):
        assert fig13.extra_escape(d) == pytest.approx(0.5 * math.log(d), rel=1e-12)


def test_figure_finds_each_seeds_crossing(tmp_path, caplog):
    """Constructed runs whose gain g(t) = (t − t*_d)/1000 crosses at t*_d = 400·ln d /
    ln 32: the figure draws them and its fit recovers slope 400 / (0.5 ln 32) per unit ΔT."""
    store = RunStore(tmp_path / "runs")
    steps = [250, 500, 750, 1000, 1250, 1500]
    specs = [
        RunSpec({"size": d, "gamma": g, "seed": s}, {"size": d, "gamma": g, "seed": s})
        for d in (32, 64, 128)
        for g in (0.5, 1.0)
        for s in range(3)
    ]

    def body(run, spec):
        d, small = spec.tags["size"], spec.tags["gamma"] == 1.0
        star = 400 * math.log(d) / math.log(32) + 10 * spec.tags["seed"]
        for t in steps[:-1]:
            run.log({"step": t, "val_loss": 4.0 - ((t - star) / 1000 if small else 0.0)})
        t = steps[-1]
        return {"steps": t, "val_loss": 4.0 - ((t - star) / 1000 if small else 0.0)}

    runs = [store.get_or_run("demo", sp.config, lambda r, sp=sp: body(r, sp)) for sp in specs]
    results = Results(specs, runs)
    pairs = [(j, r) for j, r in results.done() if j.tags["size"] == 64]
    crossings = [fig13.crossing(g) for g in fig13.gains_along(pairs).values()]
    want = [400 * math.log(64) / math.log(32) + 10 * s for s in range(3)]
    assert crossings == pytest.approx(want)
    ctx = FigureContext(13, "fair", tmp_path / "out", {"gamma-sweep": results})
    with caplog.at_level("INFO"):
        paths = fig13.make(ctx)
    assert sorted(p.name for p in paths) == ["fig13_gain_budget.pdf", "fig13_gain_budget.png"]
