"""Progress bars and logging setup shared by every command.

Bars come from tqdm. They are hidden when output is not a terminal (tqdm's own rule with
``disable=None``) and always hidden after :func:`set_quiet` (the CLI's ``--quiet``) or
with ``SMALLINIT_QUIET=1`` in the environment. Where a bar is hidden because output is not
a terminal, a long loop reports through :mod:`logging` instead, one :func:`step_line` per
logged step (the training loop does; ``--quiet`` silences those lines too, as it sets the
log level to WARNING).

:class:`RunProgress` is the progress of many runs (the job driver's, :mod:`smallinit.core.
jobs`): one bar over runs on a terminal, ``runs done/total`` with the elapsed time and an
ETA, and off a terminal one :func:`run_line` per finished run with the same numbers.

The ETA weighs each run by what the plan says it costs. A run with a cost (a transformer:
its training FLOPs, ``llm/training/cost.py``, handed in by the caller as ``weight``) is
expected to take a + b·(its FLOPs), fitted to the finished runs of its kind (else of all
finished runs with a cost): a fixed time per run (process start, data, evaluation: most of
a tiny CPU run) plus the time per FLOP; a run without one (the toy runs: their cost is the
gradient-flow steps until the loss tolerance, known only once they ran) is expected to take
the mean time of the finished runs of its kind, else of all finished runs without a cost.
So runs of one kind are compared with their own kind, and a kind with nothing finished
yet borrows the rate of its class; until a run of a class has finished the ETA is unknown
(``ETA ?``) rather than guessed. Expected seconds less the seconds a running run has
already had, summed per group of runs that run side by side and divided by how many run
at a time (the group's workers; on Ray, the measured parallelism: finished run-seconds per
second of wall time), give the ETA.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from tqdm.std import TqdmExperimentalWarning

with warnings.catch_warnings():  # tqdm.auto's choice (a notebook's widget, else the
    # terminal's bar) without its asyncio part: importing asyncio costs a tenth of a second
    # of every command's start, a refusal's included
    warnings.simplefilter("ignore", category=TqdmExperimentalWarning)
    from tqdm.autonotebook import tqdm

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


def step_line(
    desc: str, step: int | None, total: int, fields: dict[str, Any], elapsed: float
) -> str:
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


def duration(seconds: float | None) -> str:
    """``1h02m``, ``3m05s``, ``41s``; ``?`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def run_line(
    desc: str,
    done: int,
    total: int,
    name: str,
    state: str,
    seconds: float,
    elapsed: float,
    eta: float | str | None,
) -> str:
    """One plain log line per finished run: ``desc: run D/TOTAL done kind/key (41s),
    elapsed 3m12s, ETA 41m30s`` (``eta``: seconds, or the text of :meth:`RunProgress.
    eta_text`)."""
    eta = eta if isinstance(eta, str) else duration(eta)
    return (
        f"{desc or 'runs'}: run {done}/{total} {state} {name} ({duration(seconds)}), "
        f"elapsed {duration(elapsed)}, ETA {eta}"
    )


def _affine(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """(a, b) ≥ 0 of the least-squares line y ≈ a + b·x; through the origin when the x do
    not vary or the free fit's intercept is negative, flat when its slope is."""
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxx = sum((v - mx) ** 2 for v in x)
    if sxx > 0:
        b = sum((u - mx) * (v - my) for u, v in zip(x, y, strict=True)) / sxx
        a = my - b * mx
        if b < 0:
            return my, 0.0
        if a >= 0:
            return a, b
    return 0.0, sum(u * v for u, v in zip(x, y, strict=True)) / sum(u * u for u in x)


def expected_seconds(
    kind: str, weight: float | None, finished: Sequence[tuple[str, float | None, float]]
) -> float | None:
    """The expected seconds of a run of ``kind`` with cost ``weight`` (None: no cost), from
    ``finished`` runs as (kind, cost, seconds): the module docstring's model. The pool is
    the finished runs of its kind, else of its class (with a cost, without one); without
    a cost the pool's mean time, with one a + b·cost fitted to the pool (least squares,
    a ≥ 0 and b ≥ 0: a fixed time per run — process start, data, evaluation — plus the
    time per FLOP; through the origin while the pool has one cost only). None when the
    pool is empty."""
    costed = weight is not None
    same_class = [(k, w, t) for k, w, t in finished if (w is not None) == costed]
    pool = [f for f in same_class if f[0] == kind] or same_class
    if not pool:
        return None
    times = [t for _, _, t in pool]
    if weight is None:
        return sum(times) / len(times)
    a, b = _affine([w for _, w, _ in pool if w is not None], times)  # all, since costed
    return a + b * weight


class RunProgress:
    """Progress of ``total`` runs (module docstring). ``kinds[i]`` and ``weights[i]``
    (a run's cost, e.g. its FLOPs; None: no cost) describe run ``i``; the driver calls
    :meth:`plan` with the groups it runs (run indices, how many at a time; None for a
    measured parallelism), :meth:`start` and :meth:`finish` per run. On a terminal a tqdm
    bar shows runs done/total, elapsed and ETA; elsewhere each finished run is one INFO
    line of ``logger`` (:func:`run_line`)."""

    def __init__(
        self,
        kinds: Sequence[str],
        weights: Sequence[float | None],
        *,
        desc: str = "runs",
        logger: logging.Logger | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.kinds = list(kinds)
        self.weights = [w if w is not None and w > 0 else None for w in weights]
        self.desc = desc
        self.log = logger or logging.getLogger("smallinit.core.jobs")
        self.clock = clock
        self.t0 = clock()
        self.groups: list[tuple[list[int], int | None]] = [(list(range(len(self.kinds))), 1)]
        self.began: dict[int, float] = {}
        self.took: dict[int, float] = {}
        self.bar = progress(
            total=len(self.kinds),
            desc=desc,
            unit="run",
            leave=True,
            bar_format="{desc}: {n_fmt}/{total_fmt} runs |{bar}| [{elapsed}{postfix}]",
        )
        self.bar.set_postfix_str("ETA ?")

    def plan(self, groups: Sequence[tuple[Sequence[int], int | None]]) -> None:
        """The groups of runs the driver runs one after the other, each with how many of its
        runs run at a time (None: as many as the executor manages, measured)."""
        self.groups = [(list(ids), slots) for ids, slots in groups]

    def start(self, i: int) -> None:
        self.began[i] = self.clock()

    def finish(
        self, i: int, state: str = "done", name: str = "", seconds: float | None = None
    ) -> None:
        """Run ``i`` ended (``state``: done or failed) after ``seconds`` of its own (None:
        since :meth:`start`)."""
        now = self.clock()
        self.took[i] = max(0.0, seconds if seconds is not None else now - self.began.get(i, now))
        self.began.pop(i, None)
        eta = self.eta_text()
        self.bar.set_postfix_str(f"ETA {eta}", refresh=False)
        self.bar.update(1)
        if not bars_shown():
            self.log.info(
                "%s",
                run_line(
                    self.desc,
                    len(self.took),
                    len(self.kinds),
                    name,
                    state,
                    self.took[i],
                    now - self.t0,
                    eta,
                ),
            )

    def tick(self) -> None:
        """Refresh the bar's elapsed time and ETA between runs (terminal only)."""
        if bars_shown():
            self.bar.set_postfix_str(f"ETA {self.eta_text()}", refresh=False)
            self.bar.refresh()

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the estimate
    def expected(self, i: int) -> float | None:
        """Run ``i``'s expected seconds from the runs finished so far
        (:func:`expected_seconds`); None while nothing comparable has finished."""
        return expected_seconds(
            self.kinds[i],
            self.weights[i],
            [(self.kinds[j], self.weights[j], self.took[j]) for j in self.took],
        )

    def estimate(self) -> tuple[float, int]:
        """(seconds until the timed runs have finished, runs that cannot be timed yet): the
        module docstring's sum over groups, the untimed runs left out of it."""
        now = self.clock()
        total, untimed = 0.0, 0
        for ids, slots in self.groups:
            left = [i for i in ids if i not in self.took]
            if not left:
                continue
            seconds = 0.0
            for i in left:
                expected = self.expected(i)
                if expected is None:
                    untimed += 1
                    continue
                seconds += max(0.0, expected - (now - self.began[i] if i in self.began else 0.0))
            if slots is None:
                wall = now - self.t0
                parallel = max(1.0, sum(self.took.values()) / wall) if wall > 0 else 1.0
            else:
                parallel = slots
            total += seconds / max(1, min(parallel, len(left)))
        return total, untimed

    def eta(self) -> float | None:
        """Seconds until every run has finished (module docstring); None while some run
        cannot be timed yet."""
        seconds, untimed = self.estimate()
        return None if untimed else seconds

    def eta_text(self) -> str:
        """``41m30s``; while some runs cannot be timed yet, ``? (≥ 3m05s + 162 untimed
        runs)`` — a lower bound from the runs that can — or ``?`` when none can."""
        seconds, untimed = self.estimate()
        if not untimed:
            return duration(seconds)
        left = len(self.kinds) - len(self.took)
        if untimed == left:
            return "?"
        return f"? (≥ {duration(seconds)} + {untimed} untimed runs)"


class _StderrHandler(logging.StreamHandler):
    """A stream handler on ``sys.stderr`` as it is when a record is written, not when logging
    was set up: a notebook, a test's capture or a caller's redirect may replace it after a
    command configured logging, and a handler holding the old, closed stream would fail."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):  # StreamHandler.__init__ assigns it; the property decides
        pass


def configure_logging(verbosity: int = 0) -> None:
    """INFO for the CLI by default; DEBUG with ``-v``; WARNING with ``--quiet``."""
    level = logging.DEBUG if verbosity > 0 else logging.WARNING if _quiet else logging.INFO
    logging.basicConfig(
        level=level,
        format="%(levelname)s %(name)s: %(message)s",
        force=True,
        handlers=[_StderrHandler()],
    )
    for noisy in ("matplotlib", "jax", "PIL", "urllib3", "fontTools"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
