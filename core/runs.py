"""A run of the store: the record a reader needs (:class:`Run`) and its writer
(:class:`RunWriter`).

A *run* is one config executed once. Its key is a hash of the canonical config, its kind
(``"toy-scan"``, ``"llm-train"``, ...) and a code version that the kind bumps whenever its
numbers would change (:func:`config_key`). A run lives in ``<root>/<kind>/<key>/``::

    config.json    the config and how it was keyed (written first)
    status.json    {"state": "running" | "done" | "failed", ...} (written last; a finished
                   run's also holds the manifest of its files, and a done run's the
                   SHA-256 of its summary, smallinit.core.integrity)
    metrics.jsonl  one JSON record per line, appended as the run goes
    arrays.npz     named NumPy arrays (the run's large results)

Every file but ``metrics.jsonl`` is written atomically (:mod:`smallinit.core.atomic`).
``status.json`` says ``done`` only after everything else is in place: a run killed at any
moment reads as ``running`` by a dead writer (*stale*, :mod:`smallinit.core.lease`), never
as finished, and is recomputed (or resumed from its own checkpoints) the next time it is
asked for (:class:`smallinit.core.store.RunStore`).

A writer never follows a symbolic link out of the store: a run folder that is a link, or
holds one, is refused (:meth:`RunWriter.start`) before anything in it is written or deleted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from smallinit.core import host, integrity
from smallinit.core.atomic import (
    atomic_save_npz,
    atomic_write_json,
    atomic_write_text,
    json_text,
    read_json,
    temp_path,
)
from smallinit.core.config import canonical_json, config_to_dict
from smallinit.core.errors import CorruptRun, StoreError, one_line
from smallinit.core.lease import BOOT_ID, WRITER_THREADS, Lease, RunLock, liveness, now

log = logging.getLogger(__name__)

STORE_SCHEMA = 1
MANIFEST = "manifest"  # the status.json field of a finished run's files (core.integrity)
SUMMARY_SHA256 = "summary_sha256"  # the status.json field proving a done run's summary
STATES = ("absent", "running", "stale", "done", "failed")


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


# ----------------------------------------------------------------------------- the record
class Run:
    """One run directory as a reader sees it: its files, state, results and whether it is
    what its key says. Get one from :meth:`smallinit.core.store.RunStore.run`."""

    _lease: Lease | None = None  # a writer's own lease (RunWriter); a reader has none

    def __init__(self, path: Path, kind: str, key: str, config: Any, version: str):
        self.path = path
        self.kind = kind
        self.key = key
        self.config = config
        self.version = version

    def __repr__(self) -> str:
        return f"Run({self.kind}/{self.key}, {self.state})"

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

    def status(self) -> dict[str, Any]:
        """The parsed ``status.json`` (``{"state": "absent"}`` when there is none)."""
        if not os.path.lexists(self.status_path):
            return {"state": "absent"}
        try:
            status = read_store_json(self.status_path)
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
        return liveness(status, self.status_path, lock_free)

    @property
    def done(self) -> bool:
        return self.state == "done"

    @property
    def failed_for_good(self) -> bool:
        """Whether the run failed for good (a divergence, recorded ``final``): an outcome the
        store hands back as it is, like a done run (:meth:`reusable`), not a failure that the
        next ask recomputes."""
        return _failed_for_good(self.status())

    @property
    def name(self) -> str:
        return f"{self.kind}/{self.key}"

    @property
    def summary(self) -> dict[str, Any]:
        """The summary a done run was finished with, checked against its SHA-256
        (:class:`CorruptRun` when it was edited)."""
        status = self.status()
        if status["state"] != "done":
            raise StoreError(f"run {self.path} is {self.state}, not done; it has no summary")
        problem = self.summary_problem(status)
        if problem:
            raise self._corrupt(problem)
        return status.get("summary", {})

    def summary_problem(self, status: dict[str, Any]) -> str | None:
        """Why the summary of the done run with ``status`` differs from the SHA-256 recorded
        when it finished, or None (also for a run stored before summaries were hashed)."""
        if status["state"] != "done" or SUMMARY_SHA256 not in status:
            return None
        if integrity.summary_digest(status.get("summary", {})) != status[SUMMARY_SHA256]:
            return (
                f"the summary in {self.status_path} does not match its SHA-256 (edited "
                "after the run finished)"
            )
        return None

    def identity_problem(self) -> str | None:
        """Why ``config.json`` does not prove that this folder is the run its key names (it
        must name this kind and key and hash to the key), or None when it does."""
        path = self.path / "config.json"
        try:
            meta = read_store_json(path)
        except StoreError as err:
            return _bare(err)
        if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict):
            return f"{path} holds no config object"
        if meta.get("kind") != self.kind or meta.get("key") != self.key:
            return (
                f"{path} names run {meta.get('kind')}/{meta.get('key')}, not the "
                "folder's (was the folder renamed or copied?)"
            )
        try:
            key = config_key(self.kind, meta["config"], str(meta.get("version", "1")))
        except (ValueError, TypeError, RecursionError):
            return f"{path} holds a config that cannot be keyed"
        if key != self.key:
            return (
                f"{path} does not hash to the folder's key (its config was edited after "
                "the run was made)"
            )
        return None

    def verify(self, *, hashes: bool = True, adopt: bool = True) -> None:
        """Raise :class:`CorruptRun`, naming the run and the file, when the folder is not
        what its key says: a damaged ``status.json``, a ``config.json`` that does not hash to
        the key, or (for a finished run) a file that differs from its manifest; sizes always,
        SHA-256 too with ``hashes``, or a done run's summary that differs from its SHA-256
        (always). A finished run stored before manifests (or before summaries were hashed)
        gets them now (``adopt``, when the store is writable and no writer holds the run)."""
        status = self.status()
        if status["state"] == "absent":
            return
        problem = self.identity_problem() or self.summary_problem(status)
        if problem is None and status["state"] in ("done", "failed"):
            manifest = status.get(MANIFEST)
            if adopt and _unrecorded(status):
                self._adopt(status)
            if manifest is None:
                return
            problem = integrity.manifest_problem(self.path, manifest, hashes=hashes)
        if problem:
            raise self._corrupt(problem)

    def _corrupt(self, problem: str) -> CorruptRun:
        return CorruptRun(
            f"run {self.name} is corrupt: {problem}; the command that made it, "
            "run again with the same config, recomputes it (keeping the damaged "
            "folder under .corrupt/ of the store)",
            problem,
        )

    def _adopt(self, status: dict[str, Any]) -> None:
        """Write the manifest of a finished run that has none (stored before manifests) and
        the SHA-256 of a done run's summary, under the run's lock; skipped where the store
        cannot be written."""
        lock = RunLock(self.lock_path)
        try:
            if not lock.acquire(block=False):
                return
        except OSError:
            return
        try:
            if self.status() == status:
                status = dict(status)
                if MANIFEST not in status:
                    status[MANIFEST] = integrity.build_manifest(self.path)
                if status["state"] == "done":
                    status.setdefault(
                        SUMMARY_SHA256, integrity.summary_digest(status.get("summary", {}))
                    )
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
            if problem is None and _unrecorded(status):
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

    def read_json(self, name: str) -> Any:
        """An extra JSON result file of the run, checked against its manifest (:meth:`file`)."""
        return read_json(self.file(name))

    def untouched(self) -> bool:
        """Whether the run directory holds nothing but what :meth:`start` wrote."""
        if not self.path.is_dir():
            return True
        return {p.name for p in self.path.iterdir()} <= {"config.json", "status.json"}


# ----------------------------------------------------------------------------- the writer
class RunWriter(Run):
    """The run as the one process computing it sees it: the record plus the lease
    (:mod:`smallinit.core.lease`) and every write. The run store hands one to the body that
    computes a run (:meth:`smallinit.core.store.RunStore.get_or_run`)."""

    def __init__(self, path: Path, kind: str, key: str, config: Any, version: str):
        super().__init__(path, kind, key, config, version)
        self._lease: Lease | None = None
        #: fields the final status records besides the outcome, e.g. ``population`` (the
        #: population that computed the run, :mod:`smallinit.llm.training.population`)
        self.status_fields: dict[str, Any] = {}

    @property
    def checkpoint_dir(self) -> Path:
        """Where a resumable run keeps its checkpoints (created on demand; a symbolic link
        there is refused, :meth:`refuse_links`)."""
        d = self.path / "checkpoints"
        if d.is_symlink():
            raise _link_error(d)
        d.mkdir(parents=True, exist_ok=True)
        return d

    def refuse_links(self) -> None:
        """Raise :class:`StoreError` naming the first symbolic link among the run's kind
        folder, its folder and everything below it: the writer would write or delete
        through it, outside the store."""
        link = (
            self.path.parent if self.path.parent.is_symlink() else integrity.first_link(self.path)
        )
        if link is not None:
            raise _link_error(link)

    def start(self, lock: RunLock | None = None) -> None:
        """Claim the run for this process and mark it running; writes ``config.json`` first.

        Takes the run's lock (``lock`` if the caller already holds it) and starts the
        heartbeat that renews the lease; :meth:`finish` or :meth:`fail` end both. Raises
        :class:`StoreError` if another process holds the lock, or if the run's folder is
        or holds a symbolic link (:meth:`refuse_links`)."""
        if self._lease is not None:
            raise StoreError(f"run {self.path} is already started by this process")
        self.refuse_links()
        if lock is None:
            lock = RunLock(self.lock_path)
            if not lock.acquire(block=False):
                raise StoreError(
                    f"run {self.path} is being computed by another process "
                    f"({self._holder()}); wait for it or stop it"
                )
        self._lease = Lease(self, lock)
        WRITER_THREADS[self.lock_path] = self._lease.thread
        try:
            self._sweep_temp()
            self._write_start()
        except BaseException:
            self._abandon()
            raise
        self._lease.start_heartbeat()

    def _write_start(self) -> None:
        assert self._lease is not None  # taken just before
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
        status.update(self.status_fields)
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
        every file it keeps (:mod:`smallinit.core.integrity`)."""
        status = self.status()
        self._end(
            {
                "state": "done",
                "started": status.get("started"),
                "finished": now(),
                "host": host.record(),
                "summary": summary or {},
                SUMMARY_SHA256: integrity.summary_digest(summary or {}),
                MANIFEST: integrity.build_manifest(self.path),
            }
        )

    def fail(self, reason: str, *, final: bool = True) -> None:
        """Record the run as failed. ``final`` failures (divergence) are kept as the
        outcome; others (errors, interruptions) are retried the next time."""
        try:
            status = self.status() if self.status_path.exists() else {}
        except StoreError:
            status = {}
        end = {
            "state": "failed",
            "reason": one_line(reason),
            "final": final,
            "started": status.get("started"),
            "finished": now(),
            "host": host.record(),
        }
        if final:  # kept as the run's outcome, so its files are proven like a done run's
            end[MANIFEST] = integrity.build_manifest(self.path)
        self._end(end)

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

    def rewrite_metrics(self, records: list[dict[str, Any]]) -> None:
        """Replace ``metrics.jsonl`` atomically (used when resuming from a checkpoint)."""
        text = "".join(json_text(r) + "\n" for r in records)
        atomic_write_text(self.metrics_path, text)

    def save_arrays(self, **arrays: Any) -> None:
        """Write ``arrays.npz`` atomically (replacing any previous one)."""
        atomic_save_npz(self.arrays_path, arrays)

    def write_json(self, name: str, obj: Any) -> Path:
        """Write an extra JSON result file into the run directory, atomically."""
        path = self.path / name
        atomic_write_json(path, obj)
        return path

    def clear(self) -> None:
        """Delete everything in the run directory (what ``--force`` does before a rerun)."""
        if self.path.exists():
            trash = temp_path(self.path).with_suffix(".trash")
            os.replace(self.path, trash)
            shutil.rmtree(trash, ignore_errors=True)

    def set_aside(self) -> Path:
        """Move the run folder to ``<root>/.corrupt/<kind>/<key>.<time>`` (kept for
        inspection, out of the store's listings); returns where it went."""
        dest = (
            self.path.parent.parent
            / ".corrupt"
            / self.kind
            / f"{self.key}.{time.strftime('%Y%m%dT%H%M%S')}.{secrets.token_hex(4)}"
        )
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


