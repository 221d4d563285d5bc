"""One job driver for every experiment: a list of runs through the run store.

A :class:`Job` is one run: its kind, code version and config (which give its run-store key,
:func:`smallinit.runs.config_key`), the function that computes it and tags that say what
it stands for in its experiment. :func:`run_jobs` takes any list of jobs (of any kinds):

- jobs with the same (kind, key) run once (experiments share runs);
- finished runs (done, or failed for good) are reused, stale and retryable ones resumed;
- ``force`` recomputes each run at most once per process, so figures that share runs do
  not recompute them in turn;
- with ``workers > 1`` each missing run trains in its own spawned process, at most
  ``workers`` at a time. A worker that dies (killed for memory, a signal) fails that run
  only: it is recorded as failed (retryable) with the reason and the others go on. Workers
  exit with their parent (Linux ``PR_SET_PDEATHSIG`` plus a thread that watches the
  parent's pid), so killing a sweep leaves no orphan training.

The answer is a :class:`Results`: the jobs in the given order with their runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from smallinit.errors import ConfigError
from smallinit.progress import progress
from smallinit.runs import Run, RunStore, config_key

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Job:
    """One run of an experiment. ``entry`` is ``"module:function"``, called in whatever
    process computes the run as ``function(config, store, force) -> Run`` (it goes through
    :meth:`RunStore.get_or_run` with this kind and version). ``prepare`` is an optional
    ``"module:function"`` called once in the parent with the configs of all missing jobs
    that name it, before any worker starts (e.g. to build a shared corpus once)."""

    kind: str
    version: str
    config: Any
    entry: str
    tags: dict[str, Any] = dataclasses.field(default_factory=dict)
    prepare: str | None = None

    @property
    def key(self) -> str:
        return config_key(self.kind, self.config, self.version)

    @property
    def ident(self) -> tuple[str, str]:
        """(kind, key): what the store names the run by."""
        return self.kind, self.key

    @property
    def cfg(self) -> Any:
        """The config (the LLM sweeps' name for it)."""
        return self.config

    def run_of(self, store: RunStore) -> Run:
        return store.run(self.kind, self.config, version=self.version)


@dataclasses.dataclass
class Results:
    """Jobs with their runs, in the order asked for; iterates as (job, run) pairs."""

    jobs: list[Job]
    runs: list[Run]

    def __iter__(self) -> Iterator[tuple[Job, Run]]:
        return iter(zip(self.jobs, self.runs, strict=True))

    def __len__(self) -> int:
        return len(self.jobs)

    def __getitem__(self, i):
        """Pair ``i`` (a list of pairs for a slice)."""
        pairs = list(self)
        return pairs[i]

    def done(self) -> list[tuple[Job, Run]]:
        """The pairs whose run finished (the others are logged and left out)."""
        out = []
        for job, run in self:
            if run.done:
                out.append((job, run))
            else:
                log.warning("leaving out %s: run %s is %s", job.tags, run.path, run.state)
        return out

    def failed(self) -> list[tuple[Job, Run]]:
        return [(j, r) for j, r in self if not r.done]


def resolve(entry: str) -> Callable[..., Any]:
    """The function named by ``"module:function"``."""
    module, _, name = entry.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"job entry {entry!r} does not name a function ({err})") from None


def finished(run: Run) -> bool:
    """Done, or failed for good (the store reuses both)."""
    state = run.state
    return state == "done" or (state == "failed" and bool(run.status().get("final")))


_FORCED: set[tuple[str, str, str]] = set()  # (store root, kind, key) forced in this process


