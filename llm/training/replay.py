"""A stored run logged into the log sinks (:mod:`smallinit.llm.training.sinks`) after the fact.

A finished run of the store holds everything a live sink is shown while it trains: its
config (the hyperparameters), ``metrics.jsonl`` (every record the sinks see, in order) and
its summary (the final evaluation). :func:`replay` hands them to a sink's
``open``/``scalars``/``close`` in that order, so the sink holds what it would hold had it
watched the run: the same tags at the same steps, the same hyperparameters and final
evaluation. That serves a run reused from the store, one computed on another machine (its
folder copied in) and one whose sink failed to start (:func:`retry_failed_starts`, on the
run's next use). ``smallinit runs log KEYS --tensorboard DIR | --wandb PROJECT`` is the
command.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from smallinit.core.errors import ConfigError, one_line
from smallinit.core.results import StoredRun, open_dir
from smallinit.llm.training.sinks import (
    Sink,
    final_evaluation,
    hyperparameters,
    pending,
    readable_name,
    set_pending,
)

log = logging.getLogger(__name__)


def last_step(run: StoredRun, records: list[dict[str, Any]]) -> int:
    """The step the final evaluation is logged at: the run's ``train.steps`` when its
    config has one, else the last step its records name (0 for none)."""
    steps = (run.config.get("train") or {}).get("steps")
    if isinstance(steps, int) and not isinstance(steps, bool):
        return steps
    return max((r["step"] for r in records if isinstance(r.get("step"), int)), default=0)


def replay(run: StoredRun, sinks: list[Sink], *, name: str | None = None) -> int:
    """Log the stored ``run`` into each of ``sinks`` as if it had watched the run train:
    opened at step 0 under ``name`` (default :func:`~smallinit.llm.training.sinks.
    readable_name` of its config) with its config as hyperparameters, every record of its
    ``metrics.jsonl`` (those with a step), then closed with the final evaluation of its
    summary at the last step. Returns the number of records logged into each sink."""
    if run.state == "corrupt":
        raise ConfigError(
            f"run {run.name} is corrupt ({run.reason}); `smallinit runs verify` says more"
        )
    records = run.metrics()
    title = name or readable_name(run.kind, run.config)
    final = final_evaluation(run.summary)
    step = last_step(run, records)
    logged = sum(isinstance(r.get("step"), int) for r in records)
    for sink in sinks:
        sink.open(run.kind, run.key, title, hyperparameters(run.config), 0)
        try:
            for record in records:
                sink.on_record(record)
        finally:
            sink.close(final, step, run.state == "done")
    return logged


def retry_failed_starts(run_path: str | Path, sinks: list[Any]) -> list[str]:
    """For a run one of whose sinks failed to start when it trained (the run's
    :data:`~smallinit.llm.training.sinks.PENDING`): log the stored run into the same kind of
    sink given now, unless that sink already tried the run in this process; says so with a
    warning, clears the record when it worked and keeps it (warning again) when it did not.
    Returns the labels of the sinks it logged the run into."""
    failed = pending(run_path)
    done = []
    for sink in sinks:
        if not isinstance(sink, Sink) or sink.label not in failed:
            continue
        run = open_dir(Path(run_path))
        if run.key in sink.tried:
            continue
        before = failed[sink.label].get("reason", "?")
        log.warning(
            "run %s: its %s sink failed to start when it trained (%s); logging the "
            "stored run into %s now",
            run.name,
            sink.label,
            before,
            sink.target,
        )
        try:
            replay(run, [sink])
        except Exception as err:  # a sink stays optional: the run is there either way
            log.warning(
                "run %s: %s failed again (%s); kept for the run's next use",
                run.name,
                sink.label,
                one_line(err),
            )
            continue
        set_pending(run_path, sink.label, None)
        done.append(sink.label)
    return done
