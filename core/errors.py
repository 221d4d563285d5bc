"""Errors a user can act on.

Every error meant for a user derives from :class:`SmallinitError` and carries a one-line
message naming the bad value and what is allowed. The CLI prints it on one line and exits
with status 2, without a traceback. A warning meant for a user (a request that was not
carried out, the rest of it was) derives from :class:`SmallinitWarning`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class SmallinitError(Exception):
    """Base class: a problem with the user's input, config or stored files."""


class ConfigError(SmallinitError, ValueError):
    """A config value, override or command-line argument is not allowed."""


class StoreError(SmallinitError):
    """A run directory or one of its files is missing, corrupt or inconsistent."""


class CorruptRun(StoreError):
    """A run folder that is not what its key says: its config does not hash to the key, or a
    file differs from the manifest recorded when the run finished. ``problem`` is what
    differs, without the advice of the message."""

    def __init__(self, message: str, problem: str = ""):
        super().__init__(message)
        self.problem = problem or message


class RunFailed(SmallinitError):
    """A run ended without a result for a scientific reason (divergence, NaN loss).

    Raised inside a run's body; the run store records the run as failed with this reason
    and keeps the failure as the run's outcome (it is not retried unless forced).
    """


class SmallinitWarning(UserWarning):
    """Base class of the warnings meant for a user: something asked for that was not done,
    said in one line (the CLI prints it as ``smallinit: warning: ...``)."""


def one_line(text: object) -> str:
    """Collapse whitespace so a message (or an exception's) always prints on one line."""
    return " ".join(str(text).split())


def require(condition: bool, message: str) -> None:
    """Raise :class:`ConfigError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(one_line(message))


def check_choice(name: str, value: Any, allowed: Iterable[Any]) -> Any:
    """Return ``value`` if it is one of ``allowed``, else raise a ConfigError naming both."""
    allowed = list(allowed)
    if value not in allowed:
        shown = ", ".join(repr(a) for a in allowed)
        raise ConfigError(f"{name}={value!r} is not allowed; choose one of {shown}")
    return value
