"""Process-wide JAX settings of the toy simulations, made by explicit calls (never by an
import).

* :func:`enable_x64` — float64 arithmetic (and, on a GPU, memory taken as needed rather
  than preallocated). Every public toy entry point that computes with
  JAX calls it first: the two-layer engine stops at a loss tolerance of 1e-6 on a loss that
  starts near 1e-2 and reaches 1e-7, which needs relative precision well below float32's
  near convergence; the escape and diagonal solvers integrate over many decades of ε.
  The setting is global (``jax_enable_x64``) and stays on for the rest of the process.
* :func:`use_all_cpu_cores` — one JAX CPU device per core, so a batch can be split over all
  cores (XLA runs each device's loop on its own thread; one device would use one core).
  The scan engines call it where they start (:func:`smallinit.toy.scan.simulate`,
  :func:`smallinit.toy.condense.run`). It only takes effect before JAX has started its
  backends (the first JAX computation of the process), and not when the device count was
  chosen already (``XLA_FLAGS=--xla_force_host_platform_device_count=N`` or
  ``JAX_NUM_CPU_DEVICES``); otherwise it keeps the devices JAX has. The numbers do not
  depend on the device count: each network's steps are the same whatever its batch.
"""

from __future__ import annotations

import logging
import os

import jax

log = logging.getLogger(__name__)


def enable_x64() -> None:
    """Switch JAX to float64 for the rest of the process (idempotent). Also, unless the
    user chose otherwise, JAX allocates GPU memory as it needs it
    (``XLA_PYTHON_CLIENT_PREALLOCATE=false``) instead of taking 75% of the GPU at its first
    computation: a toy run and the transformer runs share the figure driver's process
    (one worker on a GPU), and PyTorch would find only a quarter of the GPU left."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    if not jax.config.jax_enable_x64:  # type: ignore[attr-defined]
        jax.config.update("jax_enable_x64", True)


def use_all_cpu_cores() -> None:
    """Ask for one JAX CPU device per core (module docstring: it takes effect only before
    JAX starts, and only if nobody chose a count already)."""
    if "device_count" in os.environ.get("XLA_FLAGS", "") or "JAX_NUM_CPU_DEVICES" in os.environ:
        return
    try:
        jax.config.update("jax_num_cpu_devices", max(1, os.cpu_count() or 1))
    except RuntimeError:  # JAX already running: keep its devices
        log.debug("JAX backends already initialized; keeping %d device(s)", jax.device_count())
