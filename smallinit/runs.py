"""The run store: every experiment result on disk, keyed by its config.

A *run* is one config dataclass executed once. Its key is a hash of the canonical config,
its kind (``"toy-scan"``, ``"llm-train"``, ...) and a code version that the kind bumps
whenever its numbers would change. A run lives in ``<root>/<kind>/<key>/``::

    config.json    the config and how it was keyed (written first)
    status.json    {"state": "running" | "done" | "failed", ...} (written last)
    metrics.jsonl  one JSON record per line, appended as the run goes
    arrays.npz     named NumPy arrays (the run's large results)

Every file except the append-only ``metrics.jsonl`` is written atomically (a temporary file
with a unique name in the same directory, fsync, ``os.replace``), so a reader sees either
the old or the new bytes. ``status.json`` says ``done`` only after everything else is in
place: a run killed at any moment reads as ``running`` by a dead writer (*stale*), never as
finished, and is recomputed (or resumed from its own checkpoints) the next time it is asked
for.

One writer per run. The process computing a run holds an exclusive ``flock`` on
``<root>/.locks/<kind>/<key>.lock`` (the kernel drops it when the process dies, however it dies)
*and* a lease in ``status.json``: host, pid, kernel boot id, a random token and the time it
was last renewed; a heartbeat thread renews it every ``HEARTBEAT_S`` seconds and it expires
``LEASE_S`` seconds after the last renewal. A ``running`` run is stale when

* its writer ran on this kernel (same boot id; other containers of this machine included):
  the lock is free and the writer's pid is gone or its lease expired;
* its writer ran on another kernel (another host, VM or a rebooted machine): its lease
  expired (so clocks of hosts sharing a store must agree to well within ``LEASE_S``).

A second process asking :meth:`RunStore.get_or_run` for a run that another process is
computing logs that it waits, waits for that writer to finish (or for its lease to lapse)
and then reuses the result; with ``force`` it also waits, and takes the other writer's
result when that writer finished while it waited (a fresh result), else it recomputes.
Exclusion between hosts relies on the file system honouring ``flock`` across hosts (NFSv4
and Lustre with ``flock`` do); the lease only detects writers that died.

The root is ``$SMALLINIT_RUNS`` when set, else ``./runs``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import io
import json
import logging
import os
import secrets
import shutil
import socket
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from smallinit import integrity
from smallinit.config import canonical_json, config_to_dict
from smallinit.errors import ConfigError, CorruptRun, RunFailed, StoreError, one_line

log = logging.getLogger(__name__)

STORE_SCHEMA = 1
MANIFEST = "manifest"  # the status.json field of a finished run's files (smallinit.integrity)
STATES = ("absent", "running", "stale", "done", "failed")
LEASE_S = 60.0  # a writer that has not renewed its lease for this long is presumed dead
HEARTBEAT_S = 5.0  # how often a live writer renews its lease
POLL_S = 1.0  # how often a waiting process looks at a writer on another host


def _file_mode() -> int:
    """The mode a plain ``open()`` would give a new file (0o666 less the umask)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


_FILE_MODE = _file_mode()  # mkstemp makes 0o600 files; results should be readable like any


# ----------------------------------------------------------------------------- atomic writes
def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers never see a partial file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp",
                               dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(err, OSError) and err.filename is None and err.errno is not None:
            raise OSError(err.errno, err.strerror, str(path)) from None  # name the file
        raise


def temp_path(path: str | Path) -> Path:
    """A temporary name next to ``path``, unique to this process and call (pid and 64 random
    bits), for writers that need a path rather than bytes (``torch.save``); ``os.replace``
    it onto ``path`` when complete."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(8)}.tmp")


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as JSON atomically; NaN and ±inf are written as ``null`` (JSON has no
    token for them, and Python's ``NaN`` is unreadable by other tools)."""
    atomic_write_text(path, json_text(obj, indent=2) + "\n")


def json_text(obj: Any, *, indent: int | None = None) -> str:
    """Strict JSON of ``obj`` with keys sorted: every non-finite float becomes ``null``."""
    return json.dumps(finite_json(obj), indent=indent, sort_keys=True, allow_nan=False)


