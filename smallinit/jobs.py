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
  parent's pid), so killing a sweep leaves no orphan training;
- every local core by default: without ``workers`` (and without ``$SMALLINIT_WORKERS``)
  the missing runs are grouped by the threads each uses (:func:`run_threads`) and each
  group runs ``max(1, cores // threads)`` at a time (:func:`default_workers`; ``cores`` is
  the CPUs this process may run on, ``os.sched_getaffinity``). The per-run lock of the run
  store is the safety: a run is computed by one process whatever the count, and a run's
  numbers do not depend on the process that computes it;
- ``executor="ray"`` (the ``ray`` extra) hands each missing run to a Ray cluster as one
  ``ray.remote`` task instead (:func:`_run_on_ray`; ``ray.init(address=$RAY_ADDRESS)``:
  that cluster, else a local one). The store must lie on a file system every node mounts
  at the same path: each task checks a probe file the driver wrote there first. Ray retries
  a task whose worker died or that raised (``max_retries``, ``retry_exceptions``; the run
  resumes from its checkpoints); a run still failing is recorded as failed (retryable) with
  the reason, as a dead local worker is. Ray schedules; this module only declares what
  each task needs (CPUs: its threads; a GPU when it trains on one).

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

from smallinit.errors import ConfigError, one_line
from smallinit.progress import progress
from smallinit.runs import Run, RunStore, config_key

log = logging.getLogger(__name__)

EXECUTORS = ("local", "ray")
WORKERS_ENV = "SMALLINIT_WORKERS"  # default worker count (else cores // threads per run)
EXECUTOR_ENV = "SMALLINIT_EXECUTOR"  # default executor (else local)
RAY_RETRIES_ENV = "SMALLINIT_RAY_RETRIES"  # Ray retries per run (default RAY_RETRIES)
RAY_RETRIES = 2


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
    """Whether the store reuses the run as it is (:meth:`~smallinit.runs.Run.reusable`)."""
    return run.reusable()


_FORCED: set[tuple[str, str, str]] = set()  # (store root, kind, key) forced in this process


def run_jobs(jobs: list[Job], store: RunStore | None = None, *, force: bool = False,
             workers: int | None = None, executor: str | None = None,
             desc: str = "runs") -> Results:
    """Compute every job not finished yet (module docstring) and return all of them.
    ``workers``: local processes at a time (None: ``$SMALLINIT_WORKERS``, else every core,
    :func:`default_workers`); ``executor``: ``local`` or ``ray`` (None:
    ``$SMALLINIT_EXECUTOR``, else ``local``)."""
    workers = chosen_workers(workers)
    executor = chosen_executor(executor)
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
            if executor == "ray":
                _run_on_ray(todo, store, to_force, bar)
            else:
                for group, count in _local_groups(todo, workers):
                    if count == 1 or len(group) == 1:
                        for job in group:
                            _run_here(job, store, job.ident in to_force)
                            bar.update(1)
                    else:
                        _run_in_workers(group, store, to_force, count, bar)
    runs = [j.run_of(store) for j in jobs]
    failed = [(j, r) for j, r in zip(jobs, runs, strict=True) if not r.done]
    if failed:
        reasons = sorted({str(r.status().get("reason")) for _, r in failed})
        log.warning("%d of %d runs not done: %s", len({r.key for _, r in failed}),
                    len(unique), "; ".join(reasons))
    return Results(list(jobs), runs)


# ----------------------------------------------------------------------------- how many
def local_cores() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one, e.g. under
    ``taskset`` or a SLURM allocation; else ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def run_threads(job: Job) -> int | None:
    """Threads the job's run computes with: its config's ``train.threads`` when set
    (> 0); None when the run uses every core it finds (torch's default, the JAX toy)."""
    threads = getattr(getattr(job.config, "train", None), "threads", 0)
    return threads if isinstance(threads, int) and threads > 0 else None


