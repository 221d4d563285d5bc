"""Launching ``torchrun`` from the tests: the venv's own launcher, one retry, no stray ranks."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path


def torchrun_path() -> str:
    """The ``torchrun`` installed with torch in this interpreter's environment."""
    found = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    assert found, "torchrun is installed with torch"
    return found


def run_torchrun(args: list[str], timeout: float = 120) -> None:
    """``torchrun ARGS`` with one thread per rank; one retry, since the free-port rendezvous
    can race on a busy host; a hang kills torchrun and its workers (its own session)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", SMALLINIT_QUIET="1")
    cmd = [torchrun_path(), *args]
    for attempt in range(2):
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        try:
            _, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
        if proc.returncode == 0:
            return
        print(f"torchrun attempt {attempt} failed:\n{stderr[-3000:]}")
    raise AssertionError(f"torchrun failed twice:\n{stderr[-3000:]}")


def free_port() -> int:
    """A TCP port free on localhost now (the rendezvous binds it a moment later)."""
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_torchrun_nodes(nodes: int, args: list[str], timeout: float = 180) -> None:
    """``nodes`` torchrun launchers side by side on this host, as on ``nodes`` machines:
    ``--nnodes N --node_rank i`` with a c10d rendezvous at localhost (the first launcher to
    bind the port hosts its store, the others join it); one retry on a fresh port."""
    env = dict(os.environ, OMP_NUM_THREADS="1", SMALLINIT_QUIET="1")
    errors = ""
    for attempt in range(2):
        port = free_port()
        procs = [
            subprocess.Popen(
                [
                    torchrun_path(),
                    "--nnodes",
                    str(nodes),
                    "--node_rank",
                    str(rank),
                    "--rdzv-backend",
                    "c10d",
                    "--rdzv-endpoint",
                    f"localhost:{port}",
                    "--rdzv-id",
                    f"smallinit-test-{port}",
                    *args,
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                start_new_session=True,
            )
            for rank in range(nodes)
        ]
        try:
            outcomes = [p.communicate(timeout=timeout) for p in procs]
        except subprocess.TimeoutExpired:
            for p in procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
            raise
        if all(p.returncode == 0 for p in procs):
            return
        errors = "\n".join(err[-2000:] for _, err in outcomes)
        print(f"multi-node torchrun attempt {attempt} failed:\n{errors}")
    raise AssertionError(f"multi-node torchrun failed twice:\n{errors}")
