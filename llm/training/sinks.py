"""Where a training run's log records go besides its ``metrics.jsonl``: log sinks.

A sink is a trainer callback (:mod:`smallinit.llm.training.callbacks`) that receives, through
``on_record``, every record the run stores — the training record of a log step (``step``,
``loss``, ``lr``, ``tokens``, ``tok_per_s`` and the task's fields), held-out evaluations,
probes — after it is stored: the sinks see exactly the stream ``metrics.jsonl`` holds.

* :class:`LogLines`: one plain line per record through Python :mod:`logging` (logger
  ``smallinit.llm.training.sinks``, level INFO). The trainer adds it by itself when its
  progress bar is hidden (output not a terminal: batch jobs, CI logs), so such a run says
  what it does while it runs; on a terminal the tqdm bar shows the loss instead.
* :class:`TensorBoard`: every numeric field as a TensorBoard scalar
  (``torch.utils.tensorboard.SummaryWriter``; needs the optional ``tensorboard`` package,
  ``pip install 'smallinit[tb]'``), one event folder per run, ``DIR/<kind>/<key>``.

Sinks are a run-time choice, not part of the run's config: they change where numbers are
shown, never the numbers, so they do not enter the run key (a run logged to TensorBoard is
the same run, reused or resumed as any other). They are chosen by the ``sinks=`` argument of
the training functions, else by the environment: ``SMALLINIT_TENSORBOARD=DIR`` gives every
run of the process (and of the workers it starts) a TensorBoard sink. A sink that fails is
dropped with a warning (sinks are ``optional`` callbacks); the training goes on.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

from smallinit.core.errors import ConfigError
from smallinit.core.progress import step_line
from smallinit.llm.training.callbacks import Callback

log = logging.getLogger(__name__)
TENSORBOARD_ENV = "SMALLINIT_TENSORBOARD"


def scalars(record: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The numeric fields of ``record`` other than ``step`` (nested dicts flattened with
    ``/``; booleans, strings and lists left out)."""
    out: dict[str, float] = {}
    for key, value in record.items():
        if not prefix and key == "step":
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(scalars(value, name + "/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value)
    return out


class LogLines(Callback):
    """One INFO line per record, e.g. ``train step 20/200 loss 5.8123 lr 0.003 tok/s 4.1e+04
    elapsed 3.2s`` (records without a top-level number, such as probes, print nothing)."""

    optional = True

    def __init__(self, desc: str = "train", logger: logging.Logger | None = None):
        self.desc = desc
        self.logger = logger or log
        self.total = 0
        self.clock = time.perf_counter()

    def on_start(self, trainer: Any, run: Any, step: int) -> None:
        self.total = trainer.cfg.train.steps
        self.clock = time.perf_counter()

    def on_record(self, record: dict[str, Any]) -> None:
        fields = {k: v for k, v in record.items()
                  if k not in ("step", "tokens") and isinstance(v, (int, float))
                  and not isinstance(v, bool)}
        if fields:
            self.logger.info("%s", step_line(self.desc, record.get("step"), self.total, fields,
                                             time.perf_counter() - self.clock))


def tensorboard_available() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


class TensorBoard(Callback):
    """Every numeric field of every record as a scalar (tag = the field's name, nested
    probe fields as ``probe/...``) at the record's step, in ``root/<kind>/<key>``. A resumed
    run starts its writer with ``purge_step`` = the first step it recomputes, so TensorBoard
    drops what a killed attempt wrote past the checkpoint, as ``metrics.jsonl`` does."""

    def __init__(self, root: str | Path):
        if not str(root).strip():
            raise ConfigError("the TensorBoard folder is empty; give a folder, e.g. "
                              "--tensorboard tb")
        if not tensorboard_available():
            raise ConfigError("TensorBoard logging needs the tensorboard package; install "
                              "it with: pip install 'smallinit[tb]' (or pip install tensorboard)")
        self.root = Path(root)
        if self.root.exists() and not self.root.is_dir():
            raise ConfigError(f"TensorBoard folder {str(self.root)!r} is a file; give a folder")
        self.writer = None
        self.log_dir: Path | None = None

    optional = True

    def on_start(self, trainer: Any, run: Any, step: int) -> None:
        from torch.utils.tensorboard import SummaryWriter  # lazy: optional dependency

        path = Path(run.path)
        self.log_dir = self.root / path.parent.name / path.name
        self.writer = SummaryWriter(str(self.log_dir), purge_step=step + 1, flush_secs=10)

    def on_record(self, record: dict[str, Any]) -> None:
        step = record.get("step")
        if self.writer is None or not isinstance(step, int):
            return
        for tag, value in scalars(record).items():
            if math.isfinite(value):
                self.writer.add_scalar(tag, value, global_step=step)

    def on_end(self, trainer: Any, run: Any) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def sinks_from_env() -> list[Callback]:
    """The sinks the environment asks for: a :class:`TensorBoard` sink in
    ``$SMALLINIT_TENSORBOARD`` when it is set and not empty."""
    root = os.environ.get(TENSORBOARD_ENV, "").strip()
    if not root:
        return []
    try:
        return [TensorBoard(root)]
    except ConfigError as err:
        raise ConfigError(f"{TENSORBOARD_ENV}={root}: {err}") from None
