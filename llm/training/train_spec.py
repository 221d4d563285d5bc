"""The job driver's spec of a pretraining run (:class:`TrainSpec`): how the driver checks,
trains, tries and prepares a run of :func:`~smallinit.llm.training.train.train`, and forms
runs of one shape into populations (:mod:`smallinit.llm.training.population`). It sits
above both modules, since a population builds on the single run's trainer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from smallinit.core.config import canonical_json, config_to_dict
from smallinit.core.jobs import RunSpec
from smallinit.core.runs import Run
from smallinit.core.store import RunStore
from smallinit.llm.data import corpus as corpus_mod
from smallinit.llm.training.population import Populated
from smallinit.llm.training.train import KIND, VERSION, Dist, LMTask, preflight, train, trial


@dataclass
class TrainSpec(Populated, RunSpec):
    """A pretraining run for the job driver (:mod:`smallinit.core.jobs`): ``config`` is its
    :class:`~smallinit.llm.run_config.RunConfig`; runs of one shape train together as
    populations where the driver forms them (:class:`~.population.Populated`)."""

    kind = KIND
    version = VERSION

    def compute(self, store: RunStore, force: bool) -> Run:
        return train(self.config, runs_dir=store.root, force=force)

    def check(self, memory: tuple[int, str] | None = None) -> None:
        """The checks :func:`train` makes before a run exists (:func:`preflight` for a run
        to be trained, the corpus source), nothing built; ``memory``: the pool to check
        the training step against (None: the device's own)."""
        preflight(self.config, Dist(), memory=memory)
        corpus_mod.check_source(self.config.data)

    def trial(self, config=None) -> dict[str, Any]:
        """:func:`trial` of ``config`` (a cut of this spec's, default its own)."""
        return trial(self.config if config is None else config, LMTask)

    @classmethod
    def prepare(cls, specs: list[RunSpec]) -> None:
        """Build each distinct corpus once, before workers read it."""
        corpora = {
            canonical_json([config_to_dict(s.config.data), s.config.model.vocab_size]): (
                s.config.data,
                s.config.model.vocab_size,
            )
            for s in specs
        }
        for data, vocab in corpora.values():
            corpus_mod.prepare(data, vocab)