def run_jobs(jobs: list[Job], store: RunStore | None = None, *, force: bool = False,
             workers: int = 1, desc: str = "runs") -> Results:
    """Compute every job not finished yet (module docstring) and return all of them."""
    if workers < 1:
        raise ConfigError(f"workers={workers} is not allowed; it must be >= 1")
    store = store or RunStore()
    root = str(store.root)
    unique: dict[tuple[str, str], Job] = {}
    for job in jobs:
        unique.setdefault(job.ident, job)
    to_force = {i for i in unique if force and (root, *i) not in _FORCED}
    _FORCED.update((root, *i) for i in to_force)
    todo = [j for i, j in unique.items() if i in to_force or not finished(j.run_of(store))]
    log.info("%d runs, %d to compute", len(unique), len(todo))
    if todo:
        _prepare(todo)

        with progress(total=len(todo), desc=desc, unit="run") as bar:
            if workers == 1 or len(todo) == 1:
                for job in todo:
                    _run_here(job, store, job.ident in to_force)
                    bar.update(1)
            else:
                _run_in_workers(todo, store, to_force, workers, bar)
    runs = [j.run_of(store) for j in jobs]
    failed = [(j, r) for j, r in zip(jobs, runs, strict=True) if not r.done]
    if failed:
        reasons = sorted({str(r.status().get("reason")) for _, r in failed})
        log.warning("%d of %d runs not done: %s", len({r.key for _, r in failed}),
                    len(unique), "; ".join(reasons))
    return Results(list(jobs), runs)


def _prepare(todo: list[Job]) -> None:
    by_entry: dict[str, list[Any]] = {}
    for job in todo:
        if job.prepare:
            by_entry.setdefault(job.prepare, []).append(job.config)
    for entry, configs in by_entry.items():
        resolve(entry)(configs)


def _run_here(job: Job, store: RunStore, force: bool) -> None:
    try:
        resolve(job.entry)(job.config, store, force)
    except ConfigError:
        raise
    except Exception as err:  # recorded in the run's status by the store
        log.error("run %s failed: %s: %s", job.tags, type(err).__name__, err)


# ----------------------------------------------------------------------------- workers
def _exit_with_parent(parent: int) -> None:
    """Make this worker die when its parent does (PDEATHSIG on Linux, and a watch thread
    everywhere: the parent's pid changes when it dies and the worker is re-parented)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _worker(job: Job, root: str, force: bool, parent: int, conn) -> None:
    """Body of a worker process: compute one job, report how it went through ``conn``."""
    _exit_with_parent(parent)
    logging.basicConfig(level=logging.WARNING)
    try:
        resolve(job.entry)(job.config, RunStore(root), force)
        conn.send(("ok", ""))
    except ConfigError as err:
        conn.send(("config", str(err)))
    except Exception as err:
        conn.send(("error", f"{type(err).__name__}: {err}"))
    finally:
        conn.close()


def _receive(conn) -> tuple[str, str] | None:
    """The worker's report, or None when it died before sending one."""
    try:
        return conn.recv() if conn.poll() else None
    except (EOFError, OSError):
        return None
    finally:
        conn.close()


def _death_reason(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        with contextlib.suppress(ValueError):
            name = signal.Signals(-exitcode).name
            hint = " (killed, e.g. out of memory)" if name == "SIGKILL" else ""
            return f"worker process died by {name}{hint}"
    return f"worker process exited with code {exitcode} without a result"


def _run_in_workers(todo: list[Job], store: RunStore, to_force: set, workers: int,
                    bar) -> None:
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("spawn")
    pending = list(todo)
    running: dict[int, tuple[Job, Any, Any]] = {}  # sentinel -> (job, process, conn)
    config_error: str | None = None
    try:
        while pending or running:
            while pending and len(running) < workers and config_error is None:
                job = pending.pop(0)
                here, there = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_worker, name=f"job-{job.kind}-{job.key}",
                                   args=(job, str(store.root), job.ident in to_force,
                                         os.getpid(), there))
                proc.start()
                there.close()
                running[proc.sentinel] = (job, proc, here)
            if not running:
                break
            for sentinel in wait(list(running)):
                job, proc, conn = running.pop(sentinel)
                proc.join()
                message = _receive(conn)
                if message is None:
                    reason = _death_reason(proc.exitcode)
                    run = job.run_of(store)
                    if not run.done:
                        run.fail(reason, final=False)
                    log.error("run %s (%s/%s) failed: %s", job.tags, job.kind, job.key, reason)
                elif message[0] == "config":
                    config_error = config_error or message[1]
                elif message[0] == "error":
                    log.error("run %s failed: %s", job.tags, message[1])
                bar.update(1)
    finally:
        for _job, proc, conn in running.values():
            proc.kill()
            proc.join()
            conn.close()
    if config_error is not None:
        raise ConfigError(config_error)
