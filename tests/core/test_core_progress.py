"""Progress over runs: one bar on a terminal, one log line per finished run elsewhere, and
an ETA from the plan's costs (FLOPs for transformer runs, the kind's own time for the rest)."""

from __future__ import annotations

import io
import logging
import re
import sys
from dataclasses import dataclass

import pytest

from smallinit.core import progress as progress_mod
from smallinit.core.jobs import RunSpec, run_specs
from smallinit.core.progress import RunProgress, duration, run_line
from smallinit.core.store import RunStore


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def off_terminal(monkeypatch):
    """stderr is a file (a batch job's log), not a terminal: bars hidden, lines logged."""
    monkeypatch.setattr(progress_mod, "_quiet", False)
    monkeypatch.setattr(progress_mod, "bars_shown", lambda: False)


def test_duration_and_line_format():
    assert [duration(s) for s in (None, float("nan"), 0.4, 41, 185, 3720)] == [
        "?",
        "?",
        "0s",
        "41s",
        "3m05s",
        "1h02m",
    ]
    assert run_line("sweep", 3, 8, "llm-train/abc", "done", 41.2, 192, 2490) == (
        "sweep: run 3/8 done llm-train/abc (41s), elapsed 3m12s, ETA 41m30s"
    )


def test_eta_weighs_transformer_runs_by_their_flops(off_terminal):
    """Run 0 (1e9 FLOPs) took 10 s: run 1 (3e9) is expected to take 30 s, and run 2, of
    another transformer kind that has not finished any run, borrows the same s/FLOP."""
    clock = Clock()
    bar = RunProgress(["llm-train", "llm-train", "llm-anchor"], [1e9, 3e9, 5e8], clock=clock)
    bar.plan([([0, 1, 2], 1)])
    assert bar.eta() is None and bar.eta_text() == "?"  # nothing finished: unknown
    bar.start(0)
    clock.now = 10.0
    bar.finish(0)
    assert bar.expected(1) == pytest.approx(30.0) and bar.expected(2) == pytest.approx(5.0)
    assert bar.eta() == pytest.approx(35.0)
    bar.start(1)
    clock.now = 22.0  # run 1 has trained 12 of its expected 30 s
    assert bar.eta() == pytest.approx(18.0 + 5.0)
    bar.close()


def test_eta_fits_a_fixed_time_per_run_plus_a_time_per_flop(off_terminal):
    """Two finished runs of 1e9 and 3e9 FLOPs took 20 s and 40 s: 10 s per run plus
    1e-8 s per FLOP, so a 5e9 run is expected to take 60 s (proportional to FLOPs alone it
    would be 75 s or 100 s, and a tiny run near 0 s)."""
    clock = Clock()
    bar = RunProgress(["llm-train"] * 4, [1e9, 3e9, 5e9, 1e6], clock=clock)
    bar.plan([([0, 1, 2, 3], 1)])
    bar.finish(0, seconds=20.0)
    bar.finish(1, seconds=40.0)
    assert bar.expected(2) == pytest.approx(60.0)
    assert bar.expected(3) == pytest.approx(10.01)
    assert bar.eta() == pytest.approx(70.01)
    bar.close()
    flat = RunProgress(["k"] * 3, [1e9, 3e9, 2e9], clock=clock)
    flat.finish(0, seconds=30.0)
    flat.finish(1, seconds=10.0)  # bigger but faster: no slope, the mean time
    assert flat.expected(2) == pytest.approx(20.0)
    flat.close()


def test_eta_times_runs_without_a_cost_by_their_kind_and_divides_by_the_workers(off_terminal):
    """Toy runs have no FLOPs: a toy-scan run is expected to take the mean of finished
    toy-scan runs (not of the transformers); a group of runs side by side on 2 workers
    takes half its run-seconds; a kind without a finished run borrows its class's mean."""
    clock = Clock()
    kinds = ["toy-scan", "toy-scan", "toy-diagonal", "llm-train", "llm-train", "llm-train"]
    bar = RunProgress(kinds, [None, None, None, 2e9, 2e9, 2e9], clock=clock)
    bar.plan([([0, 1, 2], 1), ([3, 4, 5], 2)])
    bar.start(0)
    clock.now = 60.0
    bar.finish(0)
    assert bar.eta() is None  # no transformer has finished: their time is unknown
    assert bar.eta_text() == "? (≥ 2m00s + 3 untimed runs)"  # ... the toy runs' is known
    bar.start(3)
    clock.now = 64.0
    bar.finish(3)  # 4 s for 2e9 FLOPs
    assert bar.expected(1) == pytest.approx(60.0)
    assert bar.expected(2) == pytest.approx(60.0)  # no toy-diagonal yet: the toy runs' mean
    assert bar.expected(4) == pytest.approx(4.0)
    assert bar.eta() == pytest.approx((60 + 60) / 1 + (4 + 4) / 2)
    bar.close()


def test_eta_on_ray_uses_the_measured_parallelism(off_terminal):
    clock = Clock()
    bar = RunProgress(["k"] * 4, [None] * 4, clock=clock)
    bar.plan([([0, 1, 2, 3], None)])
    clock.now = 10.0
    bar.finish(0, seconds=10.0)
    bar.finish(1, seconds=10.0)  # 20 run-seconds in 10 s of wall time: 2 at a time
    assert bar.eta() == pytest.approx(2 * 10.0 / 2)
    bar.close()


