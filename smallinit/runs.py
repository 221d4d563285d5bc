"""The run store: every experiment result on disk, keyed by its config.

A *run* is one config dataclass executed once. Its key is a hash of the canonical config,
its kind (``"toy-scan"``, ``"llm-train"``, ...) and a code version that the kind bumps
whenever its numbers would change. A run lives in ``<root>/<kind>/<key>/``::

    config.json    the config and how it was keyed (written first)
    status.json    {"state": "running" | "done" | "failed", ...} (written last)
    metrics.jsonl  one JSON record per line, appended as the run goes
    arrays.npz     named NumPy arrays (the run's large results)

Every file except the append-only ``metrics.jsonl`` is written atomically (temporary file
in the same directory, fsync, ``os.replace``), so a reader sees either the old or the new
bytes. ``status.json`` says ``done`` only after everything else is in place: a run killed
at any moment reads as ``running`` by a dead process (*stale*), never as finished, and is
recomputed (or resumed from its own checkpoints) the next time it is asked for.

The root is ``$SMALLINIT_RUNS`` when set, else ``./runs``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import logging
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from smallinit.config import canonical_json, config_to_dict
from smallinit.errors import RunFailed, StoreError, one_line

log = logging.getLogger(__name__)

STORE_SCHEMA = 1
STATES = ("absent", "running", "stale", "done", "failed")


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
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def atomic_save_npz(path: str | Path, arrays: dict[str, Any]) -> None:
    """``np.savez_compressed`` through a temporary file (no pickles: plain arrays only)."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    atomic_write_bytes(path, buf.getvalue())


def read_json(path: str | Path) -> Any:
    """Read a JSON file; a damaged one raises :class:`StoreError` naming the file."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StoreError(f"{path} is missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise StoreError(
            f"{path} is corrupt ({one_line(err)}); delete its run directory or rerun with --force"
        ) from None


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


# ----------------------------------------------------------------------------- one run
class Run:
    """One run directory. Create it through :meth:`RunStore.run`."""

    def __init__(self, path: Path, kind: str, key: str, config: Any, version: str):
        self.path = path
        self.kind = kind
        self.key = key
        self.config = config
        self.version = version

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
        status = read_json(self.status_path)
        if not isinstance(status, dict) or status.get("state") not in STATES:
            raise StoreError(
                f"{self.status_path} is corrupt (no valid state); delete its run directory "
                "or rerun with --force"
            )
        return status

    @property
    def state(self) -> str:
        """``absent``, ``running`` (a live process owns it), ``stale`` (its process died),
        ``done`` or ``failed``."""
        status = self.status()
        if status["state"] != "running":
            return status["state"]
        same_host = status.get("host") == socket.gethostname()
        pid = status.get("pid")
        if same_host and isinstance(pid, int) and not _pid_alive(pid):
            return "stale"
        return "running"

    @property
    def done(self) -> bool:
        return self.state == "done"

    # -- lifecycle
    def start(self) -> None:
        """Mark the run as running in this process; writes ``config.json`` first."""
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
        atomic_write_json(
            self.status_path,
            {"state": "running", "pid": os.getpid(), "host": socket.gethostname(),
             "started": _now()},
        )

    def finish(self, summary: dict[str, Any] | None = None) -> None:
        """Mark the run done: the last write of a successful run."""
        status = self.status()
        atomic_write_json(
            self.status_path,
            {"state": "done", "started": status.get("started"), "finished": _now(),
             "summary": summary or {}},
        )

    def fail(self, reason: str, *, final: bool = True) -> None:
        """Record the run as failed. ``final`` failures (divergence) are kept as the
        outcome; others (errors, interruptions) are retried the next time."""
        status = self.status() if self.status_path.exists() else {}
        atomic_write_json(
            self.status_path,
            {"state": "failed", "reason": one_line(reason), "final": final,
             "started": status.get("started"), "finished": _now()},
        )

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
        line = json.dumps(record, sort_keys=True, allow_nan=True)
        with self.metrics_path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()

    def metrics(self) -> list[dict[str, Any]]:
        """All metrics records. A torn last line of an unfinished run is dropped; any other
        damage raises :class:`StoreError` naming the file and line."""
        if not self.metrics_path.exists():
            return []
        lines = self.metrics_path.read_text(encoding="utf-8").splitlines()
        records = []
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
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
        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
        atomic_write_text(self.metrics_path, text)

    def save_arrays(self, **arrays: Any) -> None:
        """Write ``arrays.npz`` atomically (replacing any previous one)."""
        atomic_save_npz(self.arrays_path, arrays)

    def arrays(self) -> dict[str, np.ndarray]:
        """Load ``arrays.npz``; a damaged file raises :class:`StoreError` naming it."""
        if not self.arrays_path.exists():
            raise StoreError(f"{self.arrays_path} is missing")
        try:
            with np.load(self.arrays_path, allow_pickle=False) as data:
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
        return read_json(self.path / name)

    def clear(self) -> None:
        """Delete everything in the run directory (what ``--force`` does before a rerun)."""
        if self.path.exists():
            trash = self.path.with_name(f".{self.path.name}.trash-{os.getpid()}")
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
        if root is None:
            root = os.environ.get("SMALLINIT_RUNS") or Path.cwd() / "runs"
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"RunStore({str(self.root)!r})"

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
        """
        run = self.run(kind, config, version=version)
        state = run.state
        if force and state != "absent":
            if state == "running":
                raise StoreError(f"run {run.path} is in use by a live process; stop it first")
            run.clear()
            state = "absent"
        if state == "done":
            log.info("reusing %s/%s", kind, run.key)
            return run
        if state == "failed" and run.status().get("final"):
            log.info("reusing failed %s/%s: %s", kind, run.key, run.status().get("reason"))
            return run
        if state == "running":
            raise StoreError(
                f"run {run.path} is being computed by pid {run.status().get('pid')}; "
                "wait for it or stop it"
            )
        run.start()
        try:
            summary = body(run)
        except RunFailed as err:
            run.fail(str(err), final=True)
            log.warning("run %s/%s failed: %s", kind, run.key, err)
            return run
        except KeyboardInterrupt:
            run.fail("interrupted", final=False)
            raise
        except Exception as err:
            run.fail(f"{type(err).__name__}: {err}", final=False)
            raise
        run.finish(summary)
        return run
