"""What an experiment is: a name, the figures that draw it, and a plain function from a
profile to the list of its run specs (:class:`smallinit.core.jobs.RunSpec`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from smallinit.core.jobs import RunSpec


def _none(profile: str) -> int | None:
    return None


def _no_runs(profile: str) -> list[RunSpec]:
    return []


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One experiment of the study (each is a module of :mod:`smallinit.study.experiments`).

    ``specs(profile)`` lists its runs without computing anything. ``workers(profile)``: the
    worker processes the profile pins for it (None: every core, :func:`smallinit.core.jobs.
    run_specs`). ``inner(profile)``: runs that its own runs compute inside themselves
    (compare's transformers), computed first, side by side with the other figures' runs."""

    name: str
    figures: tuple[int, ...]
    about: str
    specs: Callable[[str], list[RunSpec]]
    workers: Callable[[str], int | None] = _none
    inner: Callable[[str], list[RunSpec]] = _no_runs
