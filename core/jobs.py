"""One driver for every experiment: a list of run specs through the run store.

A :class:`RunSpec` is one run: its config and tags that say what it stands for in its
experiment; its type gives the kind and code version (which with the config give the run's
store key, :func:`smallinit.core.runs.config_key`) and computes it. :func:`run_specs` takes any
list of specs (of any kinds):

- specs with the same (kind, key) run once (experiments share runs);
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
  each task needs (CPUs: its threads; a GPU when it trains on one);
- populations: a spec type may train several runs together in one process
  (:meth:`RunSpec.population_key`, :meth:`RunSpec.compute_population`; the pretraining
  runs of one shape on a CUDA device, :mod:`smallinit.llm.training.population`). The
  missing runs of one type and key (two or more) are computed that way in the driver's
  process, one population after another, before the others. ``population``: ``auto``
  (where the spec type says it pays), ``on`` (also on a CPU), ``off`` (every run alone;
  default ``$SMALLINIT_POPULATION``, else ``auto``);
- progress: one bar over the runs to compute on a terminal (runs done/total, elapsed, an
  ETA from the plan's costs: ``weigh(config)``, a transformer's training FLOPs, with the
  toy runs timed by their kind; :class:`smallinit.core.progress.RunProgress` says how), and
  off a terminal one log line per finished run with the same numbers. The runs' own bars
  are hidden in worker processes and Ray tasks (their log lines stay below INFO), so one
  bar, or one line per run, is what a sweep shows;
- Ctrl-C (inside :func:`smallinit.core.interrupts.catching`, as every CLI command runs)
  stops the driver before its next run or within a second of waiting for its workers,
  which it kills: finished runs stay in the store, unfinished ones resume on the next
  call. Workers ignore SIGINT themselves (a terminal sends it to the whole group).

The answer is a :class:`Results`: the specs in the given order with their runs.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, ClassVar, cast

from smallinit.core import interrupts
from smallinit.core.errors import ConfigError, one_line
from smallinit.core.progress import RunProgress, set_quiet
from smallinit.core.runs import Run, config_key
from smallinit.core.store import RunStore

log = logging.getLogger(__name__)

EXECUTORS = ("local", "ray")
POPULATIONS = ("auto", "on", "off")
POPULATION_ENV = "SMALLINIT_POPULATION"  # default population mode (else auto)
#: how a population's training step runs: op by op, ``torch.compile``d, or compiled and
#: replayed as CUDA graphs (CUDA only); no part of a run's config or key
POPULATION_EXECS = ("eager", "compile", "cudagraphs")
POPULATION_EXEC_ENV = "SMALLINIT_POPULATION_EXEC"  # default population execution (else eager)
WORKERS_ENV = "SMALLINIT_WORKERS"  # default worker count (else cores // threads per run)
EXECUTOR_ENV = "SMALLINIT_EXECUTOR"  # default executor (else local)
RAY_RETRIES_ENV = "SMALLINIT_RAY_RETRIES"  # Ray retries per run (default RAY_RETRIES)
RAY_RETRIES = 2


@dataclasses.dataclass
class RunSpec:
    """One run of an experiment: its config and tags that say what it stands for. A spec
    type exists per run kind, next to the code that computes that kind (e.g.
    :class:`smallinit.llm.training.train_spec.TrainSpec`), and says the kind, the code version
    and how to compute the run: :meth:`compute` goes through
    :meth:`~smallinit.core.store.RunStore.get_or_run` with that kind and version, in whatever
    process the driver chooses (specs pickle, for worker processes and Ray)."""

    kind: ClassVar[str] = ""
    version: ClassVar[str] = "1"
    #: the function that computes a run of this kind, ``runner(config, store, force=...)``
    #: (a ``staticmethod``), for kinds whose module has one; else override :meth:`compute`
    runner: ClassVar[Callable[..., Any] | None] = None
    config: Any
    tags: dict[str, Any] = dataclasses.field(default_factory=dict)

    def compute(self, store: RunStore, force: bool) -> Any:
        """Compute (or resume, or reuse) the run in ``store``."""
        if self.runner is None:
            raise NotImplementedError(f"{type(self).__name__} does not say how to compute its run")
        return self.runner(self.config, store, force=force)

    @classmethod
    def prepare(cls, specs: list[RunSpec]) -> None:
        """Called once in the driver's process with the missing specs of this type, before
        any worker starts (e.g. to build a shared corpus once)."""

    def population_key(self, mode: str) -> str | None:
        """A key shared by the runs of this type that can train together in one process
        (:meth:`compute_population`); None: this run trains alone. ``mode``: ``auto`` (only
        where a population pays) or ``on`` (wherever it can)."""
        return None

    @classmethod
    def compute_population(
        cls, specs: list[RunSpec], store: RunStore, force: bool, execution: str = "eager"
    ) -> None:
        """Compute (or resume, or reuse) ``specs``, of this type and one population key,
        together; by default one after another. ``execution``: how the population's step
        runs (:data:`POPULATION_EXECS`)."""
        for spec in specs:
            spec.compute(store, force)

    @property
    def key(self) -> str:
        return config_key(self.kind, self.config, self.version)

    @property
    def ident(self) -> tuple[str, str]:
        """(kind, key): what the store names the run by."""
        return self.kind, self.key

    def run_of(self, store: RunStore) -> Run:
        return store.run(self.kind, self.config, version=self.version)

    def with_config(self, config: Any) -> RunSpec:
        """This spec with another config (its type, tags and other fields kept)."""
        new = copy.copy(self)
        new.config, new.tags = config, dict(self.tags)
        return new


@dataclasses.dataclass
class Results:
    """Specs with their runs, in the order asked for; iterates as (spec, run) pairs."""

    specs: list[RunSpec]
    runs: list[Run]

    def __iter__(self) -> Iterator[tuple[RunSpec, Run]]:
        return iter(zip(self.specs, self.runs, strict=True))

    def __len__(self) -> int:
        return len(self.specs)

    def __getitem__(self, i):
        """Pair ``i`` (a list of pairs for a slice)."""
        pairs = list(self)
        return pairs[i]

    def done(self) -> list[tuple[RunSpec, Run]]:
        """The pairs whose run finished (the others are logged and left out)."""
        out = []
        for spec, run in self:
            if run.done:
                out.append((spec, run))
            else:
                log.warning("leaving out %s: run %s is %s", spec.tags, run.path, run.state)
        return out

    def failed(self) -> list[tuple[RunSpec, Run]]:
        return [(j, r) for j, r in self if not r.done]


_FORCED: set[tuple[str, str, str]] = set()  # (store root, kind, key) forced in this process


def run_specs(
    specs: list[RunSpec],
    store: RunStore | None = None,
    *,
    force: bool = False,
    workers: int | None = None,
    executor: str | None = None,
    desc: str = "runs",
    weigh: Callable[[Any], float | None] | None = None,
    population: str | None = None,
    population_exec: str | None = None,
) -> Results:
    """Compute every spec not finished yet (module docstring) and return all of them.
    ``workers``: local processes at a time (None: ``$SMALLINIT_WORKERS``, else every core,
    :func:`default_workers`); ``executor``: ``local`` or ``ray`` (None:
    ``$SMALLINIT_EXECUTOR``, else ``local``); ``weigh(config)``: a run's cost for the ETA
    (e.g. :func:`smallinit.llm.training.cost.training_flops_of`; None: no cost, runs timed
    by their kind); ``population``: ``auto``, ``on`` or ``off`` (module docstring; None:
    ``$SMALLINIT_POPULATION``, else ``auto``); ``population_exec``: how a population's step
    runs, ``eager``, ``compile`` or ``cudagraphs`` (None: ``$SMALLINIT_POPULATION_EXEC``,
    else ``eager``; never part of a run's key)."""
    workers = chosen_workers(workers)
    executor = chosen_executor(executor)
    mode = chosen_population(population)
    execution = chosen_population_exec(population_exec)
    store = store or RunStore()
    root = str(store.root)
    unique: dict[tuple[str, str], RunSpec] = {}
    for spec in specs:
        unique.setdefault(spec.ident, spec)
    to_force = {i for i in unique if force and (root, *i) not in _FORCED}
    _FORCED.update((root, *i) for i in to_force)
    todo = [j for i, j in unique.items() if i in to_force or not j.run_of(store).reusable()]
    log.info("%d runs, %d to compute", len(unique), len(todo))
    if todo:
        _prepare(todo)
        weights = [weigh(s.config) if weigh is not None else None for s in todo]
        with RunProgress([s.kind for s in todo], weights, desc=desc, logger=log) as bar:
            position = {id(s): i for i, s in enumerate(todo)}
            together, todo = populations(todo, mode, to_force)
            planned = [([position[id(s)] for s in group], len(group)) for group in together]
            groups: Sequence[tuple[list[RunSpec], int | None]]  # (specs, workers; ray: None)
            if executor == "ray":
                groups = [(todo, None)] if todo else []
            else:
                groups = _local_groups(todo, workers) if todo else []
            bar.plan(
                planned + [([position[id(s)] for s in group], count) for group, count in groups]
            )
            for group in together:
                _run_population(
                    group,
                    store,
                    group[0].ident in to_force,
                    bar,
                    [position[id(s)] for s in group],
                    execution,
                )
            if executor == "ray" and todo:
                _run_on_ray(todo, store, to_force, bar, [position[id(s)] for s in todo])
            elif todo:
                for group, count in groups:
                    if count == 1 or len(group) == 1:
                        for spec in group:
                            interrupts.check()
                            i = position[id(spec)]
                            bar.start(i)
                            _run_here(spec, store, spec.ident in to_force)
                            bar.finish(i, *_outcome(spec, store))
                    else:
                        assert count is not None  # a local group (ray's ran above)
                        _run_in_workers(
                            group, store, to_force, count, bar, [position[id(s)] for s in group]
                        )
    runs = [j.run_of(store) for j in specs]
    failed = [(j, r) for j, r in zip(specs, runs, strict=True) if not r.done]
    if failed:
        reasons = sorted({str(r.status().get("reason")) for _, r in failed})
        log.warning(
            "%d of %d runs not done: %s",
            len({r.key for _, r in failed}),
            len(unique),
            "; ".join(reasons),
        )
    return Results(list(specs), runs)


def _outcome(spec: RunSpec, store: RunStore) -> tuple[str, str]:
    """The run's state after an attempt (``done``, ``failed``, ...) and the ``kind/key`` it
    is stored under, for the progress line (a spec whose key is not its run's, such as a
    run at a chosen learning rate, names the run a reader finds in the store)."""
    try:
        run = spec.run_of(store)
        return run.state, f"{run.kind}/{run.key}"
    except Exception:  # a damaged status file: the next read reports it
        return "unreadable", f"{spec.kind}/{spec.key}"


# ----------------------------------------------------------------------------- how many
def local_cores() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one, e.g. under
    ``taskset`` or a SLURM allocation; else ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def run_threads(spec: RunSpec) -> int | None:
    """Threads the spec's run computes with: its config's ``train.threads`` when set
    (> 0); None when the run uses every core it finds (torch's default, the JAX toy)."""
    threads = getattr(getattr(spec.config, "train", None), "threads", 0)
    return threads if isinstance(threads, int) and threads > 0 else None


def default_workers(specs: list[RunSpec], cores: int | None = None) -> int:
    """``max(1, cores // threads)``, threads the most any of ``specs`` uses per run (a run
    without a thread count uses every core, so it runs alone)."""
    cores = cores or local_cores()
    threads = [run_threads(j) for j in specs]
    known = [t for t in threads if t is not None]
    most = max(known) if known and len(known) == len(threads) else cores
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
            raise ConfigError(
                f"{WORKERS_ENV}={text!r} is not allowed; give an integer "
                ">= 1 (or unset it: every core)"
            ) from None
    if workers < 1:
        raise ConfigError(f"{where}={workers} is not allowed; it must be >= 1")
    return workers


def _chosen(
    value: str | None, name: str, env: str, default: str, allowed: tuple[str, ...], joiner: str
) -> str:
    """``value`` checked against ``allowed``; None becomes ``$env``, else ``default``."""
    where = name
    if value is None:
        value = os.environ.get(env, "").strip() or default
        where = env
    if value not in allowed:
        raise ConfigError(f"{where}={value!r} is not allowed; use {joiner.join(allowed)}")
    return value


def chosen_executor(executor: str | None) -> str:
    """``executor`` checked; None becomes ``$SMALLINIT_EXECUTOR``, else ``local``."""
    return _chosen(executor, "executor", EXECUTOR_ENV, "local", EXECUTORS, " or ")


def _local_groups(todo: list[RunSpec], workers: int | None) -> list[tuple[list[RunSpec], int]]:
    """The runs with how many at a time: all at ``workers`` when given, else grouped by
    threads per run (in order of first appearance), each at :func:`default_workers`."""
    if workers is not None:
        return [(todo, workers)]
    groups: dict[int | None, list[RunSpec]] = {}
    for spec in todo:
        groups.setdefault(run_threads(spec), []).append(spec)
    return [(group, default_workers(group)) for group in groups.values()]


def chosen_population(mode: str | None) -> str:
    """``mode`` checked; None becomes ``$SMALLINIT_POPULATION``, else ``auto``."""
    return _chosen(mode, "population", POPULATION_ENV, "auto", POPULATIONS, ", ")


def chosen_population_exec(execution: str | None) -> str:
    """``execution`` checked; None becomes ``$SMALLINIT_POPULATION_EXEC``, else ``eager``."""
    return _chosen(
        execution, "population execution", POPULATION_EXEC_ENV, "eager", POPULATION_EXECS, ", "
    )


def populations(
    todo: list[RunSpec], mode: str, to_force: AbstractSet[Any] = frozenset()
) -> tuple[list[list[RunSpec]], list[RunSpec]]:
    """The specs of ``todo`` that train together: groups of two or more of one type,
    population key (:meth:`RunSpec.population_key`) and force, in order of first
    appearance; and the rest, in their order. ``mode`` ``off``: no groups."""
    if mode == "off":
        return [], list(todo)
    groups: dict[tuple, list[RunSpec]] = {}
    for spec in todo:
        key = spec.population_key(mode)
        if key is not None:
            groups.setdefault((type(spec), key, spec.ident in to_force), []).append(spec)
    together = [g for g in groups.values() if len(g) > 1]
    grouped = {id(s) for g in together for s in g}
    return together, [s for s in todo if id(s) not in grouped]


def _run_population(
    group: list[RunSpec],
    store: RunStore,
    force: bool,
    bar: RunProgress,
    ids: list[int],
    execution: str = "eager",
) -> None:
    """Compute one population in this process; an error fails its runs (recorded by the
    store), not the sweep, as a worker's would."""
    for i in ids:
        bar.start(i)
    try:
        type(group[0]).compute_population(group, store, force, execution=execution)
    except ConfigError:
        raise
    except Exception as err:
        log.error("a population of %d runs failed: %s: %s", len(group), type(err).__name__, err)
    for spec, i in zip(group, ids, strict=True):
        bar.finish(i, *_outcome(spec, store))


def _prepare(todo: list[RunSpec]) -> None:
    by_type: dict[type[RunSpec], list[RunSpec]] = {}
    for spec in todo:
        by_type.setdefault(type(spec), []).append(spec)
    for spec_type, specs in by_type.items():
        spec_type.prepare(specs)


def _run_here(spec: RunSpec, store: RunStore, force: bool) -> None:
    try:
        spec.compute(store, force)
    except ConfigError:
        raise
    except Exception as err:  # recorded in the run's status by the store
        log.error("run %s failed: %s: %s", spec.tags, type(err).__name__, err)


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


def _worker(spec: RunSpec, root: str, force: bool, parent: int, conn) -> None:
    """Body of a worker process: compute one spec, report how it went through ``conn``."""
    _exit_with_parent(parent)
    # a terminal's Ctrl-C reaches the whole process group: the driver alone handles it
    # (it stops and kills its workers; their runs stay resumable)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING)
    set_quiet(True)  # the driver's bar is the one bar; a run's own bar would garble it
    try:
        spec.compute(RunStore(root), force)
        conn.send(("ok", ""))
    except ConfigError as err:
        conn.send(("config", str(err)))
    except Exception as err:
        conn.send(("error", f"{type(err).__name__}: {err}"))
    finally:
        conn.close()


def _record_death(spec: RunSpec, store: RunStore, reason: str) -> None:
    """Record the run of a worker that died before it could as failed (retryable)."""
    run = store.writer(spec.kind, spec.config, version=spec.version)
    if not run.done:
        run.fail(reason, final=False)


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


def _run_in_workers(
    todo: list[RunSpec],
    store: RunStore,
    to_force: set,
    workers: int,
    bar: RunProgress,
    ids: list[int],
) -> None:
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("spawn")
    pending = list(zip(todo, ids, strict=True))
    running: dict[int, tuple[RunSpec, Any, Any, int]] = {}  # sentinel -> (spec, proc, conn, id)
    config_error: str | None = None
    try:
        while pending or running:
            interrupts.check()
            while pending and len(running) < workers and config_error is None:
                spec, i = pending.pop(0)
                here, there = ctx.Pipe(duplex=False)
                proc = ctx.Process(
                    target=_worker,
                    name=f"run-{spec.kind}-{spec.key}",
                    args=(spec, str(store.root), spec.ident in to_force, os.getpid(), there),
                )
                bar.start(i)
                proc.start()
                there.close()
                running[proc.sentinel] = (spec, proc, here, i)
            if not running:
                break
            ready = cast(list[int], wait(list(running), timeout=1.0))  # the sentinels given
            if not ready:
                bar.tick()  # the bar's clock and ETA move while runs train
            for sentinel in ready:
                spec, proc, conn, i = running.pop(sentinel)
                proc.join()
                message = _receive(conn)
                if message is None:
                    reason = _death_reason(proc.exitcode)
                    _record_death(spec, store, reason)
                    log.error("run %s (%s/%s) failed: %s", spec.tags, spec.kind, spec.key, reason)
                elif message[0] == "config":
                    config_error = config_error or message[1]
                elif message[0] == "error":
                    log.error("run %s failed: %s", spec.tags, message[1])
                bar.finish(i, *_outcome(spec, store))
    finally:
        for _job, proc, conn, _i in running.values():
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
        raise ConfigError(
            "executor 'ray' needs Ray: pip install 'smallinit[ray]' (or "
            "pip install ray), or use --executor local"
        ) from None
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


def _ray_task(spec: RunSpec, root: str, force: bool, probe: str) -> tuple[str, str, float]:
    """Body of one Ray task: compute one spec in the shared store; returns how it went and
    the seconds it took (for the driver's ETA). A config error comes back as a message (it
    is the caller's mistake, not worth a retry); any other error propagates so that Ray
    retries the task (the store has recorded it as retryable)."""
    if not os.path.isfile(probe):
        import socket  # lazy: only for this message

        return (
            "config",
            f"run store {root} is not visible from Ray node "
            f"{socket.gethostname()}: with --executor ray the store must be on a file "
            "system every node mounts at the same path (--runs-dir or $SMALLINIT_RUNS)",
            0.0,
        )
    logging.basicConfig(level=logging.WARNING)
    set_quiet(True)
    t0 = time.perf_counter()
    try:
        spec.compute(RunStore(root), force)
    except ConfigError as err:
        return ("config", str(err), time.perf_counter() - t0)
    return ("ok", "", time.perf_counter() - t0)


def _ray_resources(ray, spec: RunSpec) -> dict[str, float]:
    """What one run asks Ray for: one GPU when it trains on one (device ``cuda``, or
    ``auto`` on a cluster that has GPUs), and its threads as CPUs; a run without a thread
    count takes a whole node (the smallest node's CPUs), or a GPU's share of a node's CPUs
    when it has a GPU, so that every GPU of a node gets a run."""
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    node_cpus = min((n.get("CPU", 1.0) for n in nodes), default=1.0)
    device = getattr(getattr(spec.config, "train", None), "device", None)
    gpu_nodes = [n for n in nodes if n.get("GPU", 0) > 0]
    gpus = 1.0 if device == "cuda" or (device == "auto" and gpu_nodes) else 0.0
    threads = run_threads(spec)
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
    return {
        k: v
        for k, v in os.environ.items()
        if k.startswith("SMALLINIT_") and k not in (WORKERS_ENV, EXECUTOR_ENV)
    }


def _run_on_ray(
    todo: list[RunSpec], store: RunStore, to_force: set, bar: RunProgress, ids: list[int]
) -> None:
    ray = _import_ray()
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS") or None, logging_level=logging.WARNING)
    store.check_root()
    root = str(store.root.resolve())
    probe = store.root.resolve() / ".executor" / f"ray-{os.getpid()}-{time.time_ns()}"
    probe.parent.mkdir(parents=True, exist_ok=True)
    probe.write_text("this run store is shared with the Ray cluster\n")
    retries = ray_retries()
    task = ray.remote(_ray_task)
    env = _forwarded_env()
    pending: dict[Any, tuple[RunSpec, int]] = {}
    config_error: str | None = None
    try:
        for i, spec in zip(ids, todo, strict=True):
            options: dict[str, Any] = dict(
                _ray_resources(ray, spec),
                max_retries=retries,
                retry_exceptions=True,
                name=f"{spec.kind}-{spec.key}",
            )
            if env:
                options["runtime_env"] = {"env_vars": env}
            ref = task.options(**options).remote(spec, root, spec.ident in to_force, str(probe))
            pending[ref] = (spec, i)
        while pending:
            interrupts.check()
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            if not ready:
                bar.tick()
            for ref in ready:
                spec, i = pending.pop(ref)
                seconds = None
                try:
                    kind, message, seconds = ray.get(ref)
                except Exception as err:  # retries spent: the worker died or the run raised
                    reason = (
                        f"failed on Ray after {retries + 1} attempts: "
                        f"{type(err).__name__}: {one_line(str(err))[:500]}"
                    )
                    _record_death(spec, store, reason)
                    log.error("run %s (%s/%s) %s", spec.tags, spec.kind, spec.key, reason)
                else:
                    if kind == "config":
                        config_error = config_error or message
                        for other in pending:
                            ray.cancel(other)
                bar.finish(i, *_outcome(spec, store), seconds)
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