def default_workers(jobs: list[Job], cores: int | None = None) -> int:
    """``max(1, cores // threads)``, threads the most any of ``jobs`` uses per run (a run
    without a thread count uses every core, so it runs alone)."""
    cores = cores or local_cores()
    threads = [run_threads(j) for j in jobs] or [None]
    most = cores if any(t is None for t in threads) else max(threads)
    return max(1, cores // most)


def chosen_workers(workers: int | None) -> int | None:
    """``workers`` checked; None becomes ``$SMALLINIT_WORKERS`` when set (else stays None:
    every core, per group of runs)."""
    where = "workers"
    if workers is None:
        text = os.environ.get(WORKERS_ENV, "").strip()
        if not text:
            return None
        where = WORKERS_ENV
        try:
            workers = int(text)
        except ValueError:
            raise ConfigError(f"{WORKERS_ENV}={text!r} is not allowed; give an integer "
                              ">= 1 (or unset it: every core)") from None
    if workers < 1:
        raise ConfigError(f"{where}={workers} is not allowed; it must be >= 1")
    return workers


def chosen_executor(executor: str | None) -> str:
    """``executor`` checked; None becomes ``$SMALLINIT_EXECUTOR``, else ``local``."""
    where = "executor"
    if executor is None:
        executor = os.environ.get(EXECUTOR_ENV, "").strip() or "local"
        where = EXECUTOR_ENV
    if executor not in EXECUTORS:
        raise ConfigError(f"{where}={executor!r} is not allowed; use "
                          f"{' or '.join(EXECUTORS)}")
    return executor


def _local_groups(todo: list[Job], workers: int | None) -> list[tuple[list[Job], int]]:
    """The runs with how many at a time: all at ``workers`` when given, else grouped by
    threads per run (in order of first appearance), each at :func:`default_workers`."""
    if workers is not None:
        return [(todo, workers)]
    groups: dict[int | None, list[Job]] = {}
    for job in todo:
        groups.setdefault(run_threads(job), []).append(job)
    return [(group, default_workers(group)) for group in groups.values()]


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


# ----------------------------------------------------------------------------- Ray
def _import_ray():
    try:
        import ray  # lazy: the optional `ray` extra, needed only with executor="ray"
    except ImportError:
        raise ConfigError("executor 'ray' needs Ray: pip install 'smallinit[ray]' (or "
                          "pip install ray), or use --executor local") from None
    return ray


def ray_retries() -> int:
    """Retries per run on Ray (``$SMALLINIT_RAY_RETRIES``, default :data:`RAY_RETRIES`)."""
    text = os.environ.get(RAY_RETRIES_ENV, "").strip()
    try:
        value = int(text) if text else RAY_RETRIES
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(f"{RAY_RETRIES_ENV}={text!r} is not allowed; give an integer >= 0")
    return value


def _ray_task(job: Job, root: str, force: bool, probe: str) -> tuple[str, str]:
    """Body of one Ray task: compute one job in the shared store. A config error comes
    back as a message (it is the caller's mistake, not worth a retry); any other error
    propagates so that Ray retries the task (the store has recorded it as retryable)."""
    if not os.path.isfile(probe):
        import socket  # lazy: only for this message

        return ("config", f"run store {root} is not visible from Ray node "
                f"{socket.gethostname()}: with --executor ray the store must be on a file "
                "system every node mounts at the same path (--runs-dir or $SMALLINIT_RUNS)")
    logging.basicConfig(level=logging.WARNING)
    try:
        resolve(job.entry)(job.config, RunStore(root), force)
    except ConfigError as err:
        return ("config", str(err))
    return ("ok", "")


def _ray_resources(ray, job: Job) -> dict[str, float]:
    """What one run asks Ray for: one GPU when it trains on one (device ``cuda``, or
    ``auto`` on a cluster that has GPUs), and its threads as CPUs; a run without a thread
    count takes a whole node (the smallest node's CPUs), or a GPU's share of a node's CPUs
    when it has a GPU, so that every GPU of a node gets a run."""
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    node_cpus = min((n.get("CPU", 1.0) for n in nodes), default=1.0)
    device = getattr(getattr(job.config, "train", None), "device", None)
    gpu_nodes = [n for n in nodes if n.get("GPU", 0) > 0]
    gpus = 1.0 if device == "cuda" or (device == "auto" and gpu_nodes) else 0.0
    threads = run_threads(job)
    if threads:
        cpus = float(min(threads, node_cpus))
    elif gpus and gpu_nodes:
        cpus = float(min(n.get("CPU", 1.0) // n["GPU"] for n in gpu_nodes))
    else:
        cpus = float(node_cpus)
    return {"num_cpus": max(cpus, 1.0), "num_gpus": gpus}


def _forwarded_env() -> dict[str, str]:
    """The driver's ``SMALLINIT_*`` settings (cache folder, memory limit, quiet), which Ray
    workers do not inherit by themselves."""
    return {k: v for k, v in os.environ.items()
            if k.startswith("SMALLINIT_") and k not in (WORKERS_ENV, EXECUTOR_ENV)}


def _run_on_ray(todo: list[Job], store: RunStore, to_force: set, bar) -> None:
    ray = _import_ray()
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS") or None,
                 logging_level=logging.WARNING)
    store.check_root()
    root = str(store.root.resolve())
    probe = store.root.resolve() / ".executor" / f"ray-{os.getpid()}-{time.time_ns()}"
    probe.parent.mkdir(parents=True, exist_ok=True)
    probe.write_text("this run store is shared with the Ray cluster\n")
    retries = ray_retries()
    task = ray.remote(_ray_task)
    env = _forwarded_env()
    pending: dict[Any, Job] = {}
    config_error: str | None = None
    try:
        for job in todo:
            options: dict[str, Any] = dict(_ray_resources(ray, job), max_retries=retries,
                                           retry_exceptions=True,
                                           name=f"{job.kind}-{job.key}")
            if env:
                options["runtime_env"] = {"env_vars": env}
            ref = task.options(**options).remote(job, root, job.ident in to_force,
                                                 str(probe))
            pending[ref] = job
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                job = pending.pop(ref)
                try:
                    kind, message = ray.get(ref)
                except Exception as err:  # retries spent: the worker died or the run raised
                    reason = (f"failed on Ray after {retries + 1} attempts: "
                              f"{type(err).__name__}: {one_line(str(err))[:500]}")
                    run = job.run_of(store)
                    if not run.done:
                        run.fail(reason, final=False)
                    log.error("run %s (%s/%s) %s", job.tags, job.kind, job.key, reason)
                else:
                    if kind == "config":
                        config_error = config_error or message
                        for other in pending:
                            ray.cancel(other)
                bar.update(1)
            if config_error is not None:
                break
    finally:
        for ref in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref)
        with contextlib.suppress(OSError):
            probe.unlink()
    if config_error is not None:
        raise ConfigError(config_error)
