"""One writer per run: concurrent callers, leases, temp names."""

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass

import numpy as np
import pytest

from smallinit.core import lease as lease_mod
from smallinit.core import store as store_mod
from smallinit.core.atomic import atomic_write_bytes, atomic_write_json, temp_path
from smallinit.core.errors import StoreError
from smallinit.core.store import RunStore

STEPS = 44


@dataclass
class Cfg:
    gamma: float = 0.5
    seed: int = 0


CONTENDER = textwrap.dedent(
    """
    import json, os, sys, time
    from dataclasses import dataclass
    import numpy as np
    from smallinit.core.store import RunStore

    root, ran, ready, go, out, force, steps = sys.argv[1:8]

    @dataclass
    class Cfg:
        gamma: float = 0.5
        seed: int = 0

    def train(run):  # a tiny training: one metrics record per step, arrays, a summary
        with open(ran, "a") as fh:
            fh.write(f"{os.getpid()}\\n")
        w = np.zeros(3)
        for step in range(int(steps)):
            w = w + 0.1
            run.log({"step": step, "loss": 1.0 / (step + 1)})
            if step % 11 == 0:
                run.save_arrays(w=w)
            time.sleep(0.001)
        run.save_arrays(w=w)
        return {"final_loss": 1.0 / int(steps), "pid": os.getpid()}

    open(ready, "w").close()
    while not os.path.exists(go):  # the barrier: both processes are imported and waiting
        time.sleep(0.0005)
    try:
        run = RunStore(root).get_or_run("demo", Cfg(), train, force=force == "1")
        result = ["ok", run.summary]
    except BaseException as err:
        result = ["error", f"{type(err).__name__}: {err}"]
    with open(out, "w") as fh:
        json.dump(result, fh)
    """
)


def _race(tmp_path, trial, *, force=(False, False)):
    """Two processes, released at the same instant, ask for the same run."""
    d = tmp_path / f"trial-{trial}"
    d.mkdir()
    root, ran, go = d / "runs", d / "ran.txt", d / "go"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                CONTENDER,
                str(root),
                str(ran),
                str(d / f"ready-{i}"),
                str(go),
                str(d / f"out-{i}"),
                "1" if f else "0",
                str(STEPS),
            ]
        )
        for i, f in enumerate(force)
    ]
    deadline = time.monotonic() + 60
    while not all((d / f"ready-{i}").exists() for i in range(2)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.005)
    go.touch()
    codes = [p.wait(timeout=60) for p in procs]
    results = [json.loads((d / f"out-{i}").read_text()) for i in range(2)]
    return RunStore(root), ran, results, codes


