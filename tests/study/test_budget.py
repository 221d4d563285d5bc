"""The plan's time estimate (smallinit.study.budget): its arithmetic (a shared run counts once,
charged to the first figure; the figures add up to the total; minutes are worker-seconds
over the budget's slots), where its rates come from, and quick's budget (issue: figs in 15
minutes on 2 cores, transformer training FLOPs at most 2e13)."""

from __future__ import annotations

import pytest

from smallinit.core import host, profiles
from smallinit.core.atomic import atomic_write_json
from smallinit.core.errors import ConfigError
from smallinit.core.store import RunStore
from smallinit.study import budget, experiments


def test_the_figures_add_up_to_the_total_and_a_shared_run_counts_once(tmp_path):
    store = RunStore(tmp_path)  # empty: every kind at the reference rates
    est = budget.estimate("quick", store=store)
    totals = experiments.plan_totals(experiments.plan("quick"))
    assert sum(f.minutes for f in est.figures) == pytest.approx(est.minutes)
    assert sum(f.runs for f in est.figures) == totals["runs"]  # each distinct run once
    assert (est.transformer_runs, est.flops) == (totals["transformer_runs"], totals["flops"])
    # fig 13 draws fig 7's runs: alone it is charged for them, beside fig 7 it costs nothing
    alone = budget.estimate("quick", [13], store)
    seven = budget.estimate("quick", [7], store)
    both = budget.estimate("quick", [7, 13], store)
    assert alone.minutes == pytest.approx(seven.minutes) and seven.minutes > 0
    assert both.minutes == pytest.approx(seven.minutes)
    thirteen = both.figures[1]
    assert (thirteen.figure, thirteen.runs, thirteen.minutes) == (13, 0, 0.0)
    assert thirteen.shared == {7: seven.figures[0].runs}


def test_minutes_are_worker_seconds_over_the_slots_of_the_budgets_cores(tmp_path):
    est = budget.estimate("quick", [1, 7], RunStore(tmp_path))
    toy, sweep = est.figures
    assert est.cores == 2
    assert toy.minutes == pytest.approx(toy.seconds / 60)  # the JAX toy takes every core
    assert sweep.minutes == pytest.approx(sweep.seconds / 2 / 60)  # one thread a run


def test_a_kind_this_machine_has_finished_is_timed_by_its_own_runs(tmp_path):
    """Fig 4's two diagonal runs, stored done here in 30 and 50 s: the mean, 40 s each."""
    store = RunStore(tmp_path)
    specs = experiments.specs("diagonal", "quick")
    for spec, seconds in zip(specs, (30, 50), strict=True):
        run = spec.run_of(store)
        run.path.mkdir(parents=True)
        atomic_write_json(
            run.status_path,
            {
                "state": "done",
                "started": "2026-12-04T10:00:00+0000",
                "finished": f"2026-12-04T10:00:{seconds}+0000",
                "host": host.record(),
            },
        )
    est = budget.estimate("quick", [4], store)
    assert est.fitted == {"toy-diagonal": 2} and "toy-diagonal" not in est.reference
    assert est.figures[0].seconds == pytest.approx(80.0)
    # another machine's runs do not count: the reference rates time them
    for spec in specs:
        status = spec.run_of(store).status()
        atomic_write_json(
            spec.run_of(store).status_path,
            {**status, "host": {**status["host"], "cpu": "another CPU"}},
        )
    other = budget.estimate("quick", [4], store)
    assert other.fitted == {} and other.reference == ["toy-diagonal"]
    assert other.figures[0].seconds == pytest.approx(2 * 1.5)  # REFERENCE's diagonal run


def test_quick_fits_its_budget(tmp_path):
    est = budget.estimate("quick", store=RunStore(tmp_path))
    assert est.flops <= 2e13 and est.minutes < 15 and est.budget == 15 and est.cores == 2
    assert not est.over and not [f.figure for f in est.figures if f.over]
    assert {f.figure for f in est.figures if f.budget is not None} == {
        n for e in experiments.EXPERIMENTS.values() for n in e.figures
    }


def test_a_figure_over_its_share_is_flagged_and_the_budget_is_quicks_own(tmp_path, capsys):
    from smallinit.cli import main

    assert (
        main(
            [
                "figs",
                "--plan",
                "--only",
                "6",
                "--runs-dir",
                str(tmp_path),
                "anchor.scan.seeds=[0,1,2,3,4]",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith("fig  6 anchor_phase")][-1].endswith(
        "OVER BUDGET"
    )
    assert budget.budget("medium") is None  # medium extends quick, not its budget
    assert budget.estimate("medium", [6], RunStore(tmp_path)).figures[0].budget is None


@pytest.mark.parametrize(
    "overlay, message",
    [
        ({"budget.figures.6": 20}, "budget.figures add up to"),
        ({"budget.cores": 0}, "budget.cores=0 is not allowed"),
    ],
)
def test_a_bad_budget_is_one_line(overlay, message):
    with pytest.raises(ConfigError, match=message):
        budget.budget(profiles.derive("quick", overrides=overlay))