def finite_json(obj: Any) -> Any:
    """``obj`` as plain JSON data: NumPy arrays and scalars become lists and Python numbers,
    and every float that is NaN or ±inf becomes None, through dicts, lists and tuples."""
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite_json(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return finite_json(obj.tolist())
    if isinstance(obj, float | np.floating):
        return float(obj) if np.isfinite(obj) else None
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def atomic_save_npz(path: str | Path, arrays: dict[str, Any]) -> None:
    """``np.savez_compressed`` through a temporary file (no pickles: plain arrays only)."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    atomic_write_bytes(path, buf.getvalue())


def read_json(path: str | Path) -> Any:
    """Read a JSON file; a damaged one raises :class:`StoreError` naming the file: not a
    regular file (a FIFO would block), over 256 MiB, not JSON, or nested more than 64
    levels deep (the store's files nest a few; the parser and every recursive walk after
    it fail near 1000)."""
    path = Path(path)
    limit, max_depth = 256 * 1024**2, 64
    try:
        if path.exists() and not path.is_file():
            raise StoreError(f"{path} is corrupt (not a regular file); delete its run "
                             "directory or rerun with --force")
        if path.stat().st_size > limit:
            raise StoreError(f"{path} is corrupt (over {limit // 1024**2} MiB); delete its "
                             "run directory or rerun with --force")
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StoreError(f"{path} is missing") from None
    except OSError as err:  # a symlink loop, no permission, ...
        raise StoreError(f"{path} cannot be read ({err.strerror or one_line(err)})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise StoreError(
            f"{path} is corrupt ({one_line(err)}); delete its run directory or rerun with --force"
        ) from None
    except (RecursionError, MemoryError) as err:
        raise StoreError(f"{path} is corrupt ({type(err).__name__}: nested too deeply or too "
                         "large); delete its run directory or rerun with --force") from None
    level, depth = [data], 0  # level by level, not recursively
    while level:
        containers = [x for x in level if isinstance(x, dict | list)]
        if containers and depth >= max_depth:
            raise StoreError(f"{path} is corrupt (nested more than {max_depth} levels deep); "
                             "delete its run directory or rerun with --force")
        level = [v for x in containers for v in (x.values() if isinstance(x, dict) else x)]
        depth += 1
    return data


def config_key(kind: str, config: Any, version: str) -> str:
    """16 hex digits of SHA-256 over the canonical (kind, code version, config)."""
    payload = canonical_json(
        {"schema": STORE_SCHEMA, "kind": kind, "version": version, "config": _config_data(config)}
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def _config_data(config: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return config_to_dict(config)
    if isinstance(config, dict):
        return json.loads(canonical_json(config))
    raise TypeError(f"a run config must be a dataclass or a dict, got {type(config).__name__}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _boot_id() -> str:
    """Which running kernel this is: processes with the same boot id see each other's
    ``flock`` locks and pids (containers of one machine included)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "host:" + socket.gethostname()


BOOT_ID = _boot_id()
_WRITER_THREADS: dict[Path, int] = {}  # lock file -> thread of this process writing that run


# ----------------------------------------------------------------------------- one writer
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


class _Lease:
    """This process's claim on a run: its lock, token and the heartbeat renewing the
    ``renewed`` time in ``status.json``."""

    def __init__(self, run: Run, lock: RunLock):
        self.run = run
        self.lock = lock
        self.thread = threading.get_ident()
        self.token = secrets.token_hex(8)
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def status(self) -> dict[str, Any]:
        return {"state": "running", "pid": os.getpid(), "host": socket.gethostname(),
                "boot": BOOT_ID, "token": self.token, "started": _now(),
                "renewed": time.time(), "lease_s": LEASE_S}

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
                    log.error("run %s was taken over by pid %s on %s; this process no longer "
                              "owns it", self.run.path, status.get("pid"), status.get("host"))
                    return False
                status["renewed"] = time.time()
                atomic_write_json(self.run.status_path, status)
            except (OSError, StoreError) as err:
                log.warning("could not renew the lease on %s: %s", self.run.path, one_line(err))
            return True

    def end(self) -> None:
        """Stop the heartbeat (waiting for a renewal in flight) and keep the lock."""
        if _WRITER_THREADS.get(self.run.lock_path) == self.thread:
            del _WRITER_THREADS[self.run.lock_path]
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


def _liveness(status: dict[str, Any], status_path: Path, lock_free: bool | None) -> str:
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


# ----------------------------------------------------------------------------- one run
class Run:
    """One run directory. Create it through :meth:`RunStore.run`."""

    def __init__(self, path: Path, kind: str, key: str, config: Any, version: str):
        self.path = path
        self.kind = kind
        self.key = key
        self.config = config
        self.version = version
        self._lease: _Lease | None = None

    def __repr__(self) -> str:
        return f"Run({self.kind}/{self.key}, {self.state})"

    # -- files
    @property
    def status_path(self) -> Path:
        return self.path / "status.json"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def arrays_path(self) -> Path:
        return self.path / "arrays.npz"

    @property
    def lock_path(self) -> Path:
        """The lock file of the one writer, ``<root>/.locks/<kind>/<key>.lock`` (outside the
        run directory, so that clearing the directory keeps it, and out of kind listings)."""
        return self.path.parent.parent / ".locks" / self.path.parent.name / f"{self.path.name}.lock"

    @property
    def checkpoint_dir(self) -> Path:
        """Where a resumable run keeps its checkpoints (created on demand)."""
        d = self.path / "checkpoints"
        d.mkdir(parents=True, exist_ok=True)
        return d

    # -- state
    def status(self) -> dict[str, Any]:
        """The parsed ``status.json`` (``{"state": "absent"}`` when there is none)."""
        if not self.status_path.exists():
            return {"state": "absent"}
        try:
            status = read_json(self.status_path)
        except StoreError as err:
            raise self._corrupt(_bare(err)) from None
        if not isinstance(status, dict) or status.get("state") not in STATES:
            raise self._corrupt(f"{self.status_path} is corrupt (no valid state)")
        return status

    @property
    def state(self) -> str:
        """``absent``, ``running`` (a live writer holds it), ``stale`` (its writer died or
        its lease lapsed; see the module doc), ``done`` or ``failed``."""
        return self._state_of(self.status())

    def _state_of(self, status: dict[str, Any], *, lock_free: bool | None = None) -> str:
        if status["state"] != "running":
            return status["state"]
        if self._lease is not None and status.get("token") == self._lease.token:
            return "running"  # this very object is the writer
        if lock_free is None and status.get("boot") == BOOT_ID:
            lock_free = RunLock.is_free(self.lock_path)
        return _liveness(status, self.status_path, lock_free)

    @property
    def done(self) -> bool:
        return self.state == "done"

    @property
    def name(self) -> str:
        return f"{self.kind}/{self.key}"

    # -- integrity (smallinit.integrity)
    def identity_problem(self) -> str | None:
        """Why ``config.json`` does not prove that this folder is the run its key names (it
        must name this kind and key and hash to the key), or None when it does."""
        path = self.path / "config.json"
        try:
            meta = read_json(path)
        except StoreError as err:
            return _bare(err)
        if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict):
            return f"{path} holds no config object"
        if meta.get("kind") != self.kind or meta.get("key") != self.key:
            return (f"{path} names run {meta.get('kind')}/{meta.get('key')}, not the "
                    "folder's (was the folder renamed or copied?)")
        try:
            key = config_key(self.kind, meta["config"], str(meta.get("version", "1")))
        except (ValueError, TypeError, RecursionError):
            return f"{path} holds a config that cannot be keyed"
        if key != self.key:
            return (f"{path} does not hash to the folder's key (its config was edited after "
                    "the run was made)")
        return None

    def verify(self, *, hashes: bool = True, adopt: bool = True) -> None:
        """Raise :class:`CorruptRun`, naming the run and the file, when the folder is not
        what its key says: a damaged ``status.json``, a ``config.json`` that does not hash to
        the key, or (for a finished run) a file that differs from its manifest; sizes always,
        SHA-256 too with ``hashes``. A finished run stored before manifests existed gets
        one now (``adopt``, when the store is writable and no writer holds the run)."""
        status = self.status()
        if status["state"] == "absent":
            return
        problem = self.identity_problem()
        if problem is None and status["state"] in ("done", "failed"):
            manifest = status.get(MANIFEST)
            if manifest is None:
                if adopt:
                    self._adopt(status)
                return
            problem = integrity.manifest_problem(self.path, manifest, hashes=hashes)
        if problem:
            raise self._corrupt(problem)

    def _corrupt(self, problem: str) -> CorruptRun:
        return CorruptRun(f"run {self.name} is corrupt: {problem}; the command that made it, "
                          "run again with the same config, recomputes it (keeping the damaged "
                          "folder under .corrupt/ of the store)", problem)

    def _adopt(self, status: dict[str, Any]) -> None:
        """Write the manifest of a finished run that has none (stored before manifests),
        under the run's lock; skipped where the store cannot be written."""
        lock = RunLock(self.lock_path)
        try:
            if not lock.acquire(block=False):
                return
        except OSError:
            return
        try:
            if self.status() == status:
                status = {**status, MANIFEST: integrity.build_manifest(self.path)}
                atomic_write_json(self.status_path, status)
                log.debug("recorded the manifest of %s", self.name)
        except (OSError, StoreError) as err:
            log.debug("could not record the manifest of %s: %s", self.name, one_line(err))
        finally:
            lock.release()

    def file(self, name: str) -> Path:
        """The path of the run's file ``name``, checked first: for a finished run its
        ``config.json`` hashes to the key and the file matches its manifest entry (size and
        SHA-256); :class:`CorruptRun` names what differs, :class:`StoreError` a missing
        file. A run still being written is not checked."""
        path = self.path / name
        status = self.status() if self.status_path.exists() else {"state": "absent"}
        if status["state"] in ("done", "failed"):
            problem = self.identity_problem()
            manifest = status.get(MANIFEST)
            if problem is None and manifest is None:
                self._adopt(status)
                manifest = self.status().get(MANIFEST)
            if problem is None and isinstance(manifest, dict):
                for listed in dict.fromkeys(("config.json", name)):  # the config is read too
                    if problem is None and listed in manifest:
                        problem = integrity.entry_problem(self.path, listed, manifest[listed])
                if problem is None and name not in manifest and path.exists():
                    problem = f"{path} is not in its manifest (added after the run finished)"
            if problem:
                raise self._corrupt(problem)
        if not path.is_file():
            raise StoreError(f"{path} is missing")
        return path

    def reusable(self) -> bool:
        """Whether the store hands this run back as it is: done, or failed for good (a
        divergence), and verified (:meth:`verify`)."""
        try:
            if not _outcome(self.status()):
                return False
            self.verify()
        except StoreError:
            return False
        return True

    def set_aside(self) -> Path:
        """Move the run folder to ``<root>/.corrupt/<kind>/<key>.<time>`` (kept for
        inspection, out of the store's listings); returns where it went."""
        dest = (self.path.parent.parent / ".corrupt" / self.kind
                / f"{self.key}.{time.strftime('%Y%m%dT%H%M%S')}.{secrets.token_hex(4)}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.path, dest)
        return dest

    def _sweep_temp(self) -> None:
        """Remove what dead writers left: temporary files (``.<name>.<pid>.<random>.tmp``)
        below the folder and half-deleted copies (``.<key>.*.trash``) beside it. Called by
        the run's new writer, which holds its lock, so none of them is in use."""
        for tmp in self.path.rglob(".*.tmp") if self.path.is_dir() else ():
            with contextlib.suppress(OSError):
                tmp.unlink()
                log.info("removed %s, left by a writer that died", tmp)
        for trash in self.path.parent.glob(f".{self.key}.*.trash"):
            shutil.rmtree(trash, ignore_errors=True)

    # -- lifecycle
    def start(self, lock: RunLock | None = None) -> None:
        """Claim the run for this process and mark it running; writes ``config.json`` first.

        Takes the run's lock (``lock`` if the caller already holds it) and starts the
        heartbeat that renews the lease; :meth:`finish` or :meth:`fail` end both. Raises
        :class:`StoreError` if another process holds the lock."""
        if self._lease is not None:
            raise StoreError(f"run {self.path} is already started by this process")
        if lock is None:
            lock = RunLock(self.lock_path)
            if not lock.acquire(block=False):
                raise StoreError(f"run {self.path} is being computed by another process "
                                 f"({self._holder()}); wait for it or stop it")
        self._lease = _Lease(self, lock)
        _WRITER_THREADS[self.lock_path] = self._lease.thread
        try:
            self._sweep_temp()
            self._write_start()
        except BaseException:
            self._abandon()
            raise
        self._lease.start_heartbeat()

    def _write_start(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write_json(
            self.path / "config.json",
            {
                "kind": self.kind,
                "key": self.key,
                "version": self.version,
                "config": _config_data(self.config),
                "config_class": _class_path(self.config),
            },
        )
        atomic_write_json(self.status_path, self._lease.status())

    def _abandon(self) -> None:
        """Stop renewing the lease and drop the lock without a final status, as if this
        process had been killed (for tests of crash recovery)."""
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.end()
            lease.lock.release()

    def _holder(self) -> str:
        """Who holds the run, in words (for messages)."""
        try:
            status = self.status()
        except StoreError:
            return "unknown writer"
        return f"pid {status.get('pid')} on host {status.get('host')}"

    def _end(self, status: dict[str, Any]) -> None:
        """Write the final ``status`` (if the run is still ours) and let go of it."""
        lease, self._lease = self._lease, None
        try:
            if lease is not None:
                lease.end()
                lease.check_owned()
                status["token"] = lease.token
            atomic_write_json(self.status_path, status)
        finally:
            if lease is not None:
                lease.lock.release()

    def finish(self, summary: dict[str, Any] | None = None) -> None:
        """Mark the run done: the last write of a successful run, with the manifest of
        every file it keeps (:mod:`smallinit.integrity`)."""
        status = self.status()
        self._end({"state": "done", "started": status.get("started"), "finished": _now(),
                   "summary": summary or {}, MANIFEST: integrity.build_manifest(self.path)})

    def fail(self, reason: str, *, final: bool = True) -> None:
        """Record the run as failed. ``final`` failures (divergence) are kept as the
        outcome; others (errors, interruptions) are retried the next time."""
        try:
            status = self.status() if self.status_path.exists() else {}
        except StoreError:
            status = {}
        end = {"state": "failed", "reason": one_line(reason), "final": final,
               "started": status.get("started"), "finished": _now()}
        if final:  # kept as the run's outcome, so its files are proven like a done run's
            end[MANIFEST] = integrity.build_manifest(self.path)
        self._end(end)

    @property
    def summary(self) -> dict[str, Any]:
        """The summary a done run was finished with."""
        status = self.status()
        if status["state"] != "done":
            raise StoreError(f"run {self.path} is {self.state}, not done; it has no summary")
        return status.get("summary", {})

    # -- results
    def log(self, record: dict[str, Any]) -> None:
        """Append one metrics record (a JSON line, flushed) to ``metrics.jsonl``."""
        line = json_text(record)
        try:
            with self.metrics_path.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")
                fh.flush()
        except OSError as err:
            if err.filename is not None or err.errno is None:
                raise
            raise OSError(err.errno, err.strerror, str(self.metrics_path)) from None

    def metrics(self) -> list[dict[str, Any]]:
        """All metrics records. A torn last line of an unfinished run is dropped; any other
        damage raises :class:`StoreError` naming the file and line."""
        try:
            path = self.file("metrics.jsonl")
        except CorruptRun:
            raise
        except StoreError:
            return []  # the run logged nothing
        lines = path.read_text(encoding="utf-8").splitlines()
        records = []
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except (json.JSONDecodeError, RecursionError):
                if i == len(lines) and self.state != "done":
                    log.warning("dropping torn last line of %s", self.metrics_path)
                    break
                raise StoreError(
                    f"{self.metrics_path} is corrupt at line {i}; delete its run directory "
                    "or rerun with --force"
                ) from None
        return records

    def rewrite_metrics(self, records: list[dict[str, Any]]) -> None:
        """Replace ``metrics.jsonl`` atomically (used when resuming from a checkpoint)."""
        text = "".join(json_text(r) + "\n" for r in records)
        atomic_write_text(self.metrics_path, text)

    def save_arrays(self, **arrays: Any) -> None:
        """Write ``arrays.npz`` atomically (replacing any previous one)."""
        atomic_save_npz(self.arrays_path, arrays)

    def arrays(self) -> dict[str, np.ndarray]:
        """Load ``arrays.npz``; a damaged file raises :class:`StoreError` naming it."""
        path = self.file("arrays.npz")
        try:
            with np.load(path, allow_pickle=False) as data:
                return {k: data[k] for k in data.files}
        except Exception as err:  # zipfile/zlib/ValueError: all mean the same to a user
            raise StoreError(
                f"{self.arrays_path} is corrupt ({one_line(err)}); delete its run directory "
                "or rerun with --force"
            ) from None

    def write_json(self, name: str, obj: Any) -> Path:
        """Write an extra JSON result file into the run directory, atomically."""
        path = self.path / name
        atomic_write_json(path, obj)
        return path

    def read_json(self, name: str) -> Any:
        """An extra JSON result file of the run, checked against its manifest (:meth:`file`)."""
        return read_json(self.file(name))

    def untouched(self) -> bool:
        """Whether the run directory holds nothing but what :meth:`start` wrote."""
        if not self.path.is_dir():
            return True
        return {p.name for p in self.path.iterdir()} <= {"config.json", "status.json"}

    def clear(self) -> None:
        """Delete everything in the run directory (what ``--force`` does before a rerun)."""
        if self.path.exists():
            trash = temp_path(self.path).with_suffix(".trash")
            os.replace(self.path, trash)
            shutil.rmtree(trash, ignore_errors=True)


def _class_path(config: Any) -> str | None:
    if dataclasses.is_dataclass(config):
        cls = type(config)
        return f"{cls.__module__}:{cls.__qualname__}"
    return None


# ----------------------------------------------------------------------------- the store
class RunStore:
    """Runs below one root directory (``$SMALLINIT_RUNS`` or ``./runs`` by default)."""

    def __init__(self, root: str | Path | None = None):
        if root is not None and not str(root).strip():
            raise ConfigError("the run store's folder is an empty path; give a folder, or None "
                              "for $SMALLINIT_RUNS or ./runs")
        if root is None:
            root = os.environ.get("SMALLINIT_RUNS") or Path.cwd() / "runs"
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"RunStore({str(self.root)!r})"

    def check_root(self) -> None:
        """Create the root if needed; :class:`StoreError` naming it and why when it is a
        file, lies below a file or cannot be written."""
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"run store root {self.root} is a file, not a folder; give a "
                             "folder with --runs-dir or $SMALLINIT_RUNS")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise StoreError(f"run store root {self.root} cannot be created "
                             f"({err.strerror or one_line(err)}); give a writable folder with "
                             "--runs-dir or $SMALLINIT_RUNS") from None
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise StoreError(f"run store root {self.root} is not writable; give a writable "
                             "folder with --runs-dir or $SMALLINIT_RUNS")

    def run(self, kind: str, config: Any, *, version: str = "1") -> Run:
        """The run for ``config`` (its directory need not exist yet)."""
        if not kind or "/" in kind or kind.startswith("."):
            raise StoreError(f"run kind {kind!r} is not allowed; use a plain name like 'toy-scan'")
        key = config_key(kind, config, version)
        return Run(self.root / kind / key, kind, key, config, version)

    def runs(self, kind: str) -> Iterator[Run]:
        """Every stored run of ``kind`` (config read back from its ``config.json``)."""
        base = self.root / kind
        if not base.is_dir():
            return
        for path in sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")):
            meta = read_json(path / "config.json")
            yield Run(path, kind, path.name, meta.get("config"), meta.get("version", "1"))

    def get_or_run(
        self,
        kind: str,
        config: Any,
        body: Callable[[Run], dict[str, Any] | None],
        *,
        version: str = "1",
        force: bool = False,
    ) -> Run:
        """Return the finished run for ``config``, computing it with ``body(run)`` if needed.

        ``body`` writes metrics/arrays through the run and returns a summary dict. A done
        run (or a final failure) is reused unless ``force``; a stale run is handed to
        ``body`` again with its files kept, so a body that checkpoints can resume.
        :class:`RunFailed` inside ``body`` records a final failure and returns the run;
        any other exception records a retryable failure and propagates.

        Only one process computes a run: a caller finding another writer at work logs that
        it waits, waits, then reuses that writer's result (with ``force`` too, when the
        result was finished while it waited; see the module doc).
        """
        run = self.run(kind, config, version=version)
        before = _status_or_corrupt(run)
        if not force and run.reusable():
            _log_reuse(run, before)
            return run  # reading a finished run needs no writable root
        self.check_root()
        lock = RunLock(run.lock_path)
        if not lock.acquire(block=False):
            if _WRITER_THREADS.get(run.lock_path) == threading.get_ident():
                raise StoreError(f"run {run.path} is being computed by pid {os.getpid()} "
                                 "(this very process); it cannot wait for itself")
            log.warning("waiting for %s, which is computing %s/%s", run._holder(), kind,
                        run.key)
            lock.acquire(block=True)
        try:
            status = _await_remote_writer(run)
            if not force:
                status = _set_aside_if_corrupt(run, status)
            finished_meanwhile = status != before and _outcome(status)
            if (finished_meanwhile or not force) and _outcome(status) and run.reusable():
                lock.release()
                _log_reuse(run, status)
                return run
            if force and status["state"] != "absent":
                run.clear()
            run.start(lock)
        except BaseException:
            lock.release()
            raise
        try:
            summary = body(run)
        except ValueError as err:  # ConfigError, and theory's and kernels' input checks
            # A value the body rejects before doing any work is the caller's mistake, not
            # the run's outcome: a new run that wrote nothing yet leaves nothing behind.
            if before["state"] == "absent" and run.untouched():
                run._abandon()
                run.clear()
            else:
                run.fail(f"{type(err).__name__}: {err}", final=False)
            raise
        except RunFailed as err:
            run.fail(str(err), final=True)
            log.warning("run %s/%s failed: %s", kind, run.key, err)
            return run
        except KeyboardInterrupt:
            run.fail("interrupted", final=False)
            raise
        except BaseException as err:
            run.fail(f"{type(err).__name__}: {err}", final=False)
            raise
        run.finish(summary)
        return run


def _bare(err: StoreError) -> str:
    """A store error's message without its advice (what comes after the first ``;``)."""
    return one_line(err).split("; ")[0]


def _status_or_corrupt(run: Run) -> dict[str, Any]:
    """The run's status, ``{"state": "corrupt"}`` for a damaged one (``--force`` clears it)."""
    try:
        return run.status()
    except StoreError:
        return {"state": "corrupt"}


def _outcome(status: dict[str, Any]) -> bool:
    """Whether ``status`` is an outcome the store returns as is: done, or a final failure
    (the one place this rule is written)."""
    return status["state"] == "done" or (status["state"] == "failed"
                                         and bool(status.get("final")))


def _log_reuse(run: Run, status: dict[str, Any]) -> None:
    if status["state"] == "done":
        log.info("reusing %s", run.name)
    else:
        log.info("reusing failed %s: %s", run.name, status.get("reason"))


def _set_aside_if_corrupt(run: Run, status: dict[str, Any]) -> dict[str, Any]:
    """With the run's lock held: a run folder that is not what its key says (a damaged
    status, a config that does not hash to the key, a file that differs from its manifest)
    is moved aside (:meth:`Run.set_aside`) with a warning, and the run is then absent."""
    if status["state"] == "absent":
        return status
    try:
        run.verify()
    except CorruptRun as err:
        dest = run.set_aside()
        log.warning("run %s is corrupt: %s; recomputing it (the damaged folder is kept as %s)",
                    run.name, err.problem, dest)
        return {"state": "absent"}
    return status


def _await_remote_writer(run: Run) -> dict[str, Any]:
    """With the run's lock held: wait while a writer on another kernel (which the lock does
    not see) holds a live lease; returns the status found after it."""
    waited = False
    while True:
        status = _status_or_corrupt(run)
        if status["state"] != "running":
            return status
        if run._state_of(status, lock_free=True) == "stale":
            if waited:
                log.warning("the lease of %s on %s/%s lapsed; taking the run over",
                            run._holder(), run.kind, run.key)
            return status
        if not waited:
            log.warning("waiting for %s, which holds the lease on %s/%s (it lapses %g s after "
                        "its last renewal)", run._holder(), run.kind, run.key,
                        status.get("lease_s", LEASE_S))
            waited = True
        time.sleep(POLL_S)
