"""Readable names of the runs of a plan, for the log sinks (TensorBoard, W&B).

A run's store key says nothing to a person; its name in a sink says what it stands for:
the profile, the first figure that draws it and its tags in its experiment, e.g.
``quick/fig7/d128/γ1/seed3`` (:func:`smallinit.llm.training.sinks.readable_name`; a run
without tags is named by the telling fields of its config). ``smallinit runs log
--profile`` names replayed runs so, and the commands that train a plan (``smallinit figs``,
``llm sweep``) name the runs they train so (:func:`smallinit.llm.training.sinks.
sink_environment`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from smallinit.core.config import config_to_dict
from smallinit.core.jobs import RunSpec
from smallinit.llm.training.sinks import readable_name
from smallinit.study.experiments import EXPERIMENTS, specs


def spec_names(
    run_specs: Iterable[RunSpec], prefix: str | None = None
) -> dict[tuple[str, str], str]:
    """(kind, key) → readable name of each spec: ``prefix`` (else its kind) and its tags
    (its config's telling fields when it has none); the first spec of a run names it."""
    names: dict[tuple[str, str], str] = {}
    for spec in run_specs:
        if spec.ident not in names:
            names[spec.ident] = readable_name(
                spec.kind, config_to_dict(spec.config), spec.tags or None, prefix=prefix
            )
    return names


def profile_names(
    profile: str, experiments: Sequence[str] | None = None
) -> dict[tuple[str, str], str]:
    """(kind, key) → readable name (``quick/fig7/d128/γ1/seed3``) of every run of a
    profile's plan (of ``experiments`` only, when given): the profile, the first figure the
    run is drawn in, and its tags."""
    names: dict[tuple[str, str], str] = {}
    for experiment in EXPERIMENTS.values():
        if experiments is not None and experiment.name not in experiments:
            continue
        figure = min(experiment.figures, default=None)
        prefix = f"{profile}/fig{figure}" if figure is not None else profile
        for ident, name in spec_names(specs(experiment.name, profile), prefix).items():
            names.setdefault(ident, name)
    return names
