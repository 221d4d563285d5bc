"""Where a run's numbers were computed: the processor, its vector extensions and the numeric
libraries as loaded.

A run is bit-reproducible on one machine, but float kernels differ between processors (an
AVX-512 and an AVX2 machine round a matrix product differently), and training amplifies the
difference, so a stored run records the machine that computed it. Libraries are read from
``sys.modules`` only: a module this process has not imported is not recorded, and nothing is
imported here (the ground floor imports no numeric framework).
"""

from __future__ import annotations

import platform
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

CPUINFO = Path("/proc/cpuinfo")
LIBRARIES = ("numpy", "torch", "jax", "jaxlib", "cupy")


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of Linux's /proc/cpuinfo (empty elsewhere)."""
    out: dict[str, str] = {}
    try:
        for line in CPUINFO.read_text(errors="replace").splitlines():
            if not line.strip():
                break
            name, _, value = line.partition(":")
            out[name.strip()] = value.strip()
    except OSError:
        pass
    return out


def _cpu_model(info: dict[str, str]) -> str:
    """The processor's model name (``info``: :func:`_cpuinfo`; ``platform.processor()``
    where it has none)."""
    return info.get("model name") or platform.processor() or "unknown"


def _vector_extensions(info: dict[str, str]) -> list[str]:
    """The processor's vector extensions (the AVX family and FMA), which decide the float
    kernels: a virtual machine's model name (``AMD EPYC``) often does not."""
    return sorted(f for f in info.get("flags", "").split() if f.startswith("avx") or f == "fma")


def _torch_capability() -> str | None:
    """The vector kernels torch dispatches to (``AVX512``, ``AVX2``, ``DEFAULT``, ...), where
    torch is loaded."""
    torch = sys.modules.get("torch")
    try:
        return str(torch.backends.cpu.get_cpu_capability()) if torch is not None else None
    except (AttributeError, RuntimeError):
        return None


def _version(module) -> str:
    try:
        return str(module.__version__)
    except AttributeError:
        return "unknown"


@lru_cache(maxsize=1)
def _fixed() -> dict[str, Any]:
    info = _cpuinfo()
    return {
        "machine": platform.machine(),
        "cpu": _cpu_model(info),
        "cpu_vector_extensions": _vector_extensions(info),
        "python": platform.python_version(),
    }


def same_machine(record: Any) -> bool:
    """Whether a stored host record (:func:`record`) names a machine like this one: the same
    machine type, CPU model and vector extensions (what decides its speed and its float
    kernels; the Python and library versions are left aside)."""
    here = _fixed()
    return isinstance(record, dict) and all(
        record.get(k) == here[k] for k in ("machine", "cpu", "cpu_vector_extensions")
    )


def record() -> dict[str, Any]:
    """The host record of a finished run: machine, CPU model and vector extensions, Python,
    the versions of the numeric libraries this process has loaded, torch's CPU kernel
    choice, and the CUDA device's name where the process used one."""
    libraries = {name: _version(sys.modules[name]) for name in LIBRARIES if name in sys.modules}
    out = {**_fixed(), "libraries": libraries}
    capability = _torch_capability()
    if capability is not None:
        out["torch_cpu_capability"] = capability
    gpu = _gpu_name()
    if gpu is not None:
        out["gpu"] = gpu
    return out


def _gpu_name() -> str | None:
    """The name of the CUDA device this process has used, else None. It never starts CUDA:
    a process that trained only on the CPU records no GPU."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    return torch.cuda.get_device_name(torch.cuda.current_device())
