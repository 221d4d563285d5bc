"""Checkpoints and final weights on disk: durable writes, safe reads, damaged files skipped.

A checkpoint ``checkpoints/step-<8 digits>.pt`` holds the model and optimizer state dicts,
the 1-based step it was taken after and the torch RNG states (CPU, and CUDA when present),
all tensors or plain data, so it loads with ``torch.load(..., weights_only=True)``: nothing
on disk is unpickled as code. Beside it, ``step-<8 digits>.pt.json`` records its size and
SHA-256 (:func:`smallinit.core.integrity.file_entry`), written once the checkpoint is in
place. A checkpoint is *damaged* when it has no such record, differs from it (truncated,
edited, a tensor rescaled or a NaN planted and saved again), does not load weights-only (a
planted pickle) or holds another step than its name: :func:`latest_loadable` logs a warning
naming it, renames it and its record to ``<name>.damaged`` (out of the ``step-*.pt``
pattern, kept for inspection) and falls back to the next older checkpoint, or to a fresh
start if none is left; a resume never reads a damaged checkpoint.

A finished run's final weights are ``model.pt`` (a state dict, loaded the same way) and
``model.safetensors`` (:data:`WEIGHTS`; tensors only by construction, read first).

Every file is written to a temporary name unique to this writer (pid and a random suffix,
so two writers never share one), fsynced, renamed over the target, and its directory
fsynced, so a crash at any moment leaves either the old file or the complete new one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from smallinit.core import integrity
from smallinit.core.atomic import atomic_write_json, read_json, temp_path, write_failure
from smallinit.core.errors import StoreError, one_line
from smallinit.core.memory import human

log = logging.getLogger(__name__)
KEEP_CHECKPOINTS = 2  # the newest ones; older checkpoints are deleted after each save
PATTERN = "step-*.pt"
WEIGHTS = "model.safetensors"  # a finished run's final weights (also model.pt; older runs
# have only that)


def _atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Run ``write(tmp)`` on an exclusive temporary file beside ``path`` (``.<name>.<pid>.
    <random>.tmp``, created with O_EXCL so two writers never share one, the mode a plain
    ``open`` would give), fsync it, rename it over ``path`` and fsync the folder: no reader
    (or crash) sees a partial file. The temporary file is removed on any failure."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        failure = write_failure(path, err) if isinstance(err, Exception) else None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if failure is not None:
            raise failure from None
        raise
    _fsync_dir(path.parent)
    return path


def atomic_torch_save(obj: Any, path: str | Path) -> Path:
    """``torch.save(obj)`` to ``path`` atomically (:func:`_atomic_write`)."""
    return _atomic_write(path, lambda tmp: torch.save(obj, tmp))


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def safe_load(path: str | Path) -> Any:
    """``torch.load`` of tensors and plain data only, onto the CPU."""
    return torch.load(path, map_location="cpu", weights_only=True)


def atomic_save_safetensors(state: dict[str, torch.Tensor], path: str | Path) -> Path:
    """Write a dict of tensors as a ``.safetensors`` file (a JSON header and raw bytes: no
    code, readable by any safetensors reader), atomically as :func:`atomic_torch_save`.
    A tensor sharing storage with an earlier one (a tied head) is stored as its own copy,
    so every name of the state dict loads back."""
    tensors: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, value in state.items():
        value = value.detach().to("cpu").contiguous()
        if value.data_ptr() in seen:
            value = value.clone()
        seen.add(value.data_ptr())
        tensors[name] = value
    return _atomic_write(path, lambda tmp: save_file(tensors, str(tmp), metadata={"format": "pt"}))


def load_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a ``.safetensors`` file, on the CPU (no unpickling)."""
    return load_file(str(path), device="cpu")


