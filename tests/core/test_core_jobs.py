"""The one job driver: dedupe, workers that die, workers that outlive their parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

from smallinit.core.jobs import RunSpec, run_specs
from smallinit.core.store import RunStore

HERE = Path(__file__).resolve().parent


@dataclass
class BodySpec(RunSpec):
    """A run of kind ``test-job`` whose body is the method :meth:`body`."""

    kind = "test-job"

    def compute(self, store: RunStore, force: bool):
        return store.get_or_run(self.kind, self.config, self.body, force=force)

    def body(self, run) -> dict:
        raise NotImplementedError


@dataclass
class SquareSpec(BodySpec):
    """Stores i², or kills its own process (as the OOM killer would) when asked."""

    def body(self, run) -> dict:
        cfg = self.config
        if cfg.get("die"):
            os.kill(os.getpid(), signal.SIGKILL)
        if cfg.get("sleep"):
            (Path(cfg["pid_dir"]) / f"{os.getpid()}.pid").write_text("")
            time.sleep(cfg["sleep"])
        return {"square": cfg["i"] ** 2, "pid": os.getpid()}


def job(i: int, **extra) -> SquareSpec:
    return SquareSpec({"i": i, **extra}, {"i": i})


def test_a_dead_worker_fails_its_run_only(tmp_path):
    store = RunStore(tmp_path / "runs")
    jobs = [job(1), job(2, die=True), job(3), job(4), job(1)]  # job(1) twice: runs once
    results = run_specs(jobs, store, workers=2)
    states = [r.state for _, r in results]
    assert states == ["done", "failed", "done", "done", "done"]
    assert [r.summary["square"] for _, r in results if r.done] == [1, 9, 16, 1]
    assert results.runs[0].path == results.runs[4].path
    status = results.runs[1].status()
    assert "SIGKILL" in status["reason"] and status["final"] is False  # retried next time
    assert [j.tags["i"] for j, _ in results.failed()] == [2]
    pids = {r.summary["pid"] for _, r in results if r.done}
    assert os.getpid() not in pids and len(pids) == 3  # each run in its own worker


def test_workers_exit_with_their_parent(tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(HERE)!r})
        from test_core_jobs import job
        from smallinit.core.jobs import run_specs
        from smallinit.core.store import RunStore
        if __name__ == "__main__":
            jobs = [job(i, sleep=120, pid_dir={str(pid_dir)!r}) for i in range(2)]
            run_specs(jobs, RunStore({str(tmp_path / "runs")!r}), workers=2)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.time() + 120
        while len(list(pid_dir.glob("*.pid"))) < 2:
            assert time.time() < deadline and parent.poll() is None, "workers never started"
            time.sleep(0.2)
        workers = [int(p.stem) for p in pid_dir.glob("*.pid")]
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.time() + 10
        alive = workers
        while alive and time.time() < deadline:
            time.sleep(0.2)
            alive = [w for w in workers if _alive(w)]
        assert not alive, f"workers {alive} outlived their parent"
    finally:
        if parent.poll() is None:
            parent.kill()
        for p in pid_dir.glob("*.pid"):
            if _alive(int(p.stem)):
                os.kill(int(p.stem), signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (dead, not yet reaped by init) counts as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
