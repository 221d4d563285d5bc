"""Fig 5: the toy-to-transformer comparison (``smallinit compare``; docs/science.md §5): one
comparison run of the profile's ``[compare]`` table, whose transformers are computed first,
side by side with the other figures' runs."""

from __future__ import annotations

from smallinit.compare import comparison
from smallinit.compare.run import CompareSpec, llm_specs
from smallinit.llm.training.train_spec import TrainSpec
from smallinit.study.experiments.experiment import Experiment


def specs(profile: str) -> list[CompareSpec]:
    return [CompareSpec(comparison.profile_config(profile))]


def inner(profile: str) -> list[TrainSpec]:
    return llm_specs(comparison.profile_config(profile))


EXPERIMENT = Experiment(
    "compare", (5,), "toy-to-transformer comparison (smallinit compare)", specs, inner=inner
)
