"""Progress bars and logging setup shared by every command.

Bars come from tqdm. They are hidden when output is not a terminal (tqdm's own rule with
``disable=None``) and always hidden after :func:`set_quiet` (the CLI's ``--quiet``) or
with ``SMALLINIT_QUIET=1`` in the environment. Where a bar is hidden because output is not
a terminal, a long loop reports through :mod:`logging` instead, one :func:`step_line` per
logged step (the training loop does; ``--quiet`` silences those lines too, as it sets the
log level to WARNING).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable
from typing import Any, TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")
_quiet = os.environ.get("SMALLINIT_QUIET", "") not in ("", "0")


def set_quiet(flag: bool) -> None:
    """Hide (True) or show (False) all progress bars from now on."""
    global _quiet
    _quiet = bool(flag)


def progress(iterable: Iterable[T] | None = None, *, desc: str = "", **kwargs: Any) -> tqdm:
    """A tqdm bar that respects ``--quiet`` and stays silent when not on a terminal."""
    kwargs.setdefault("disable", True if _quiet else None)
    kwargs.setdefault("dynamic_ncols", True)
    kwargs.setdefault("leave", False)
    return tqdm(iterable, desc=desc, **kwargs)


def bars_shown() -> bool:
    """Whether :func:`progress` bars are seen: not ``--quiet`` and stderr (where tqdm
    writes) a terminal — tqdm's own rule for ``disable=None``."""
    if _quiet:
        return False
    try:
        return bool(sys.stderr.isatty())
    except (AttributeError, ValueError):  # replaced or closed stream
        return False


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.5g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.3e}"
    return str(value)


def step_line(desc: str, step: int | None, total: int, fields: dict[str, Any],
              elapsed: float) -> str:
    """One plain log line of a loop's step: ``desc step S/TOTAL name value ... elapsed Xs``
    (``tok_per_s`` is written ``tok/s`` and rounded to an integer)."""
    parts = [desc or "step", f"step {step}/{total}" if total else f"step {step}"]
    for name, value in fields.items():
        if name == "tok_per_s":
            parts.append(f"tok/s {value:.0f}")
        else:
            parts.append(f"{name} {_number(value)}")
    parts.append(f"elapsed {elapsed:.1f}s")
    return " ".join(parts)


def configure_logging(verbosity: int = 0) -> None:
    """INFO for the CLI by default; DEBUG with ``-v``; WARNING with ``--quiet``."""
    level = logging.DEBUG if verbosity > 0 else logging.WARNING if _quiet else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", force=True)
    for noisy in ("matplotlib", "jax", "PIL", "urllib3", "fontTools"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
