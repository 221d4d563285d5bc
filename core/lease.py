"""One writer per run: the flock of the process computing it, and its lease.

The process computing a run holds an exclusive ``flock`` on
``<root>/.locks/<kind>/<key>.lock`` (the kernel drops it when the process dies, however it
dies) *and* a lease in ``status.json``: host, pid, kernel boot id, a random token and the time
it was last renewed; a heartbeat thread renews it every :data:`HEARTBEAT_S` seconds and it
expires :data:`LEASE_S` seconds after the last renewal. A ``running`` run is *stale*
(:func:`liveness`) when

* its writer ran on this kernel (same boot id; other containers of this machine included):
  the lock is free and the writer's pid is gone or its lease expired;
* its writer ran on another kernel (another host, VM or a rebooted machine): its lease
  expired (so clocks of hosts sharing a store must agree to well within :data:`LEASE_S`).

Exclusion between hosts relies on the file system honouring ``flock`` across hosts (NFSv4
and Lustre with ``flock`` do); the lease only detects writers that died.
"""

from __future__ import annotations

import fcntl
import io
import logging
import os
import secrets
import socket
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from smallinit.core.atomic import _FILE_MODE, atomic_write_json
from smallinit.core.errors import StoreError, one_line

log = logging.getLogger(__name__)

LEASE_S = 60.0  # a writer that has not renewed its lease for this long is presumed dead
HEARTBEAT_S = 5.0  # how often a live writer renews its lease


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _boot_id() -> str:
    """Which running kernel this is: processes with the same boot id see each other's
    ``flock`` locks and pids (containers of one machine included)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "host:" + socket.gethostname()


BOOT_ID = _boot_id()
WRITER_THREADS: dict[Path, int] = {}  # lock file -> thread of this process writing that run


class RunLock:
    """An exclusive ``flock`` on a run's lock file, held by the process computing it."""

    def __init__(self, path: Path):
        self.path = path
        self._file: io.BufferedRandom | None = None  # closed (lock dropped) if garbage

    def acquire(self, *, block: bool) -> bool:
        """Take the lock (waiting for it if ``block``); False if another process holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, _FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        self._file = os.fdopen(fd, "r+b")
        return True

    def release(self) -> None:
        if self._file is not None:
            file, self._file = self._file, None
            file.close()  # closing the only descriptor drops the flock

    @staticmethod
    def is_free(path: Path) -> bool | None:
        """Whether no process holds the lock at ``path`` (None: cannot tell)."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return True
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError:
            return None
        finally:
            os.close(fd)  # also drops the shared lock if it was taken
        return True


class Lease:
    """This process's claim on a run: its lock, token and the heartbeat renewing the
    ``renewed`` time in ``status.json``."""

    def __init__(self, run: Any, lock: RunLock):  # run: the RunWriter it leases
        self.run = run
        self.lock = lock
        self.thread = threading.get_ident()
        self.token = secrets.token_hex(8)
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def status(self) -> dict[str, Any]:
        return {
            "state": "running",
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "boot": BOOT_ID,
            "token": self.token,
            "started": now(),
            "renewed": time.time(),
            "lease_s": LEASE_S,
        }

    def start_heartbeat(self) -> None:
        ref = weakref.ref(self)
        stop = self._stop

        def beat() -> None:
            while not stop.wait(HEARTBEAT_S):
                lease = ref()
                if lease is None or not lease.renew():
                    return
                del lease

        self._thread = threading.Thread(target=beat, name=f"lease-{self.run.key}", daemon=True)
        self._thread.start()

    def renew(self) -> bool:
        """Push the lease's expiry forward; False (and stop) once it is no longer ours."""
        with self._mutex:
            if self._stop.is_set():
                return False
            try:
                status = self.run.status()
                if status.get("token") != self.token or status["state"] != "running":
                    log.error(
                        "run %s was taken over by pid %s on %s; this process no longer owns it",
                        self.run.path,
                        status.get("pid"),
                        status.get("host"),
                    )
                    return False
                status["renewed"] = time.time()
                atomic_write_json(self.run.status_path, status)
            except (OSError, StoreError) as err:
                log.warning("could not renew the lease on %s: %s", self.run.path, one_line(err))
            return True

    def end(self) -> None:
        """Stop the heartbeat (waiting for a renewal in flight) and keep the lock."""
        if WRITER_THREADS.get(self.run.lock_path) == self.thread:
            del WRITER_THREADS[self.run.lock_path]
        with self._mutex:
            self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def check_owned(self) -> None:
        """Raise :class:`StoreError` when another writer took the run over meanwhile."""
        status = self.run.status() if self.run.status_path.exists() else {}
        if status.get("token") != self.token:
            raise StoreError(
                f"run {self.run.path} was taken over by pid {status.get('pid')} on "
                f"{status.get('host')} after this process's lease lapsed (was it suspended "
                f"for more than {LEASE_S:g} s?); this process's result is not recorded"
            )


def liveness(status: dict[str, Any], status_path: Path, lock_free: bool | None) -> str:
    """``running`` or ``stale`` for a status that says ``running`` (see the module doc)."""
    renewed = status.get("renewed")
    if not isinstance(renewed, int | float):
        try:  # a status written before leases existed: its mtime is its last sign of life
            renewed = status_path.stat().st_mtime
        except OSError:
            renewed = 0.0
    lease_s = status.get("lease_s")
    lease_s = lease_s if isinstance(lease_s, int | float) and lease_s > 0 else LEASE_S
    expired = time.time() - renewed > lease_s
    pid = status.get("pid")
    boot = status.get("boot")
    if boot is None:  # written before leases: same host and pid, else the lease rule
        if status.get("host") == socket.gethostname() and isinstance(pid, int):
            return "running" if _pid_alive(pid) else "stale"
        return "stale" if expired else "running"
    if boot != BOOT_ID:
        return "stale" if expired else "running"
    if lock_free is False:
        return "running"
    pid_alive = isinstance(pid, int) and _pid_alive(pid)
    return "stale" if expired or not pid_alive else "running"