def read_store_json(path: Path) -> Any:
    """A JSON file of the store (:func:`~smallinit.core.atomic.read_json`); a symbolic link
    there is a :class:`StoreError`, never followed: it could lead out of the store."""
    if path.is_symlink():
        raise StoreError(
            f"{path} is a symbolic link, not a regular file; the run store "
            "never follows links (they could lead out of it)"
        )
    return read_json(path)


def _class_path(config: Any) -> str | None:
    if dataclasses.is_dataclass(config):
        cls = type(config)
        return f"{cls.__module__}:{cls.__qualname__}"
    return None


def _bare(err: StoreError) -> str:
    """A store error's message without its advice (what comes after the first ``;``)."""
    return one_line(err).split("; ")[0]


def _failed_for_good(status: dict[str, Any]) -> bool:
    """Whether ``status`` records a final failure (:attr:`Run.failed_for_good`)."""
    return status["state"] == "failed" and bool(status.get("final"))


def _unrecorded(status: dict[str, Any]) -> bool:
    """Whether a finished run's ``status`` lacks its manifest, or a done run's the SHA-256
    of its summary (a run stored before they were recorded)."""
    return MANIFEST not in status or (status["state"] == "done" and SUMMARY_SHA256 not in status)


def _link_error(link: Path) -> StoreError:
    return StoreError(
        f"{link} is a symbolic link; the run store does not write or delete "
        "through links (they could lead out of it): remove the link"
    )


def _outcome(status: dict[str, Any]) -> bool:
    """Whether ``status`` is an outcome the store returns as is: done, or failed for good
    (the one place this rule is written)."""
    return status["state"] == "done" or _failed_for_good(status)
