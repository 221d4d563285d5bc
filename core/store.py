"""The run store: every experiment result on disk, keyed by its config.

:class:`RunStore` finds a run by (kind, config, version) (:class:`smallinit.core.runs.Run`)
and computes it when it is missing (:meth:`RunStore.get_or_run`), with one writer per run
(:mod:`smallinit.core.lease`). A second process asking for a run that another process is
computing logs that it waits, waits for that writer to finish (or for its lease to lapse)
and then reuses the result; with ``force`` it also waits, and takes the other writer's
result when that writer finished while it waited (a fresh result), else it recomputes. A
run that is not what its key says is set aside and recomputed
(:mod:`smallinit.core.integrity`).

The root is ``$SMALLINIT_RUNS`` when set, else ``./runs``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from smallinit.core.errors import ConfigError, CorruptRun, RunFailed, StoreError, one_line
from smallinit.core.lease import LEASE_S, WRITER_THREADS, RunLock
from smallinit.core.runs import Run, RunWriter, _outcome, config_key, read_store_json

log = logging.getLogger(__name__)

POLL_S = 1.0  # how often a waiting process looks at a writer on another host


class RunStore:
    """Runs below one root directory (``$SMALLINIT_RUNS`` or ``./runs`` by default)."""

    def __init__(self, root: str | Path | None = None):
        if root is not None and not str(root).strip():
            raise ConfigError(
                "the run store's folder is an empty path; give a folder, or None "
                "for $SMALLINIT_RUNS or ./runs"
            )
        if root is None:
            root = os.environ.get("SMALLINIT_RUNS") or Path.cwd() / "runs"
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"RunStore({str(self.root)!r})"

    def check_readable(self) -> bool:
        """Whether the root is a folder (False: nothing stored there yet); a
        :class:`StoreError` naming it when it is a file or lies below one, where no run can
        ever be stored."""
        if self.root.is_dir():
            return True
        where = next((p for p in (self.root, *self.root.parents) if p.exists()), None)
        if where is not None and not where.is_dir():
            what = (
                "is a file, not a folder" if where == self.root else f"lies below the file {where}"
            )
            raise StoreError(
                f"run store root {self.root} {what}; give the store's folder "
                "with --runs-dir or $SMALLINIT_RUNS"
            )
        return False

    def check_root(self) -> None:
        """Create the root if needed; :class:`StoreError` naming it and why when it is a
        file, lies below a file or cannot be written."""
        self.check_readable()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise StoreError(
                f"run store root {self.root} cannot be created "
                f"({err.strerror or one_line(err)}); give a writable folder with "
                "--runs-dir or $SMALLINIT_RUNS"
            ) from None
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise StoreError(
                f"run store root {self.root} is not writable; give a writable "
                "folder with --runs-dir or $SMALLINIT_RUNS"
            )

    def run(self, kind: str, config: Any, *, version: str = "1") -> Run:
        """The run for ``config`` (its directory need not exist yet)."""
        if not kind or "/" in kind or kind.startswith("."):
            raise StoreError(f"run kind {kind!r} is not allowed; use a plain name like 'toy-scan'")
        key = config_key(kind, config, version)
        return Run(self.root / kind / key, kind, key, config, version)

    def writer(self, kind: str, config: Any, *, version: str = "1") -> RunWriter:
        """The run for ``config`` as its writer sees it (:class:`RunWriter`); the body of
        :meth:`get_or_run` receives one."""
        run = self.run(kind, config, version=version)
        return RunWriter(run.path, kind, run.key, config, version)

    def runs(self, kind: str) -> Iterator[Run]:
        """Every stored run of ``kind`` (config read back from its ``config.json``)."""
        base = self.root / kind
        if not base.is_dir():
            return
        for path in sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")):
            meta = read_store_json(path / "config.json")
            yield Run(path, kind, path.name, meta.get("config"), meta.get("version", "1"))

    def get_or_run(
        self,
        kind: str,
        config: Any,
        body: Callable[[RunWriter], dict[str, Any] | None],
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
        run = self.writer(kind, config, version=version)
        before = _status_or_corrupt(run)
        if not force and run.reusable():
            _log_reuse(run, before)
            return run  # reading a finished run needs no writable root
        self.check_root()
        lock = RunLock(run.lock_path)
        if not lock.acquire(block=False):
            if WRITER_THREADS.get(run.lock_path) == threading.get_ident():
                raise StoreError(
                    f"run {run.path} is being computed by pid {os.getpid()} "
                    "(this very process); it cannot wait for itself"
                )
            log.warning("waiting for %s, which is computing %s/%s", run._holder(), kind, run.key)
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


def _status_or_corrupt(run: Run) -> dict[str, Any]:
    """The run's status, ``{"state": "corrupt"}`` for a damaged one (``--force`` clears it)."""
    try:
        return run.status()
    except StoreError:
        return {"state": "corrupt"}


def _log_reuse(run: Run, status: dict[str, Any]) -> None:
    if status["state"] == "done":
        log.info("reusing %s", run.name)
    else:
        log.info("reusing failed %s: %s", run.name, status.get("reason"))


def _set_aside_if_corrupt(run: RunWriter, status: dict[str, Any]) -> dict[str, Any]:
    """With the run's lock held: a run folder that is not what its key says (a damaged
    status, a config that does not hash to the key, a file that differs from its manifest)
    is moved aside (:meth:`Run.set_aside`) with a warning, and the run is then absent."""
    if status["state"] == "absent":
        return status
    try:
        run.verify()
    except CorruptRun as err:
        dest = run.set_aside()
        log.warning(
            "run %s is corrupt: %s; recomputing it (the damaged folder is kept as %s)",
            run.name,
            err.problem,
            dest,
        )
        return {"state": "absent"}
    return status


def _await_remote_writer(run: RunWriter) -> dict[str, Any]:
    """With the run's lock held: wait while a writer on another kernel (which the lock does
    not see) holds a live lease; returns the status found after it."""
    waited = False
    while True:
        status = _status_or_corrupt(run)
        if status["state"] != "running":
            return status
        if run._state_of(status, lock_free=True) == "stale":
            if waited:
                log.warning(
                    "the lease of %s on %s/%s lapsed; taking the run over",
                    run._holder(),
                    run.kind,
                    run.key,
                )
            return status
        if not waited:
            log.warning(
                "waiting for %s, which holds the lease on %s/%s (it lapses %g s after "
                "its last renewal)",
                run._holder(),
                run.kind,
                run.key,
                status.get("lease_s", LEASE_S),
            )
            waited = True
        time.sleep(POLL_S)
