"""Runs as objects: list the run store and open one run by its key.

The run store (:mod:`smallinit.core.store`) keeps every result in ``<root>/<kind>/<key>/``
(``config.json``, ``status.json``, ``metrics.jsonl``, ``arrays.npz`` and the files a kind
adds). This module reads it back for people and scripts::

    import smallinit
    run = smallinit.load_run("3f2a")          # a key, a unique key prefix, kind/key or a folder
    run.config                                 # the config it was keyed by (a dict)
    run.summary                                # what the run finished with
    run.metrics()                              # metrics.jsonl as a list of dicts
    run.metrics_frame()                        # ... as a pandas DataFrame (the pandas extra)
    run.arrays()                               # arrays.npz as a dict of NumPy arrays

:func:`list_runs` lists every run (``smallinit runs ls``); a damaged run is listed with
state ``corrupt`` instead of stopping the listing: one whose ``config.json`` does not hash to
its key, whose summary differs from its SHA-256, or whose files differ in size from its
manifest (:mod:`smallinit.core.integrity`); a file's contents are checked against its SHA-256
when it is read, and for every run by :func:`verify_runs` (``smallinit runs verify``).
Nothing here writes to the store, except that a finished run stored before manifests (or
before summaries were hashed) gets them on first verification.
"""

from __future__ import annotations

import re
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from smallinit.core.config import dotted_items, file_kind
from smallinit.core.errors import ConfigError, CorruptRun, StoreError, one_line
from smallinit.core.runs import Run, _unrecorded, read_store_json
from smallinit.core.store import RunStore

KEY = re.compile(r"[0-9a-f]{16}")  # a run key: 16 hex digits of SHA-256 (smallinit.core.store)
KEY_PREFIX = re.compile(r"[0-9a-f]{1,16}")
#: summary entries shown first as a run's main metrics, when present (else the first
#: numeric entries of its summary)
MAIN_METRICS = (
    "val_loss",
    "train_loss",
    "acc",
    "acc_norm",
    "acc_reasoning",
    "acc_fact",
    "share_inferential",
    "share_symmetric",
    "agree",
    "graded",
    "converged",
)
#: config fields named first in a run's one-line summary, when present
SUMMARY_FIELDS = (
    "init",
    "task",
    "corpus",
    "d_model",
    "n_layers",
    "steps",
    "gammas",
    "gamma_primes",
    "widths",
    "gamma",
    "depth",
    "model",
    "seed",
    "seeds",
)