def disk_bytes(n_params: int, checkpoint_every: int) -> int:
    """The most bytes a training run holds on disk at once: the final weights twice
    (``model.pt`` and ``model.safetensors``, fp32) and, when it checkpoints, the
    :data:`KEEP_CHECKPOINTS` newest checkpoints plus the one being written (weights and
    AdamW's two moments, fp32 each)."""
    final = 2 * 4 * n_params
    kept = (KEEP_CHECKPOINTS + 1) * 3 * 4 * n_params if checkpoint_every else 0
    return final + kept


def check_disk(folder: Path, need: int, what: str) -> None:
    """Refuse (:class:`StoreError`) when ``folder``'s file system has less than ``need``
    bytes free, before any work is done; ``what`` names the files."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return
    if free < need:
        raise StoreError(
            f"{probe} has {human(free)} free; the run to be computed there "
            f"needs about {human(need)} ({what}); free some space or give another "
            "--runs-dir"
        )


def checkpoints(run_dir: str | Path) -> list[Path]:
    """The run's checkpoints, oldest first (the zero-padded step sorts by name)."""
    return sorted((Path(run_dir) / "checkpoints").glob(PATTERN))


def checkpoint_step(path: Path) -> int:
    return int(path.stem.split("-")[1])


def record_of(path: Path) -> Path:
    """The file recording checkpoint ``path``'s size and SHA-256 (``<name>.json``)."""
    return path.with_name(path.name + ".json")


def write_checkpoint(state: dict, path: Path) -> Path:
    """``state`` saved atomically to ``path``, then its size and SHA-256 beside it."""
    atomic_torch_save(state, path)
    atomic_write_json(record_of(path), integrity.file_entry(path))
    return path


def remove_checkpoint(path: Path) -> None:
    """Delete checkpoint ``path`` and its record."""
    for p in (path, record_of(path)):
        p.unlink(missing_ok=True)


def save_checkpoint(run, step: int, model, optimizer) -> Path:
    """Checkpoint after ``step``, then keep only the newest :data:`KEEP_CHECKPOINTS`."""
    state = {
        "step": step,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }
    path = write_checkpoint(state, run.checkpoint_dir / f"step-{step:08d}.pt")
    for old in checkpoints(run.path)[:-KEEP_CHECKPOINTS]:
        remove_checkpoint(old)
    return path


def load_checkpoint(path: Path) -> dict:
    """The state of checkpoint ``path``, loaded only when the file matches its record (size
    and SHA-256) and then weights-only; a ValueError says what is wrong."""
    try:
        entry = read_json(record_of(path))
    except StoreError as err:
        raise ValueError(f"its record of size and SHA-256 is unusable ({one_line(err)})") from None
    problem = integrity.entry_problem(path.parent, path.name, entry)
    if problem:
        raise ValueError(problem)
    state = safe_load(path)
    step = int(state["step"])
    if step != checkpoint_step(path):
        raise ValueError(f"it holds step {step}")
    return state


def latest_loadable(run_dir: str | Path, *, set_aside: bool = True) -> tuple[int, dict | None]:
    """(step, state) of the newest intact checkpoint (:func:`load_checkpoint`); (0, None)
    if none is.

    Damaged files met on the way are warned about and, with ``set_aside``, renamed with
    their records to ``<name>.damaged`` so that the next resume does not meet them again."""
    for path in reversed(checkpoints(run_dir)):
        try:
            state = load_checkpoint(path)
        except Exception as err:  # no record, altered, not weights-only, or inconsistent
            log.warning(
                "checkpoint %s is damaged or unsafe (%s); %sfalling back to the one before it",
                path,
                str(err).splitlines()[0] if str(err) else type(err).__name__,
                "set aside as <name>.damaged, " if set_aside else "",
            )
            if set_aside:
                for p in (path, record_of(path)):
                    with contextlib.suppress(OSError):
                        os.replace(p, p.with_name(p.name + ".damaged"))
            continue
        return int(state["step"]), state
    return 0, None


def restore(state: dict, model, optimizer) -> int:
    """Load a checkpoint's state into ``model`` and ``optimizer``, restore the RNG states;
    returns its step."""
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    if state.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return int(state["step"])
