"""Progress bars and logging setup shared by every command.

Bars come from tqdm. They are hidden when output is not a terminal (tqdm's own rule with
``disable=None``) and always hidden after :func:`set_quiet` (the CLI's ``--quiet``) or
with ``SMALLINIT_QUIET=1`` in the environment.
"""

from __future__ import annotations

import logging
import os
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


def configure_logging(verbosity: int = 0) -> None:
    """INFO for the CLI by default; DEBUG with ``-v``; WARNING with ``--quiet``."""
    level = logging.DEBUG if verbosity > 0 else logging.WARNING if _quiet else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", force=True)
    for noisy in ("matplotlib", "jax", "PIL", "urllib3", "fontTools"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
