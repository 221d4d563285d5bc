"""Figures 1 and 3 draw every grid their configs accept: a toy scan of one γ and one γ'
(or one line of the grid), and an initial-condensation table of one activation; a table of
none is refused where the profile is read."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from smallinit.core import profiles
from smallinit.core.errors import ConfigError
from smallinit.core.jobs import Results
from smallinit.core.store import RunStore
from smallinit.paper_figs import fig01_phase_diagram as fig1
from smallinit.paper_figs import fig03_condensation as fig3
from smallinit.study.experiments import initial_condensation
from smallinit.study.figs import FigureContext
from smallinit.toy.condense import CondenseConfig


@dataclasses.dataclass
class Spec:
    config: object


def stored(store: RunStore, kind: str, config: dict, summary: dict, **arrays) -> Results:
    """One finished run holding ``summary`` and ``arrays``, as the figure reads runs."""

    def body(run):
        run.save_arrays(**arrays)
        return summary

    return Results([Spec(config)], [store.get_or_run(kind, config, body)])


def png_of(paths) -> bytes:
    [png] = [p for p in paths if p.suffix == ".png"]
    return png.read_bytes()


@pytest.mark.parametrize(("n_gamma", "n_prime"), [(1, 1), (1, 3), (3, 1), (2, 2)])
def test_fig1_draws_a_scan_of_any_grid(tmp_path, n_gamma, n_prime):
    rng = np.random.default_rng(0)
    runs = stored(
        RunStore(tmp_path / "runs"),
        "toy-scan",
        {"g": n_gamma, "gp": n_prime},
        {},
        gammas=np.linspace(0.5, 1.5, n_gamma),
        gamma_primes=np.linspace(-0.5, 0.5, n_prime),
        S_w=rng.normal(size=(n_gamma, n_prime)),
    )
    paths = fig1.make(FigureContext(1, "quick", tmp_path / "out", {"toy-scan": runs}))
    assert png_of(paths).startswith(b"\x89PNG")


@pytest.mark.parametrize("activations", [["tanh"], ["tanh", "xtanh"]])
def test_fig3_draws_one_panel_per_activation(tmp_path, activations):
    store = RunStore(tmp_path / "runs")
    rng = np.random.default_rng(0)
    cfg = CondenseConfig(gammas=(1.0,), gamma_primes=(0.0,), width=20)
    maps = stored(
        store,
        "toy-condense",
        {"one": 1},
        {},
        a=rng.normal(size=(1, 1, 20)),
        W=rng.normal(size=(1, 1, 20, 2)),
        score=np.array([[0.5]]),
    )
    maps.specs[0].config = cfg
    inits = Results([], [])
    for p, act in enumerate(activations, start=1):
        one = stored(
            store,
            "toy-initial-condensation",
            {"a": act},
            {"activation": act, "p": p, "clusters": 2 * p},
            gram_reordered=np.eye(6),
        )
        inits = Results(inits.specs + one.specs, inits.runs + one.runs)
    paths = fig3.make(
        FigureContext(
            3, "quick", tmp_path / "out", {"condense": maps, "initial-condensation": inits}
        )
    )
    assert png_of(paths).startswith(b"\x89PNG")


def test_an_initial_condensation_table_without_activations_is_refused():
    name = profiles.derive("quick", overrides={"initial-condensation.activations": []})
    with pytest.raises(
        ConfigError,
        match=r"initial-condensation\.activations=\[\] is not "
        r"allowed; give a list of at least one activation",
    ):
        initial_condensation.specs(name)