def _check_race(store, ran, results, exitcodes):
    assert exitcodes == [0, 0]
    assert [r[0] for r in results] == ["ok", "ok"], results
    writers = ran.read_text().split()
    assert len(writers) == 1  # exactly one process trained
    assert results[0][1] == results[1][1]  # both got the same result
    assert results[0][1]["pid"] == int(writers[0])
    run = store.run("demo", Cfg())
    steps = [r["step"] for r in run.metrics()]
    assert steps == list(range(STEPS))  # no duplicated or lost records
    np.testing.assert_allclose(run.arrays()["w"], 0.1 * STEPS)
    leftovers = [p.name for p in run.path.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_two_processes_on_one_run_train_it_once(tmp_path):
    """Started at the same instant (a barrier) on one run key: exactly one trains, no
    duplicated metrics, no crash, both return its result (3 trials; 20 in the slow test)."""
    for trial in range(3):
        _check_race(*_race(tmp_path, trial))


@pytest.mark.slow
def test_two_processes_on_one_run_train_it_once_20_trials(tmp_path):
    for trial in range(20):  # about 30 s on a busy 2-core machine
        _check_race(*_race(tmp_path, trial))


@pytest.mark.parametrize("trial", range(2))
def test_two_forced_processes_at_once_train_once_and_agree(tmp_path, trial):
    """Two --force at the same instant: the second waits and takes the first one's fresh
    result (it was finished after the second was asked)."""
    store = RunStore(tmp_path / f"runs-{trial}")
    old = store.get_or_run("demo", Cfg(), lambda r: {"final_loss": 9.0, "pid": -1})
    assert old.summary["pid"] == -1
    store, ran, results, codes = _race(tmp_path, trial, force=(True, True))
    _check_race(store, ran, results, codes)
    assert results[0][1]["pid"] != -1  # the old result was replaced


def test_waiting_caller_logs_and_reuses(tmp_path, caplog):
    """A second caller (a thread here, with its own lock descriptor) waits for the writer."""
    store, started, release = RunStore(tmp_path), threading.Event(), threading.Event()
    calls = []

    def slow_body(run):
        calls.append(1)
        started.set()
        release.wait(10)
        run.log({"step": 0})
        return {"v": 1}

    writer = threading.Thread(target=lambda: store.get_or_run("demo", Cfg(), slow_body))
    writer.start()
    assert started.wait(10)
    assert store.run("demo", Cfg()).state == "running"
    threading.Timer(0.5, release.set).start()
    with caplog.at_level("INFO", logger="smallinit.core.store"):
        run = store.get_or_run("demo", Cfg(), slow_body)
    writer.join()
    assert calls == [1] and run.summary == {"v": 1}
    assert any("waiting for pid" in r.getMessage() for r in caplog.records)


def test_a_run_cannot_wait_for_itself(tmp_path):
    store = RunStore(tmp_path)
    with pytest.raises(StoreError, match="this very process"):
        store.get_or_run("demo", Cfg(), lambda r: store.get_or_run("demo", Cfg(), dict))


# ----------------------------------------------------------------------------- leases
def _foreign_status(renewed_ago, lease_s=60.0):
    """status.json of a writer on another host (another kernel: its lock is invisible)."""
    return {
        "state": "running",
        "pid": 1,
        "host": "elsewhere",
        "boot": "another-kernel",
        "token": "feedbeef",
        "started": "2026-01-01T00:00:00+0000",
        "renewed": time.time() - renewed_ago,
        "lease_s": lease_s,
    }


def _plant(store, status):
    run = store.writer("demo", Cfg())
    run.path.mkdir(parents=True)
    atomic_write_json(
        run.path / "config.json",
        {  # as that writer wrote it
            "kind": "demo",
            "key": run.key,
            "version": "1",
            "config": {"gamma": 0.5, "seed": 0},
        },
    )
    run.log({"step": 0, "from": "dead writer"})
    run.status_path.write_text(json.dumps(status))
    return run


def test_expired_lease_of_another_host_is_stale_and_recomputed(tmp_path):
    store = RunStore(tmp_path)
    run = _plant(store, _foreign_status(renewed_ago=120))
    assert run.state == "stale"
    calls = []
    store.get_or_run("demo", Cfg(), lambda r: calls.append(1) or {"v": 2})
    assert calls == [1] and run.summary == {"v": 2}


def test_expired_lease_of_another_host_can_be_forced(tmp_path):
    store = RunStore(tmp_path)
    run = _plant(store, _foreign_status(renewed_ago=120))
    store.get_or_run("demo", Cfg(), lambda r: {"v": 3}, force=True)
    assert run.summary == {"v": 3}
    assert run.metrics() == []  # --force started from a clean directory


def test_live_lease_of_another_host_makes_the_caller_wait(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(store_mod, "POLL_S", 0.05)
    store = RunStore(tmp_path)
    run = _plant(store, _foreign_status(renewed_ago=0))
    assert run.state == "running"

    def remote_finishes():
        time.sleep(0.6)
        atomic_write_json(run.status_path, {"state": "done", "summary": {"v": "remote"}})

    threading.Thread(target=remote_finishes).start()
    calls, t0 = [], time.monotonic()
    with caplog.at_level("WARNING", logger="smallinit.core.store"):
        got = store.get_or_run("demo", Cfg(), lambda r: calls.append(1) or {"v": "local"})
    assert time.monotonic() - t0 >= 0.5
    assert calls == [] and got.summary == {"v": "remote"}  # waited, then reused
    assert any("holds the lease" in r.getMessage() for r in caplog.records)


def test_lease_that_lapses_while_waiting_is_taken_over(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "POLL_S", 0.05)
    store = RunStore(tmp_path)
    run = _plant(store, _foreign_status(renewed_ago=0, lease_s=0.5))
    calls, t0 = [], time.monotonic()
    store.get_or_run("demo", Cfg(), lambda r: calls.append(1) or {"v": 4})
    assert time.monotonic() - t0 >= 0.4 and calls == [1] and run.summary == {"v": 4}


def test_same_kernel_dead_writer_with_reused_pid_is_stale_once_lease_lapses(tmp_path):
    """The pid of a dead writer now belongs to another live process (here: this one), and
    the lock is free: stale once the lease lapses, not running forever."""
    store = RunStore(tmp_path)
    status = _foreign_status(renewed_ago=0)
    status.update(boot=lease_mod.BOOT_ID, host=socket.gethostname(), pid=os.getpid())
    run = _plant(store, status)
    assert run.state == "running"  # pid alive, lease fresh: cannot rule the writer dead
    status["renewed"] = time.time() - 120
    run.status_path.write_text(json.dumps(status))
    assert run.state == "stale"


def test_heartbeat_renews_the_lease_and_final_status_ends_it(tmp_path, monkeypatch):
    monkeypatch.setattr(lease_mod, "HEARTBEAT_S", 0.05)
    store = RunStore(tmp_path)
    seen = []

    def body(run):
        seen.append(run.status()["renewed"])
        time.sleep(0.4)
        seen.append(run.status()["renewed"])
        return {}

    run = store.get_or_run("demo", Cfg(), body)
    assert seen[1] > seen[0]
    assert run.status()["state"] == "done" and "renewed" not in run.status()
    assert lease_mod.RunLock.is_free(run.lock_path)


def test_writer_whose_lease_was_taken_over_does_not_record(tmp_path):
    store = RunStore(tmp_path)

    def body(run):  # meanwhile another host decided the lease lapsed and took the run
        run.status_path.write_text(json.dumps(_foreign_status(renewed_ago=0)))
        return {"v": 5}

    with pytest.raises(StoreError, match="taken over by pid 1 on elsewhere"):
        store.get_or_run("demo", Cfg(), body)
    assert store.run("demo", Cfg()).status()["host"] == "elsewhere"


def test_a_corrupt_status_is_set_aside_and_recomputed(tmp_path, caplog):
    store = RunStore(tmp_path)
    run = store.get_or_run("demo", Cfg(), lambda r: {"v": 1})
    run.status_path.write_bytes(b"\x00garbage{")
    with pytest.raises(StoreError, match="corrupt"):
        run.status()
    with caplog.at_level("WARNING", logger="smallinit.core.store"):
        assert store.get_or_run("demo", Cfg(), lambda r: {"v": 2}).summary == {"v": 2}
    kept = list((tmp_path / ".corrupt" / "demo").iterdir())
    assert [p.name.split(".")[0] for p in kept] == [run.key]
    assert (kept[0] / "status.json").read_bytes() == b"\x00garbage{"  # kept as it was
    assert any(
        "status.json is corrupt" in r.getMessage() and "recomputing" in r.getMessage()
        for r in caplog.records
    )


def test_force_clears_a_corrupt_status(tmp_path):
    store = RunStore(tmp_path)
    run = store.get_or_run("demo", Cfg(), lambda r: {"v": 1})
    run.status_path.write_bytes(b"\x00garbage{")
    assert store.get_or_run("demo", Cfg(), lambda r: {"v": 2}, force=True).summary == {"v": 2}


# ----------------------------------------------------------------------------- temp names
def test_temp_names_are_unique_per_call():
    names = {temp_path("/x/model.pt") for _ in range(1000)}
    assert len(names) == 1000
    assert all(
        n.parent.as_posix() == "/x" and n.name.startswith(f".model.pt.{os.getpid()}.")
        for n in names
    )


def test_concurrent_writers_of_one_file_never_collide(tmp_path):
    target, errors = tmp_path / "status.json", []
    payloads = [bytes([65 + i]) * 100_000 for i in range(8)]

    def writer(data):
        try:
            for _ in range(20):
                atomic_write_bytes(target, data)
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(d,)) for d in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert target.read_bytes() in payloads  # one whole payload, never a mix
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]


