"""Ctrl-C stops a command at once (:mod:`smallinit.core.interrupts`): a KeyboardInterrupt
that CPython drops (raised inside a garbage-collector callback, as JAX's
``_xla_gc_callback`` is) is raised again; the job driver stops before its next run; and
``smallinit figs`` interrupted after its first run exits 130 with that run kept and
verified, the others resumable and the figure not drawn."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from smallinit.core import interrupts
from smallinit.core.jobs import RunSpec, run_specs
from smallinit.core.results import list_runs, verify_runs
from smallinit.core.store import RunStore


def _sigint_inside_a_gc_callback(phase: str, info: dict) -> None:
    """A gc callback that receives SIGINT while it runs: the handler raises inside it."""
    if phase == "start" and not FIRED:
        FIRED.append(True)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)  # the handler runs here, inside the callback


FIRED: list[bool] = []


def test_a_keyboard_interrupt_dropped_in_a_gc_callback_is_raised_again():
    FIRED.clear()
    with pytest.raises(KeyboardInterrupt), interrupts.catching():
        gc.callbacks.append(_sigint_inside_a_gc_callback)
        try:
            gc.collect()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:  # without the second raise: works on
                time.sleep(0.001)
        finally:
            gc.callbacks.remove(_sigint_inside_a_gc_callback)
    assert FIRED and interrupts.requested()
    assert signal.getsignal(signal.SIGINT) is not interrupts._on_sigint  # handler restored


class _CountSpec(RunSpec):
    """A run that records that it ran; the first one gets a Ctrl-C whose raise is lost."""

    kind = "toy-count"

    @staticmethod
    def runner(config, store, force=False):
        def body(run):
            if config["i"] == 0:
                try:
                    signal.raise_signal(signal.SIGINT)
                except KeyboardInterrupt:
                    pass  # dropped, as a gc callback drops it
            return {"i": config["i"]}

        return store.get_or_run("toy-count", config, body)


def test_the_job_driver_stops_before_its_next_run_when_the_raise_was_lost(tmp_path):
    store = RunStore(tmp_path / "runs")
    specs = [_CountSpec({"i": i}) for i in range(3)]
    with pytest.raises(KeyboardInterrupt), interrupts.catching():
        run_specs(specs, store, workers=1)
    assert [s.run_of(store).state for s in specs] == ["done", "absent", "absent"]


# ----------------------------------------------------------------------------- the CLI
#: the CLI in a child process; SIGUSR1 arms a gc callback that then receives SIGINT while
#: it runs (JAX's callback is where a terminal's Ctrl-C got lost)
CHILD = textwrap.dedent("""\
    import gc, os, signal, sys, time
    armed, fired = [], []
    signal.signal(signal.SIGUSR1, lambda *a: armed.append(1))
    def callback(phase, info):
        if armed and not fired and phase == "start":
            fired.append(1)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)
    gc.callbacks.append(callback)
    from smallinit.cli import main
    raise SystemExit(main(sys.argv[1:]))
    """)


def _done_runs(root: Path) -> list[Path]:
    out = []
    for status in root.glob("*/*/status.json"):
        try:
            if json.loads(status.read_text()).get("state") == "done":
                out.append(status.parent)
        except (OSError, ValueError):  # being written
            pass
    return out


@pytest.mark.parametrize(
    "where,workers",
    [
        ("inside-gc-callback", 1),
        pytest.param("terminal", 1, marks=pytest.mark.slow),
        pytest.param("terminal", 2, marks=pytest.mark.slow),
    ],
)
def test_ctrl_c_stops_figs_at_once_and_keeps_the_finished_run(tmp_path, where, workers):
    runs, out = tmp_path / "runs", tmp_path / "out"
    argv = [
        "figs",
        "--only",
        "3",
        "--workers",
        str(workers),
        "--runs-dir",
        str(runs),
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, *argv],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not _done_runs(runs):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no run finished in 300 s"
            time.sleep(0.05)
        t0 = time.monotonic()
        if where == "terminal":
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends
        else:
            os.kill(proc.pid, signal.SIGUSR1)
        _, err = proc.communicate(timeout=120)
        seconds = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-2000:]
    assert seconds < 10, seconds  # the rest of fig 3 (three runs, the drawing) takes longer
    lines = [ln for ln in err.splitlines() if not ln.startswith(("INFO ", "DEBUG "))]
    assert len(lines) == 1 and lines[0].startswith("smallinit: interrupted"), lines
    stored = list_runs(runs)
    done = [r for r in stored if r.state == "done"]
    assert 1 <= len(done) < 4  # fig 3 has four runs
    assert all(v.problem is None for v in verify_runs(runs_dir=runs))
    assert all(
        r.state == "done"
        or (r.state == "failed" and r.status.get("final") is False)
        or r.state == "stale"
        for r in stored
    ), stored
    assert not list(out.glob("fig03_*"))
    if where == "terminal":  # the next call resumes: the rest computed, the finished kept
        kept = {r.key: (r.path / "arrays.npz").read_bytes() for r in done}
        again = subprocess.run(
            [sys.executable, "-m", "smallinit", *argv],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert again.returncode == 0, again.stderr[-2000:]
        assert [r.state for r in list_runs(runs)] == ["done"] * 4
        assert {r.key: (r.path / "arrays.npz").read_bytes() for r in done} == kept
        assert list(out.glob("fig03_*.png"))
