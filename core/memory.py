"""Memory budgets: estimate what a command will allocate before it allocates, and refuse
plainly when it cannot fit.

The limit is ``$SMALLINIT_MEMORY_LIMIT`` (bytes, or with a unit: ``512M``, ``64G``, ``1.5T``;
``0`` or ``off`` disables the check), else 80% of the memory available now where the work
will live: host memory (``MemAvailable`` of ``/proc/meminfo``; total physical memory where
that is not readable) unless the caller names another pool — a CUDA run's caller passes its
GPU's free memory (:mod:`smallinit.llm.training.memory`), since a GPU run holds its
tensors there, and host RAM, which on a VM may grow on demand, says nothing about it.
An estimate is an upper-order figure, not a promise: it counts the large arrays a run holds
at once and ignores interpreter and library overheads, so it refuses only what clearly
cannot fit.
"""

from __future__ import annotations

import math
import os
import re

from smallinit.core.errors import ConfigError

ENV = "SMALLINIT_MEMORY_LIMIT"
SHARE_OF_AVAILABLE = 0.8
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_size(text: str) -> int:
    """Bytes from ``"123"``, ``"512M"``, ``"64G"``, ``"1.5T"`` (binary units, case-free)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT]?)[iI]?[bB]?\s*", text)
    if not match:
        raise ConfigError(
            f"{ENV}={text!r} is not a size; give bytes or a number with a unit, "
            "e.g. 512M, 64G (0 or off: no limit)"
        )
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def available_bytes() -> int:
    """Memory available to a new allocation now (Linux ``MemAvailable``; else physical)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 2**63 - 1


def limit_bytes(available: int | None = None) -> int | None:
    """The memory limit in force (None: checks are off): ``$SMALLINIT_MEMORY_LIMIT`` when
    set, else 80% of ``available`` bytes (None: host memory, :func:`available_bytes`)."""
    text = os.environ.get(ENV, "").strip()
    if text.lower() in ("0", "off", "none"):
        return None
    if text:
        return parse_size(text)
    return int(SHARE_OF_AVAILABLE * (available_bytes() if available is None else available))


def human(n: float) -> str:
    """``1536`` → ``1.5 KiB``; ``3.2e12`` → ``2.9 TiB``."""
    if not math.isfinite(n):
        return "inf"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def check_memory(
    estimate: float, what: str, *, available: int | None = None, pool: str = "host memory"
) -> None:
    """Raise :class:`ConfigError` naming ``what``, the estimate and the limit when
    ``estimate`` bytes exceed the limit; ``what`` names the values responsible, e.g.
    ``"training model.d_model=1000000 (weights, gradients, AdamW state, activations)"``.
    ``available``: the bytes of the pool the work will use (None: host memory), ``pool``
    its name in the message (``"GPU memory (NVIDIA H200)"``)."""
    limit = limit_bytes(available)
    if limit is None or estimate <= limit:
        return
    source = (
        ""
        if os.environ.get(ENV, "").strip()
        else f" ({SHARE_OF_AVAILABLE:.0%} of the {pool} available)"
    )
    raise ConfigError(
        f"{what} needs about {human(estimate)}, more than the limit of "
        f"{human(limit)}{source}; reduce it, or raise the limit with {ENV}=SIZE "
        "(e.g. 64G; off disables the check)"
    )