@pytest.mark.slow
def test_two_llm_train_commands_on_one_config_train_once(tmp_path):
    """The audit's case end to end: two `smallinit llm train` at once on one tiny config."""
    overrides = [
        "model.d_model=32",
        "model.n_layers=1",
        "model.n_heads=2",
        "model.vocab_size=320",
        "model.context=32",
        "train.steps=40",
        "train.batch_size=4",
        "train.log_every=1",
        "train.eval_every=10",
        "train.checkpoint_every=5",
        "data.synthetic_items=100",
        "data.synthetic_val_items=20",
        "eval.answer_items=4",
        "eval.token_windows=2",
    ]
    env = {**os.environ, "SMALLINIT_CACHE": str(tmp_path / "cache"), "SMALLINIT_QUIET": "1"}
    for trial in range(3):
        runs = tmp_path / f"runs-{trial}"
        argv = [
            sys.executable,
            "-m",
            "smallinit",
            "llm",
            "train",
            "--runs-dir",
            str(runs),
            *overrides,
        ]
        procs = [
            subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)
        ]
        outs = [p.communicate(timeout=300)[0] for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
        assert outs[0] == outs[1]  # the same run and summary
        (run_dir,) = (runs / "llm-train").iterdir()
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines]
        keys = [(r["step"], tuple(sorted(r))) for r in records]
        assert len(keys) == len(set(keys))  # no step recorded twice
        assert sorted({r["step"] for r in records if "loss" in r}) == list(range(1, 41))
