"""Where a training run's log records go besides its ``metrics.jsonl``: log sinks.

A sink is a trainer callback (:mod:`smallinit.llm.training.callbacks`) that receives, through
``on_record``, every record the run stores — the training record of a log step (``step``,
``loss``, ``lr``, ``tokens``, ``tok_per_s`` and the task's fields), held-out evaluations,
probes — after it is stored: the sinks see exactly the stream ``metrics.jsonl`` holds.

* :class:`LogLines`: one plain line per record through Python :mod:`logging` (logger
  ``smallinit.llm.training.sinks``, level INFO). The trainer adds it by itself when its
  progress bar is hidden (output not a terminal: batch jobs, CI logs), so such a run says
  what it does while it runs; on a terminal the tqdm bar shows the loss instead.
* :class:`TensorBoard` (``torch.utils.tensorboard.SummaryWriter``; the ``tb`` extra) and
  :class:`WandB` (Weights & Biases, ``wandb.init``/``log``; the ``wandb`` extra): every
  number of every record under the groups researchers look for (:func:`grouped`):
  ``train/loss``, ``train/lr``, ``train/tokens``, ``train/tok_per_s``; ``eval/<name>`` for
  held-out numbers (``eval/val_loss``, the anchor task's accuracies); ``probe/...`` for the
  probes. At the start, the run's config as hyperparameters (:func:`hyperparameters`:
  dotted names, ``model.d_model``), so a run that crashes has them too; at the end the
  final evaluation from the run's summary (:func:`final_evaluation`: per-task accuracies
  ``eval/acc_arith_d1``, answer losses ``eval/answer_loss_arith_d1``, ...) at the last
  step — TensorBoard's HParams tab with those as its metrics, W&B's run config and run
  summary. Runs are named for people (:func:`readable_name`: ``llm-train/γ0.5/synthetic/
  d16/L1/lr0.003/seed0``, ``quick/fig7/d128/γ1/seed3`` when replayed with a profile's tags), with
  the run key as a tag (W&B's tags, TensorBoard's ``run_key`` hyperparameter and the last
  folder of the run's TensorBoard path).

Sinks are a run-time choice, not part of the run's config: they change where numbers are
shown, never the numbers, so they do not enter the run key (a run logged to TensorBoard or
W&B is the same run, reused or resumed as any other). They are chosen by the ``sinks=``
argument of the training functions (the CLI's ``--tensorboard DIR`` and ``--wandb
PROJECT``, :func:`chosen_sinks`), else by the environment: ``SMALLINIT_TENSORBOARD=DIR`` and
``SMALLINIT_WANDB=PROJECT`` give every run of the process (and of the workers it starts) a
sink (the other commands that train, ``smallinit figs``, ``compare``, ``llm sweep``,
``llm anchor`` and ``llm anchor-scan``, set them from their flags while they run:
:func:`sink_environment`, which also names their runs by the plan through
``SMALLINIT_RUN_NAMES``); W&B's own variables
(``WANDB_MODE=offline``, ``WANDB_DIR``, ``WANDB_ENTITY``, ...) apply as in any W&B
script. A sink that fails is dropped with a warning (sinks are ``optional`` callbacks); the
training goes on. A sink that fails to start is recorded in
the run (:data:`PENDING`), and the next use of the run with that sink logs the stored run
into it (:func:`smallinit.llm.training.replay.retry_failed_starts`); ``smallinit runs log``
replays any stored run into a sink (:func:`smallinit.llm.training.replay.replay`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from smallinit.core.atomic import atomic_write_json, read_json
from smallinit.core.config import config_to_dict, dotted_items
from smallinit.core.errors import ConfigError, StoreError
from smallinit.core.progress import step_line
from smallinit.llm.training.callbacks import Callback

log = logging.getLogger(__name__)
TENSORBOARD_ENV = "SMALLINIT_TENSORBOARD"
WANDB_ENV = "SMALLINIT_WANDB"
NAMES_ENV = "SMALLINIT_RUN_NAMES"  # a JSON file: kind/key -> readable name (given_names)
#: the fields of a training record that go under ``train/`` (every other top-level number
#: of a record is a held-out evaluation, ``eval/``)
TRAIN_FIELDS = ("loss", "lr", "tokens", "tok_per_s")
#: summary entries that are not part of the final evaluation: sizes and the training loss
#: (already ``train/loss``)
NOT_EVALUATION = frozenset({"steps", "tokens", "params", "train_loss"})
#: summary prefixes that describe the evaluation items rather than measure the model
#: (item counts, the chance and majority-answer baselines)
NOT_EVALUATION_PREFIXES = ("n_", "chance_", "majority_")


def scalars(record: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The numeric fields of ``record`` other than ``step`` (nested dicts flattened with
    ``/``; booleans, strings and lists left out)."""
    out: dict[str, float] = {}
    for key, value in record.items():
        if not prefix and key == "step":
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(scalars(value, name + "/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value)
    return out


def grouped(record: dict[str, Any]) -> dict[str, float]:
    """The numbers of ``record`` under their group: ``train/<name>`` for
    :data:`TRAIN_FIELDS`, ``eval/<name>`` for every other top-level number, nested dicts
    under their own name (``probe/weights/...``); non-finite values left out."""
    out = {}
    for name, value in scalars(record).items():
        if "/" not in name:
            name = f"{'train' if name in TRAIN_FIELDS else 'eval'}/{name}"
        if math.isfinite(value):
            out[name] = value
    return out


def final_evaluation(summary: dict[str, Any] | None) -> dict[str, float]:
    """The final evaluation in a run's summary as ``eval/<name>``: every finite top-level
    number but :data:`NOT_EVALUATION` and the item counts and baselines
    (:data:`NOT_EVALUATION_PREFIXES`): held-out loss, per-category losses, per-task and
    per-level accuracies, answer losses (the anchor task: its accuracies and shares)."""
    out = {}
    for name, value in (summary or {}).items():
        if (
            name in NOT_EVALUATION
            or name.startswith(NOT_EVALUATION_PREFIXES)
            or isinstance(value, bool)
            or not isinstance(value, int | float)
        ):
            continue
        if math.isfinite(value):
            out[f"eval/{name}"] = float(value)
    return out


def hyperparameters(cfg: Any) -> dict[str, str | int | float | bool]:
    """The run's config (a config dataclass, or the dict a stored run keeps) as flat
    hyperparameters, dotted names (``model.d_model``, ``train.lr``); lists and None as their
    text (what TensorBoard's HParams accepts)."""
    data = cfg if isinstance(cfg, dict) else config_to_dict(cfg)
    return {
        path: value if isinstance(value, str | int | float | bool) else str(value)
        for path, value in dotted_items(data)
    }


#: short names of the tags and config fields a readable run name is made of
ABBREVIATIONS = {
    "size": "d",
    "d_model": "d",
    "width": "m",
    "gamma": "γ",
    "n_layers": "L",
    "depth": "L",
    "seed": "seed",
}
#: the config fields (leaf names) a run name is made of when no tags say what the run is
NAME_FIELDS = (
    "init",
    "task",
    "corpus",
    "d_model",
    "width",
    "n_layers",
    "depth",
    "gamma",
    "lr",
    "seed",
)


def _name_part(name: str, value: Any) -> str | None:
    """One part of a readable run name: ``d128`` (size 128), ``γ1`` (γ = 1.0, or the init
    ``gamma:1.0``), ``seed3``; a string as itself, a flag by its name."""
    if value is None:
        return None
    if isinstance(value, bool):
        return name if value else f"no-{name}"
    if isinstance(value, str) and value.startswith("gamma:"):
        try:
            return f"γ{float(value[6:]):g}"
        except ValueError:
            pass
    if isinstance(value, int | float):
        return f"{ABBREVIATIONS.get(name, name)}{value:g}"
    if isinstance(value, str):
        return value.replace("/", "-") or None
    return None


def readable_name(
    kind: str, config: Any, tags: dict[str, Any] | None = None, prefix: str | None = None
) -> str:
    """A run's name for people, e.g. ``fair/fig7/d128/γ1/seed3``: ``prefix`` (a profile and
    figure) then the run's ``tags`` (what it stands for in its experiment), else ``kind``
    then the telling fields of its config (:data:`NAME_FIELDS`: ``llm-train/γ0.5/
    synthetic/d16/L1/lr0.003/seed0``; ``config`` a config dataclass or its dict). A part
    that repeats one before it is left out."""
    if tags is None:
        leaves: dict[str, Any] = {}
        data = config if isinstance(config, dict) else config_to_dict(config)
        for path, value in dotted_items(data):
            leaves.setdefault(path.rpartition(".")[2], value)
        tags = {f: leaves[f] for f in NAME_FIELDS if f in leaves}
    parts = [prefix or kind]
    for name, value in tags.items():
        part = _name_part(name, value)
        if part and part not in parts:
            parts.append(part)
    return "/".join(parts)


def run_title(run: Any, cfg: Any) -> tuple[str, str, str]:
    """(kind, key, readable name) of the run being written: its folder's last two parts,
    and the name the command gave it (:func:`given_names`, e.g. ``quick/fig7/d128/γ1/
    seed3``), else :func:`readable_name` of its config."""
    path = Path(run.path)
    kind, key = path.parent.name, path.name
    return kind, key, given_names().get(f"{kind}/{key}") or readable_name(kind, cfg)


_names_read: dict[tuple[str, float], dict[str, str]] = {}


def given_names() -> dict[str, str]:
    """``kind/key`` → readable name of the runs a command trains (:func:`sink_environment`
    writes them, as JSON, into the file ``$SMALLINIT_RUN_NAMES``, which its worker
    processes inherit); {} without the variable, or where the file cannot be read (a Ray
    node that does not see the driver's temporary folder: its runs are named by their
    config)."""
    path = os.environ.get(NAMES_ENV, "").strip()
    if not path:
        return {}
    try:
        stamp = (path, os.stat(path).st_mtime)
        if stamp not in _names_read:
            data = read_json(Path(path))
            _names_read.clear()
            _names_read[stamp] = (
                {str(k): v for k, v in data.items() if isinstance(v, str)}
                if isinstance(data, dict)
                else {}
            )
        return _names_read[stamp]
    except (OSError, StoreError):
        return {}


#: a run's file listing the sinks that failed to start while it trained (a dot file: not
#: part of the run's manifest); :mod:`smallinit.llm.training.replay` retries them
PENDING = ".sinks-pending.json"


def pending(run_path: str | Path) -> dict[str, dict[str, str]]:
    """The sinks that failed to start for the run in ``run_path``: ``{sink: {"target":
    folder or project, "reason": ...}}`` ({} when none)."""
    path = Path(run_path) / PENDING
    if not path.is_file():
        return {}
    try:
        data = read_json(path)
    except StoreError:  # a damaged record: nothing to retry
        return {}
    return data if isinstance(data, dict) else {}


def set_pending(run_path: str | Path, sink: str, entry: dict[str, str] | None) -> None:
    """Record (``entry``) or clear (None) that ``sink`` failed to start for a run."""
    data = pending(run_path)
    if entry is None:
        data.pop(sink, None)
    else:
        data[sink] = entry
    path = Path(run_path) / PENDING
    if data:
        atomic_write_json(path, data)
    elif path.exists():
        path.unlink()


class Sink(Callback):
    """A log sink: :meth:`open` a run under its readable name with its hyperparameters,
    :meth:`scalars` at a step, :meth:`close` with the final evaluation. The trainer's points
    call them; :func:`smallinit.llm.training.replay.replay` calls them for a stored run. A
    start that fails is recorded in the run (:data:`PENDING`) before the sink is dropped, so
    that the next use of the run logs it."""

    optional = True
    #: the sink's name in :data:`PENDING` and in messages
    label = "sink"
    target = ""

    def __init__(self):
        self.tried: set[str] = set()  # the keys of the runs this sink started (or tried to)

    def open(self, kind: str, key: str, name: str, hparams: dict[str, Any], step: int) -> None:
        raise NotImplementedError

    def scalars(self, values: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def close(self, final: dict[str, float], step: int, ok: bool) -> None:
        raise NotImplementedError

    def on_start(self, trainer: Any, run: Any, step: int) -> None:
        kind, key, name = run_title(run, trainer.cfg)
        self.tried.add(key)
        try:
            self.open(kind, key, name, hyperparameters(trainer.cfg), step)
        except Exception as err:
            set_pending(
                run.path,
                self.label,
                {"target": str(self.target), "reason": f"{type(err).__name__}: {err}"},
            )
            raise
        set_pending(run.path, self.label, None)

    def on_record(self, record: dict[str, Any]) -> None:
        step = record.get("step")
        if isinstance(step, int):
            values = grouped(record)
            if values:
                self.scalars(values, step)

    def on_end(self, trainer: Any, run: Any) -> None:
        summary = getattr(trainer, "summary", None)
        self.close(final_evaluation(summary), trainer.cfg.train.steps, summary is not None)


class LogLines(Callback):
    """One INFO line per record, e.g. ``train step 20/200 loss 5.8123 lr 0.003 tok/s 4.1e+04
    elapsed 3.2s`` (records without a top-level number, such as probes, print nothing)."""

    optional = True

    def __init__(self, desc: str = "train", logger: logging.Logger | None = None):
        self.desc = desc
        self.logger = logger or log
        self.total = 0
        self.clock = time.perf_counter()

    def on_start(self, trainer: Any, run: Any, step: int) -> None:
        self.total = trainer.cfg.train.steps
        self.clock = time.perf_counter()

    def on_record(self, record: dict[str, Any]) -> None:
        fields = {
            k: v
            for k, v in record.items()
            if k not in ("step", "tokens")
            and isinstance(v, (int, float))
            and not isinstance(v, bool)
        }
        if fields:
            self.logger.info(
                "%s",
                step_line(
                    self.desc,
                    record.get("step"),
                    self.total,
                    fields,
                    time.perf_counter() - self.clock,
                ),
            )


def tensorboard_available() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


class TensorBoard(Sink):
    """Every number of every record as a scalar under its group (:func:`grouped`:
    ``train/loss``, ``eval/val_loss``, ``probe/...``) at the record's step, in
    ``root/<readable name>/<key>`` (:func:`readable_name`); the config as hyperparameters
    at the start (the HParams session start, with the run key as ``run_key``), and at the
    end the final evaluation (:func:`final_evaluation`) at the last step, declared as the
    HParams experiment's metrics. A resumed run starts its writer with ``purge_step`` = the
    first step it recomputes, so TensorBoard drops what a killed attempt wrote past the
    checkpoint, as ``metrics.jsonl`` does (a replay starts at step 1: it replaces an
    earlier one)."""

    label = "tensorboard"

    def __init__(self, root: str | Path):
        if not str(root).strip():
            raise ConfigError(
                "the TensorBoard folder is empty; give a folder, e.g. --tensorboard tb"
            )
        if not tensorboard_available():
            raise ConfigError(
                "TensorBoard logging needs the tensorboard package; install "
                "it with: pip install 'smallinit[tb]' (or pip install tensorboard)"
            )
        super().__init__()
        self.root = Path(root)
        if self.root.exists() and not self.root.is_dir():
            raise ConfigError(f"TensorBoard folder {str(self.root)!r} is a file; give a folder")
        self.target = str(self.root)
        self.writer = None
        self.log_dir: Path | None = None
        self.hparams: dict[str, Any] = {}
        self.written: dict[str, int] = {}  # tag -> last step written

    def open(self, kind: str, key: str, name: str, hparams: dict[str, Any], step: int) -> None:
        from torch.utils.tensorboard import SummaryWriter  # lazy: optional dependency
        from torch.utils.tensorboard.summary import hparams as hp  # lazy: optional dependency

        self.log_dir = self.root / name / key
        self.writer = SummaryWriter(str(self.log_dir), purge_step=step + 1, flush_secs=10)
        self.written = {}
        self.hparams = {**hparams, "run_key": key, "run_kind": kind}
        # the session's start (the hyperparameters) now, so that a crashed run has them;
        # TensorBoard keeps the first summary of a tag, so the experiment (which declares
        # the metrics) and the session's end are written by :meth:`close`
        _experiment, start, _end = hp(self.hparams, {})
        self.writer.file_writer.add_summary(start)
        self.writer.flush()

    def scalars(self, values: dict[str, float], step: int) -> None:
        if self.writer is None:
            return
        for tag, value in values.items():
            if self.written.get(tag) != step:  # one value per tag and step
                self.writer.add_scalar(tag, value, global_step=step)
                self.written[tag] = step

    def close(self, final: dict[str, float], step: int, ok: bool) -> None:
        if self.writer is None:
            return
        from torch.utils.tensorboard.summary import hparams as hp  # lazy: optional dependency

        try:
            if final:
                self.scalars(final, step)
            # the HParams tab's experiment, with the final evaluation's tags as its metrics
            experiment, _start, end = hp(self.hparams, final)
            self.writer.file_writer.add_summary(experiment)
            self.writer.file_writer.add_summary(end)
        finally:
            self.writer.close()
            self.writer = None


def wandb_available() -> bool:
    return importlib.util.find_spec("wandb") is not None


class WandB(Sink):
    """A Weights & Biases run per training attempt: ``wandb.init(project, name=<readable
    name>, group=<key>, job_type=<kind>, tags=[<key>], config=<the run's config, dotted>)``
    (the config at the start), then every record's numbers under their group
    (:func:`grouped`) at the record's step, and at the end the final evaluation
    (:func:`final_evaluation`) logged at the last step and put in the W&B run's summary. A
    resumed run is a new W&B run in the same group (``resumed_from_step`` in its config): W&B
    cannot drop what a killed attempt logged past the checkpoint, so the attempts are kept
    apart rather than merged. Mode, folder and entity are W&B's own settings
    (``WANDB_MODE=offline`` logs without a network; ``wandb sync`` uploads later)."""

    label = "wandb"

    def __init__(self, project: str, *, entity: str | None = None):
        if not isinstance(project, str) or not project.strip():
            raise ConfigError(
                "the W&B project is empty; give a project name, e.g. --wandb smallinit"
            )
        if not wandb_available():
            raise ConfigError(
                "W&B logging needs the wandb package; install it with: "
                "pip install 'smallinit[wandb]' (or pip install wandb)"
            )
        super().__init__()
        self.project = self.target = project.strip()
        self.entity = entity
        self.run = None

    def open(self, kind: str, key: str, name: str, hparams: dict[str, Any], step: int) -> None:
        import wandb  # lazy: optional dependency

        config = {**hparams, "run_key": key, "resumed_from_step": step}
        self.run = wandb.init(
            project=self.project,
            entity=self.entity,
            name=name,
            group=key,
            job_type=kind,
            tags=[key],
            config=config,
            reinit="create_new",
        )

    def scalars(self, values: dict[str, float], step: int) -> None:
        if self.run is not None:
            self.run.log(values, step=step)

    def close(self, final: dict[str, float], step: int, ok: bool) -> None:
        if self.run is None:
            return
        try:
            if final:
                self.run.log(final, step=step)
                self.run.summary.update(final)
        finally:
            self.run.finish(exit_code=0 if ok else 1)
            self.run = None


def sinks_from_env() -> list[Callback]:
    """The sinks the environment asks for: a :class:`TensorBoard` sink in
    ``$SMALLINIT_TENSORBOARD`` and a :class:`WandB` sink for the project
    ``$SMALLINIT_WANDB``, each when its variable is set and not empty."""
    return chosen_sinks()


def chosen_sinks(tensorboard: str | Path | None = None, wandb: str | None = None) -> list[Callback]:
    """The sinks of a run: TensorBoard in ``tensorboard`` (else ``$SMALLINIT_TENSORBOARD``),
    W&B to the project ``wandb`` (else ``$SMALLINIT_WANDB``); what the CLI's
    ``--tensorboard`` and ``--wandb`` give :func:`~smallinit.llm.training.train.train`."""
    out: list[Callback] = []
    for given, env, make in (
        (tensorboard, TENSORBOARD_ENV, TensorBoard),
        (wandb, WANDB_ENV, WandB),
    ):
        if given is not None:
            out.append(make(given))
            continue
        value = os.environ.get(env, "").strip()
        if value:
            try:
                out.append(make(value))
            except ConfigError as err:
                raise ConfigError(f"{env}={value}: {err}") from None
    return out


@contextlib.contextmanager
def sink_environment(
    tensorboard: str | Path | None,
    wandb: str | None,
    names: Callable[[], dict[tuple[str, str], str]] | None = None,
) -> Iterator[list[Callback]]:
    """The sinks of a command that trains many runs, each perhaps in a worker process or a
    Ray task: ``tensorboard`` and ``wandb`` (the CLI's ``--tensorboard``, ``--wandb``) go
    into ``$SMALLINIT_TENSORBOARD`` and ``$SMALLINIT_WANDB`` while the block runs, where
    every trainer finds them (:func:`sinks_from_env`; the workers inherit them), and back
    as they were after. Checked first (:func:`chosen_sinks`: a bad folder or a missing
    package is a :class:`ConfigError` before any run starts). When some sink is on,
    ``names()`` (``(kind, key)`` → readable name, e.g. a profile's plan:
    ``quick/fig7/d128/γ1/seed3``) is written to a temporary JSON file named by
    ``$SMALLINIT_RUN_NAMES`` (:func:`given_names`), so that the runs get those names.
    Yields the sinks chosen (flags, else environment)."""
    chosen = chosen_sinks(tensorboard, wandb)
    saved = {k: os.environ.get(k) for k in (TENSORBOARD_ENV, WANDB_ENV, NAMES_ENV)}
    names_file = None
    try:
        if tensorboard is not None:
            os.environ[TENSORBOARD_ENV] = str(Path(tensorboard).absolute())
        if wandb is not None:
            os.environ[WANDB_ENV] = str(wandb)
        if chosen and names is not None:
            fd, names_file = tempfile.mkstemp(prefix="smallinit-run-names-", suffix=".json")
            os.close(fd)
            atomic_write_json(
                Path(names_file), {f"{kind}/{key}": name for (kind, key), name in names().items()}
            )
            os.environ[NAMES_ENV] = names_file
        yield chosen
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if names_file is not None:
            Path(names_file).unlink(missing_ok=True)
