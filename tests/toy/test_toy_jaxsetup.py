"""No import side effects: importing the toy modules leaves JAX as it was (float32, the
default device count); the entry points switch float64 on explicitly, and the scan engine
asks for one CPU device per core where it starts (docs/science.md §2), and JAX does not
preallocate a GPU that the transformer runs of the same process need."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("jax")


def run_fresh(code: str) -> str:
    """Run ``code`` in a fresh interpreter (JAX settings are per process) without a chosen
    device count; returns its stdout."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "XLA_FLAGS",
            "JAX_NUM_CPU_DEVICES",
            "JAX_ENABLE_X64",
            "XLA_PYTHON_CLIENT_PREALLOCATE",
        )
    }
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return out.stdout.strip()


def test_importing_the_toy_changes_no_jax_setting():
    out = run_fresh("""
        import jax
        before = (jax.config.jax_enable_x64, jax.config.jax_num_cpu_devices)
        from smallinit.toy import (condense, diagonal, escape, grouped_engine, jax_activations,
                                   initial_condensation, scan, twolayer)
        after = (jax.config.jax_enable_x64, jax.config.jax_num_cpu_devices)
        print(before == after, after[0])
    """)
    assert out == "True False"


@pytest.mark.parametrize(
    "call",
    [
        "twolayer.init_asi(0, 4, 2)",
        "twolayer.gradients(np.ones(2), np.ones((2, 2)), 1.0, *twolayer.reference_data(), 'tanh')",
        "diagonal.train(diagonal.DiagonalConfig(alphas=(0.1, 1.0), max_steps=10), "
        "np.eye(2, 3), np.ones(2))",
        "escape.plateau_times(escape.EscapeConfig(max_steps=10), 2, np.eye(2, 3), np.ones(2))",
    ],
)
def test_entry_points_switch_float64_on(call):
    out = run_fresh(f"""
        import jax
        import numpy as np
        from smallinit.toy import diagonal, escape, twolayer
        import os
        before = (jax.config.jax_enable_x64, os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"))
        result = {call}
        print(*before, jax.config.jax_enable_x64, os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"])
    """)
    # float64 on, and on a GPU JAX takes memory as it needs it (PyTorch shares the process)
    assert out == "False None True false"


def test_the_scan_engine_asks_for_all_cpu_cores_where_it_starts():
    out = run_fresh("""
        import os
        import jax
        from smallinit.toy.scan import ScanConfig, simulate
        simulate(ScanConfig(gammas=(0.5,), gamma_primes=(0.0,), widths=(4, 8), seeds=1,
                            max_steps=5))
        print(jax.device_count(), os.cpu_count(), jax.config.jax_enable_x64)
    """)
    n_dev, n_cpu, x64 = out.split()
    assert int(n_dev) == max(1, int(n_cpu)) and x64 == "True"
