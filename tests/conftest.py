"""Session setup: one JAX CPU device per core, asked for before any test starts JAX, as the
toy scan engine does where it starts (:func:`smallinit.toy.jaxsetup.use_all_cpu_cores`), so
the multi-device (shard_map) path of the two-layer engine runs in the suite whichever test
touches JAX first. Importing smallinit changes no JAX setting by itself."""

from __future__ import annotations

import importlib.util


def pytest_configure(config) -> None:
    if importlib.util.find_spec("jax") is not None:
        from smallinit.toy.jaxsetup import use_all_cpu_cores

        use_all_cpu_cores()