@dataclass
class NapSpec(RunSpec):
    """A run that stores its number (computed in whatever process the driver picks)."""

    kind = "test-nap"

    def compute(self, store, force):
        return store.get_or_run(
            self.kind, self.config, lambda run: {"i": self.config["i"]}, force=force
        )


LINE = re.compile(
    r"naps: run (\d)/3 done test-nap/[0-9a-f]{16} \((\d+)s\), elapsed (\S+), "
    r"ETA (\S+)$"
)


@pytest.mark.parametrize("workers", [1, 2])
def test_off_a_terminal_one_log_line_per_finished_run(tmp_path, monkeypatch, caplog, workers):
    monkeypatch.setattr(progress_mod, "_quiet", False)
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # what a batch job's log file is
    specs = [NapSpec({"i": i}) for i in range(3)]
    with caplog.at_level(logging.INFO, logger="smallinit.core.jobs"):
        run_specs(
            specs, RunStore(tmp_path), workers=workers, desc="naps", weigh=lambda config: None
        )
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("naps: run")]
    assert [int(LINE.match(m).group(1)) for m in lines] == [1, 2, 3]
    assert LINE.match(lines[-1]).group(4) == "0s"  # nothing left
    assert "runs |" not in sys.stderr.getvalue()  # no bar where output is not a terminal
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="smallinit.core.jobs"):
        run_specs(specs, RunStore(tmp_path), workers=workers, desc="naps")  # all reused
    assert not [r for r in caplog.records if r.getMessage().startswith("naps: run")]


@dataclass
class ChosenNapSpec(NapSpec):
    """A spec keyed before its config is final, as a run at a chosen learning rate is: its
    run is stored under the config with ``chosen`` added."""

    @property
    def key(self) -> str:
        return f"pending{self.config['i']:09d}"

    def final(self) -> dict:
        return {**self.config, "chosen": True}

    def run_of(self, store):
        return store.run(self.kind, self.final(), version=self.version)

    def compute(self, store, force):
        return store.get_or_run(self.kind, self.final(), lambda run: {"i": 0}, force=force)


def test_the_log_line_names_the_run_the_store_holds(tmp_path, monkeypatch, caplog):
    """A spec whose key is not its run's (a learning rate chosen later) is logged by the
    stored run's kind/key, the name `smallinit runs show` finds, not by the spec's key."""
    monkeypatch.setattr(progress_mod, "_quiet", False)
    store = RunStore(tmp_path)
    spec = ChosenNapSpec({"i": 0})
    with caplog.at_level(logging.INFO, logger="smallinit.core.jobs"):
        run_specs([spec], store, workers=1, desc="naps", weigh=lambda config: None)
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("naps: run")]
    stored = spec.run_of(store)
    assert stored.state == "done" and f"done test-nap/{stored.key} " in line
    assert spec.key not in line


def test_on_a_terminal_one_bar_over_runs_and_no_lines(tmp_path, monkeypatch, caplog):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    screen = Tty()
    monkeypatch.setattr(progress_mod, "_quiet", False)
    monkeypatch.setattr(sys, "stderr", screen)
    with caplog.at_level(logging.INFO, logger="smallinit.core.jobs"):
        run_specs([NapSpec({"i": i}) for i in range(3)], RunStore(tmp_path), workers=1, desc="naps")
    text = screen.getvalue()
    assert "naps: 3/3 runs |" in text and "ETA 0s]" in text
    assert not [r for r in caplog.records if r.getMessage().startswith("naps: run")]


def test_figs_sweeps_and_anchor_scans_weigh_runs_by_their_flops(monkeypatch, tmp_path):
    """Every caller of the job driver with transformer runs hands it the plan's FLOPs; a
    toy run weighs nothing (None)."""
    from smallinit.cli import main
    from smallinit.core import jobs
    from smallinit.llm.training.cost import run_cost, training_flops_of
    from smallinit.study import experiments, figs

    seen = {}

    class Stop(Exception):
        pass

    def fake(specs, store=None, **options):
        seen[options.get("desc")] = options.get("weigh")
        raise Stop

    monkeypatch.setattr(jobs, "run_specs", fake)
    monkeypatch.setattr(figs, "run_specs", fake)
    for argv in (
        ["llm", "sweep", "--experiment", "critical-init"],
        ["llm", "anchor-scan", "scan.gammas=0.5"],
    ):
        with pytest.raises(Stop):
            main([*argv, "--runs-dir", str(tmp_path)])
    with pytest.raises(Stop):
        figs.compute([experiments.get("critical-init")], "quick", RunStore(tmp_path))
    assert seen == {
        "critical-init": training_flops_of,
        "anchor scan": training_flops_of,
        "runs of the figures": training_flops_of,
    }
    spec = experiments.specs("critical-init", "quick")[0]
    assert training_flops_of(spec.config) == run_cost(spec.config).flops > 0
    assert training_flops_of(experiments.specs("toy-scan", "quick")[0].config) is None
