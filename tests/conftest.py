"""Session setup: one JAX CPU device per core, asked for before any test starts JAX, as the
toy scan engine does where it starts (:func:`smallinit.toy.jaxsetup.use_all_cpu_cores`), so
the multi-device (shard_map) path of the two-layer engine runs in the suite whichever test
touches JAX first. Importing smallinit changes no JAX setting by itself."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest


def pytest_configure(config) -> None:
    if importlib.util.find_spec("jax") is not None:
        from smallinit.toy.jaxsetup import use_all_cpu_cores

        use_all_cpu_cores()


@pytest.fixture
def bench_torch_threads(request):
    """torch's intra-op threads set to the benchmark module's ``THREADS`` for one test, and
    restored after it (the training-step and generation benchmarks time at 2 threads)."""
    import torch  # only the benchmarks that ask for this fixture need torch

    before = torch.get_num_threads()
    torch.set_num_threads(request.module.THREADS)
    yield
    torch.set_num_threads(before)


# tests/ mirrors the source: tests/X holds the tests of source folder X (tests/core,
# tests/cli, ...; the rule is docs/architecture.md's, checked by test_architecture.py); the
# helpers several of them share (badinput.py, launch.py, kernel_cases.py,
# torch_phase_loop.py) and the data they read (tests/data) stay here, on the import path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
