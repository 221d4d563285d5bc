"""The one way to extend the trainer: callbacks at fixed points of a run.

The :class:`~smallinit.llm.training.train.Trainer` calls each of its callbacks, on rank 0
only, at these points::

    on_start(trainer, run, step)          before the first step of this process (the step it
                                          resumes from; 0 for a fresh run)
    on_record(record)                     after each record is stored in metrics.jsonl
    on_step(trainer, run, step, record)   after every optimizer step (its log record, or None)
    on_end(trainer, run)                  after the last step of this process, also when the
                                          run fails

``run`` is the run being written (``run.log`` stores a record and hands it to every
``on_record``). Probes (:mod:`smallinit.llm.training.probes`), checkpoints
(:class:`Checkpoints`) and log sinks (:mod:`smallinit.llm.training.sinks`) are callbacks. A
callback never changes what is trained: the weights, batches and numbers of a run are the
same with any set of callbacks, so callbacks are not part of the run's config or key. A
callback marked ``optional`` (the log sinks) that raises is dropped with a warning and the
training goes on; any other callback's error fails the run.
"""

from __future__ import annotations

import logging
from typing import Any

from smallinit.llm.training.checkpoint import save_checkpoint

log = logging.getLogger(__name__)


class Callback:
    """Does nothing at every point; subclasses override the points they need."""

    optional = False  # True: an error drops this callback instead of failing the run

    def on_start(self, trainer: Any, run: Any, step: int) -> None:
        pass

    def on_record(self, record: dict[str, Any]) -> None:
        pass

    def on_step(self, trainer: Any, run: Any, step: int, record: dict[str, Any] | None) -> None:
        pass

    def on_end(self, trainer: Any, run: Any) -> None:
        pass


class Checkpoints(Callback):
    """A checkpoint every ``every`` steps, except after the last one (whose final weights
    supersede it); 0: none (:func:`~smallinit.llm.training.checkpoint.save_checkpoint`)."""

    def __init__(self, every: int, last: int):
        self.every = every
        self.last = last

    def on_step(self, trainer, run, step, record) -> None:
        if self.every and step % self.every == 0 and step != self.last:
            save_checkpoint(run, step, trainer.model, trainer.optimizer)


class Recorder:
    """The run as callbacks see it: :meth:`log` stores a record, then hands it to each
    callback's ``on_record``; everything else is the run's own. Calls every point of every
    callback, dropping an optional one that raises."""

    def __init__(self, run: Any, callbacks: list[Callback]):
        self._run = run
        self.callbacks = list(callbacks)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._run, name)

    def log(self, record: dict[str, Any]) -> None:
        self._run.log(record)
        self.call("on_record", record)

    def call(self, point: str, *args: Any) -> None:
        """``callback.<point>(*args)`` for every callback, in order."""
        for callback in list(self.callbacks):
            try:
                getattr(callback, point)(*args)
            except Exception as err:
                if not callback.optional:
                    raise
                log.warning(
                    "%s failed at %s (%s: %s); dropped",
                    type(callback).__name__,
                    point,
                    type(err).__name__,
                    err,
                )
                self.callbacks.remove(callback)