@dataclass
class StoredRun:
    """One run of the store, read back: its kind, key, config, state and results."""

    path: Path
    kind: str
    key: str
    version: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    state: str = "absent"
    problem: str | None = None  # why the run is ``corrupt``

    def __repr__(self) -> str:
        return f"StoredRun({self.kind}/{self.key}, {self.state})"

    @property
    def _run(self) -> Run:
        return Run(self.path, self.kind, self.key, self.config, self.version)

    @property
    def name(self) -> str:
        return f"{self.kind}/{self.key}"

    @property
    def summary(self) -> dict[str, Any]:
        """What a done run finished with (its ``status.json`` summary); {} for a run that is
        not done. A corrupt run has no summary to trust: :class:`CorruptRun` names it and
        why (an empty dict would read as "no metrics")."""
        if self.state == "corrupt":
            raise self._run._corrupt(self.problem or "its files are damaged")
        return self.listed_summary

    @property
    def listed_summary(self) -> dict[str, Any]:
        """The summary as listings show it: a done run's, else {} (a corrupt run's state
        and reason say why it has none)."""
        return (self.status.get("summary") or {}) if self.state == "done" else {}

    @property
    def created(self) -> str | None:
        """When the run was started (its status), else when its config was written."""
        started = self.status.get("started")
        if isinstance(started, str):
            return started
        try:
            mtime = (self.path / "config.json").stat().st_mtime
        except OSError:
            return None
        return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(mtime))

    @property
    def finished(self) -> str | None:
        value = self.status.get("finished")
        return value if isinstance(value, str) else None

    @property
    def reason(self) -> str | None:
        """Why a failed run failed (or why it is corrupt)."""
        return self.problem or self.status.get("reason")

    def main_metrics(self, limit: int = 3) -> dict[str, Any]:
        """A few numeric summary entries: those of :data:`MAIN_METRICS` first."""
        numeric = {
            k: v
            for k, v in self.listed_summary.items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        }
        chosen = [k for k in MAIN_METRICS if k in numeric]
        chosen += [k for k in numeric if k not in chosen]
        return {k: numeric[k] for k in chosen[:limit]}

    def config_summary(self, width: int = 80) -> str:
        """The config in one line: ``key=value`` of its telling fields (leaf names of
        :data:`SUMMARY_FIELDS` first), cut to ``width`` characters."""
        leaves = dict(dotted_items(self.config))
        order = sorted(leaves, key=lambda k: (_rank(k), list(leaves).index(k)))
        text = " ".join(f"{k}={_short(leaves[k])}" for k in order)
        return text if len(text) <= width else text[: width - 3] + "..."

    def metrics(self) -> list[dict[str, Any]]:
        """``metrics.jsonl`` as a list of dicts ([] when the run logged none)."""
        return self._run.metrics()

    def metrics_frame(self):
        """``metrics.jsonl`` as a pandas DataFrame, nested records flattened to dotted
        columns (``loss.reasoning``); needs pandas (``pip install 'smallinit[pandas]'``)."""
        try:
            import pandas  # lazy: optional dependency (the pandas extra)
        except ImportError:
            raise ConfigError(
                "metrics_frame needs pandas: pip install 'smallinit[pandas]' "
                "(run.metrics() gives the same records as a list of dicts)"
            ) from None
        return pandas.json_normalize(self.metrics(), sep=".")

    def arrays(self) -> dict[str, np.ndarray]:
        """``arrays.npz`` as a dict of NumPy arrays (read without pickles)."""
        return self._run.arrays()

    def files(self) -> list[dict[str, Any]]:
        """Every file of the run directory: path relative to it and size in bytes."""
        out = []
        for p in sorted(self.path.rglob("*")):
            if p.is_file() and not p.name.startswith("."):
                out.append({"path": str(p.relative_to(self.path)), "bytes": p.stat().st_size})
        return out

    def record(self) -> dict[str, Any]:
        """The listing record (``smallinit runs ls --json``): the full ``config`` as an
        object (what the run is keyed by), its one-line ``config_summary``, the ``summary``
        it finished with and its ``metrics`` (:meth:`main_metrics`)."""
        return {
            "kind": self.kind,
            "key": self.key,
            "version": self.version,
            "state": self.state,
            "reason": self.reason,
            "created": self.created,
            "finished": self.finished,
            "path": str(self.path),
            "config": self.config,
            "config_summary": self.config_summary(),
            "summary": self.listed_summary,
            "metrics": self.main_metrics(),
        }

    def describe(self) -> dict[str, Any]:
        """Everything about the run (``smallinit runs show --json``)."""
        return {
            "kind": self.kind,
            "key": self.key,
            "version": self.version,
            "state": self.state,
            "reason": self.reason,
            "created": self.created,
            "finished": self.finished,
            "path": str(self.path),
            "config": self.config,
            "summary": self.listed_summary,
            "metrics": self._metrics_overview(),
            "files": self.files(),
        }

    def _metrics_overview(self) -> dict[str, Any]:
        """How many metrics records, their fields and the last record."""
        try:
            records = self.metrics()
        except StoreError as err:
            return {"error": one_line(err)}
        fields = sorted({k for r in records for k in r})
        return {"records": len(records), "fields": fields, "last": records[-1] if records else None}


def _rank(key: str) -> int:
    leaf = key.rpartition(".")[2]
    return SUMMARY_FIELDS.index(leaf) if leaf in SUMMARY_FIELDS else len(SUMMARY_FIELDS)


def _short(value: Any) -> str:
    if isinstance(value, list):
        inner = ",".join(_short(v) for v in value[:4])
        return f"[{inner}{',...' if len(value) > 4 else ''}]"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


# ----------------------------------------------------------------------------- reading the store
def open_dir(path: Path) -> StoredRun:
    """The run in directory ``path`` (``<root>/<kind>/<key>``); a damaged one comes back with
    state ``corrupt`` and the reason, never an exception."""
    kind, key = path.parent.name, path.name
    run = StoredRun(path, kind, key)
    try:
        meta = read_store_json(path / "config.json")
        if not isinstance(meta, dict):
            raise StoreError(f"{path / 'config.json'} is corrupt (not a JSON object)")
        run.version = str(meta.get("version", ""))
        config = meta.get("config")
        run.config = config if isinstance(config, dict) else {}
        live = Run(path, kind, key, run.config, run.version)
        run.status = live.status()
        run.state = live._state_of(run.status)
        live.verify(hashes=False, adopt=False)  # the key and the sizes: one stat a file
    except CorruptRun as err:
        run.state, run.problem = "corrupt", err.problem
    except StoreError as err:
        run.state, run.problem = "corrupt", one_line(err)
    return run


