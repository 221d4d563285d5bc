"""Ctrl-C that is never lost: SIGINT stops a command at once, wherever the main thread is.

Python's default SIGINT handler raises :class:`KeyboardInterrupt` in the main thread at the
next bytecode boundary. When that boundary lies inside code whose exceptions CPython cannot
pass on -- a garbage-collector callback (JAX registers one, ``jax._src.lib._xla_gc_callback``),
a ``__del__`` method, a weakref callback -- the exception goes to :data:`sys.unraisablehook`,
is printed as "Exception ignored in ..." and dropped: the program works on as if no key had
been pressed.

:func:`catching` closes both holes for the length of a command (the CLI wraps every
handler in it):

- a SIGINT handler records the request (:func:`requested`) and raises
  :class:`KeyboardInterrupt`;
- an unraisable hook raises a dropped :class:`KeyboardInterrupt` again in the main thread
  instead of printing it (:func:`_thread.interrupt_main`, from a short-lived thread: the
  handler runs at the main thread's next boundary once the callback has returned);
- :func:`check` raises :class:`KeyboardInterrupt` once a request was recorded; the job
  driver (:mod:`smallinit.core.jobs`) calls it before each run and while it waits for its
  workers, so a request is honoured there even if every raise was dropped.
"""

from __future__ import annotations

import _thread
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator

_requested = threading.Event()
#: seconds between a dropped KeyboardInterrupt and its second raise
AGAIN_S = 0.02


def requested() -> bool:
    """Whether SIGINT arrived inside the current :func:`catching` block."""
    return _requested.is_set()


def check() -> None:
    """Raise :class:`KeyboardInterrupt` when SIGINT arrived (a safe point of a long loop)."""
    if _requested.is_set():
        raise KeyboardInterrupt


def _on_sigint(signum, frame) -> None:
    _requested.set()
    raise KeyboardInterrupt


def _again() -> None:
    time.sleep(AGAIN_S)
    _thread.interrupt_main(signal.SIGINT)


def _unraisable(previous):
    def hook(unraisable) -> None:
        if (
            issubclass(unraisable.exc_type, KeyboardInterrupt)
            and _requested.is_set()
            and signal.getsignal(signal.SIGINT) is _on_sigint
        ):
            # raised again from another thread a moment later, when the main thread has
            # left the callback (and if not, this hook runs once more)
            threading.Thread(target=_again, name="sigint-again", daemon=True).start()
            return
        previous(unraisable)

    return hook


@contextlib.contextmanager
def catching() -> Iterator[None]:
    """SIGINT raises :class:`KeyboardInterrupt` in the main thread and is never dropped
    (see the module doc); the previous handler and hook come back on exit. Outside the
    main thread (where no signal handler can be set) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _requested.clear()
    previous_handler = signal.signal(signal.SIGINT, _on_sigint)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _unraisable(previous_hook)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous_handler)
        sys.unraisablehook = previous_hook
