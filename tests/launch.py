"""Launching ``torchrun`` from the tests: the venv's own launcher, one retry, no stray ranks."""

from __future__ import annotations

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
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env, start_new_session=True)
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