def kinds(root: Path) -> list[str]:
    """The run kinds present under ``root`` (folders not starting with a dot); none when
    the store does not exist yet, a ConfigError when ``root`` is not a folder or cannot
    be one (below a file, a symlink loop)."""
    try:
        info = root.stat()
    except FileNotFoundError:
        return []
    except OSError as err:
        raise ConfigError(
            f"run store root {root} cannot be used ({err.strerror or err}); "
            "give the store's folder with --runs-dir or $SMALLINIT_RUNS"
        ) from None
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(
            f"run store root {root} is {file_kind(info.st_mode)}, not a folder; "
            "give the store's folder with --runs-dir or $SMALLINIT_RUNS"
        )
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def _run_dirs(root: Path, kind: str) -> list[Path]:
    base = root / kind
    if not base.is_dir():
        return []
    return sorted(p for p in base.iterdir() if p.is_dir() and KEY.fullmatch(p.name))


def list_runs(runs_dir: str | Path | None = None, *, kind: str | None = None) -> list[StoredRun]:
    """Every run under the store root (``runs_dir``, else ``$SMALLINIT_RUNS``, else
    ``./runs``), optionally of one ``kind``, sorted by creation time."""
    root = RunStore(runs_dir).root
    present = kinds(root)
    if kind is not None and kind not in present:
        raise ConfigError(
            f"run kind {kind!r} has no runs under {root}; kinds there: "
            f"{', '.join(present) or '(none)'}"
        )
    runs = [open_dir(p) for k in ([kind] if kind else present) for p in _run_dirs(root, k)]
    return sorted(runs, key=lambda r: (r.created or "", r.kind, r.key))


@dataclass
class Verified:
    """One run checked by :func:`verify_runs`: ``problem`` is None when it is what its key
    says; ``recorded`` when its manifest (or its summary's SHA-256) was written now (a run
    stored before they were recorded)."""

    kind: str
    key: str
    state: str
    problem: str | None = None
    recorded: bool = False

    def record(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "key": self.key,
            "state": self.state,
            "ok": self.problem is None,
            "problem": self.problem,
            "recorded": self.recorded,
        }


def verify_runs(
    refs: list[str] | None = None, *, runs_dir: str | Path | None = None, hashes: bool = True
) -> list[Verified]:
    """Check runs of the store (every run, or those ``refs`` name as :func:`load_run` does):
    each ``config.json`` hashes to its key and each finished run's files match its manifest,
    sizes first, then SHA-256 unless ``hashes`` is False. A finished run stored before
    manifests gets one (when the store is writable). Nothing else is written."""
    stored = [load_run(r, runs_dir=runs_dir) for r in refs] if refs else list_runs(runs_dir)
    out = []
    for s in stored:
        run = Run(s.path, s.kind, s.key, s.config, s.version)
        had = _recorded(run)
        checked = Verified(s.kind, s.key, s.state)
        try:
            run.verify(hashes=hashes)
        except CorruptRun as err:
            checked.state, checked.problem = "corrupt", err.problem
        checked.recorded = not had and _recorded(run)
        out.append(checked)
    return out


def _recorded(run: Run) -> bool:
    """Whether the run's status holds what a finished run records (its manifest, and a done
    run's summary SHA-256)."""
    try:
        return not _unrecorded(run.status())
    except StoreError:
        return False


def load_run(ref: str | Path, *, runs_dir: str | Path | None = None) -> StoredRun:
    """One run by ``ref``: its key or a unique key prefix (any kind), ``kind/key-prefix``,
    or a run directory. A ConfigError names ``ref`` when it matches no run or several."""
    root = RunStore(runs_dir).root
    path = Path(ref)
    if (path / "config.json").is_file():
        return open_dir(path)
    text = str(ref).strip()
    kind, _, prefix = text.rpartition("/")
    if not KEY_PREFIX.fullmatch(prefix):
        raise ConfigError(
            f"RUN {text!r} matches no run: it is neither a run directory (with "
            "a config.json) nor a run key (1 to 16 lowercase hex digits, "
            "optionally after KIND/)"
        )
    present = kinds(root)
    if kind and kind not in present:
        raise ConfigError(
            f"RUN {text!r}: run kind {kind!r} has no runs under {root}; kinds "
            f"there: {', '.join(present) or '(none)'}"
        )
    found = [
        p
        for k in ([kind] if kind else present)
        for p in _run_dirs(root, k)
        if p.name.startswith(prefix)
    ]
    if len(found) != 1:
        if not found:
            raise ConfigError(
                f"RUN {text!r} matches no run under {root}; `smallinit runs ls` "
                "lists them (see --runs-dir / $SMALLINIT_RUNS)"
            )
        names = ", ".join(f"{p.parent.name}/{p.name}" for p in found[:4])
        raise ConfigError(
            f"RUN {text!r} matches {len(found)} runs ({names}"
            f"{', ...' if len(found) > 4 else ''}); give more of the key"
        )
    return open_dir(found[0])
