"""The run store: keys, reuse, --force, atomicity, crashes and corrupt files."""

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import numpy as np
import pytest

from smallinit.core import atomic as atomic_mod
from smallinit.core.atomic import atomic_write_bytes
from smallinit.core.errors import RunFailed, StoreError
from smallinit.core.runs import config_key
from smallinit.core.store import RunStore


@dataclass
class Cfg:
    gamma: float = 0.5
    seed: int = 0


def body_counting(calls):
    def body(run):
        calls.append(run.key)
        for step in range(3):
            run.log({"step": step, "loss": 1.0 / (step + 1)})
        run.save_arrays(w=np.arange(4.0))
        return {"final_loss": 1 / 3}

    return body


def test_key_depends_on_config_kind_and_version():
    assert config_key("a", Cfg(), "1") == config_key("a", Cfg(), "1")
    assert config_key("a", Cfg(), "1") != config_key("a", Cfg(gamma=1.0), "1")
    assert config_key("a", Cfg(), "1") != config_key("b", Cfg(), "1")
    assert config_key("a", Cfg(), "1") != config_key("a", Cfg(), "2")


def test_finished_run_is_reused_and_force_recomputes(tmp_path):
    store, calls = RunStore(tmp_path), []
    run = store.get_or_run("demo", Cfg(), body_counting(calls))
    assert run.state == "done" and run.summary == {"final_loss": 1 / 3}
    assert [r["step"] for r in run.metrics()] == [0, 1, 2]
    np.testing.assert_array_equal(run.arrays()["w"], np.arange(4.0))
    again = store.get_or_run("demo", Cfg(), body_counting(calls))
    assert len(calls) == 1 and again.path == run.path
    forced = store.get_or_run("demo", Cfg(), body_counting(calls), force=True)
    assert len(calls) == 2 and forced.state == "done"
    assert len(forced.metrics()) == 3  # --force starts from a clean directory
    meta = json.loads((run.path / "config.json").read_text())
    assert meta["config"] == {"gamma": 0.5, "seed": 0} and meta["kind"] == "demo"


def test_divergence_is_recorded_as_final_failure(tmp_path):
    store, calls = RunStore(tmp_path), []

    def diverge(run):
        calls.append(1)
        raise RunFailed("NaN loss at step 12")

    run = store.get_or_run("demo", Cfg(), diverge)
    assert run.state == "failed" and run.failed_for_good and run.reusable()
    assert run.status()["reason"] == "NaN loss at step 12"
    store.get_or_run("demo", Cfg(), diverge)
    assert len(calls) == 1  # a divergence is an outcome, not retried


def test_error_is_recorded_and_retried(tmp_path):
    store = RunStore(tmp_path)

    def broken(run):
        raise ZeroDivisionError("boom")

    with pytest.raises(ZeroDivisionError):
        store.get_or_run("demo", Cfg(), broken)
    run = store.run("demo", Cfg())
    assert run.state == "failed" and "ZeroDivisionError: boom" in run.status()["reason"]
    assert not run.failed_for_good and not run.reusable()
    calls = []
    done = store.get_or_run("demo", Cfg(), body_counting(calls))
    assert done.state == "done" and not done.failed_for_good
    assert len(calls) == 1


def test_atomic_write_gives_ordinary_permissions(tmp_path):
    mask = os.umask(0o022)
    try:
        target = tmp_path / "f.json"
        atomic_write_bytes(target, b"{}")
    finally:
        os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == atomic_mod._FILE_MODE


def test_atomic_write_keeps_old_bytes_when_crashing_mid_write(tmp_path, monkeypatch):
    target = tmp_path / "status.json"
    atomic_write_bytes(target, b"old")

    def crash(fd):
        raise OSError("disk died during fsync")

    monkeypatch.setattr(atomic_mod.os, "fsync", crash)
    with pytest.raises(OSError, match="disk died"):
        atomic_write_bytes(target, b"new but never complete")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]  # no temp left


KILLED_RUN = textwrap.dedent(
    """
    import os, signal, sys
    from dataclasses import dataclass
    import numpy as np
    from smallinit.core.store import RunStore

    @dataclass
    class Cfg:
        gamma: float = 0.5
        seed: int = 0

    def body(run):
        run.log({"step": 0})
        run.save_arrays(w=np.zeros(3))
        os.kill(os.getpid(), signal.SIGKILL)  # killed before it could finish

    RunStore(sys.argv[1]).get_or_run("demo", Cfg(), body)
    """
)


def test_killed_run_is_never_mistaken_for_finished(tmp_path):
    proc = subprocess.run([sys.executable, "-c", KILLED_RUN, str(tmp_path)])
    assert proc.returncode == -signal.SIGKILL
    store, calls = RunStore(tmp_path), []
    run = store.run("demo", Cfg())
    assert run.state == "stale"  # status says running, but its process is gone
    assert not run.done
    with pytest.raises(StoreError, match="not done"):
        _ = run.summary
    run = store.get_or_run("demo", Cfg(), body_counting(calls))
    assert len(calls) == 1 and run.state == "done"


def test_live_run_is_not_taken_over(tmp_path):
    store = RunStore(tmp_path)
    run = store.writer("demo", Cfg())
    run.start()  # this very process owns it and is alive
    assert run.state == "running"
    with pytest.raises(StoreError, match="being computed by pid"):
        store.get_or_run("demo", Cfg(), body_counting([]))


@pytest.mark.parametrize("which", ["status.json", "arrays.npz", "metrics.jsonl", "config.json"])
def test_corrupt_file_gives_clear_error_naming_it(tmp_path, which):
    store = RunStore(tmp_path)
    run = store.get_or_run("demo", Cfg(), body_counting([]))
    path = run.path / which
    if which == "metrics.jsonl":
        lines = path.read_text().splitlines()
        path.write_text("\n".join([lines[0], "{not json", lines[2]]) + "\n")
    else:
        path.write_bytes(b"\x00garbage{")
    with pytest.raises(StoreError) as err:
        if which == "status.json":
            _ = run.state
        elif which == "arrays.npz":
            run.arrays()
        elif which == "metrics.jsonl":
            run.metrics()
        else:
            list(store.runs("demo"))
    message = str(err.value)
    assert str(path) in message and "corrupt" in message and "\n" not in message


def test_torn_last_metrics_line_of_unfinished_run_is_dropped(tmp_path):
    run = RunStore(tmp_path).writer("demo", Cfg())
    run.start()
    run.log({"step": 0})
    with run.metrics_path.open("a") as fh:
        fh.write('{"step": 1, "lo')  # the process died mid-append
    assert run.metrics() == [{"step": 0}]


def test_listing_runs_reads_configs_back(tmp_path):
    store = RunStore(tmp_path)
    for g in (0.5, 1.0):
        store.get_or_run("demo", Cfg(gamma=g), body_counting([]))
    listed = list(store.runs("demo"))
    assert sorted(r.config["gamma"] for r in listed) == [0.5, 1.0]
    assert all(r.state == "done" for r in listed)


def test_store_root_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SMALLINIT_RUNS", str(tmp_path / "elsewhere"))
    assert RunStore().root == tmp_path / "elsewhere"
    monkeypatch.delenv("SMALLINIT_RUNS")
    monkeypatch.chdir(tmp_path)
    assert RunStore().root == tmp_path / "runs"
