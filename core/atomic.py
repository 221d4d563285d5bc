"""Files that readers never see half-written, and JSON read back with one clear error.

Every file of the run store except the append-only ``metrics.jsonl`` is written atomically:
a temporary file with a unique name in the same directory (``.<name>.<pid>.<random>.tmp``),
fsync, ``os.replace``, so a reader sees either the old or the new bytes. JSON is written
strictly (NaN and ±inf become ``null``) with sorted keys.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from smallinit.core.config import MAX_DEPTH, check_depth
from smallinit.core.errors import ConfigError, StoreError, one_line

MAX_JSON_BYTES = 256 * 1024**2  # a store's JSON file larger than this is taken as damaged
NEARLY_FULL = 16 * 1024**2  # free bytes below which a failed write is put down to a full disk


def _file_mode() -> int:
    """The mode a plain ``open()`` would give a new file (0o666 less the umask)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


_FILE_MODE = _file_mode()  # mkstemp makes 0o600 files; results should be readable like any


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers never see a partial file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent
    )
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        failure = write_failure(path, err) if isinstance(err, OSError) else None
        if failure is not None:
            raise failure from None  # name the file
        raise


def write_failure(path: str | Path, err: Exception) -> OSError | None:
    """The failed write of ``path`` as an OSError naming it, which the CLI prints on one
    line (``cannot use PATH: No space left on device (the disk is full)``). torch,
    safetensors and tokenizers report a failed write as their own errors (``PytorchStreamWriter
    failed writing file``, ``SafetensorError``); when the disk is nearly full at that moment
    (the partial file still on it) the cause is taken to be ENOSPC. None: ``err`` is an
    OSError that already names a file."""
    path = Path(path)
    if isinstance(err, OSError) and err.filename is not None:
        return None
    if isinstance(err, OSError) and err.errno is not None:
        return OSError(err.errno, err.strerror, str(path))
    try:
        full = shutil.disk_usage(path.parent).free < NEARLY_FULL
    except OSError:
        full = False
    if full:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    return OSError(
        errno.EIO, f"writing failed ({type(err).__name__}: {one_line(err)[:200]})", str(path)
    )


def temp_path(path: str | Path) -> Path:
    """A temporary name next to ``path``, unique to this process and call (pid and 64 random
    bits), for writers that need a path rather than bytes (``torch.save``); ``os.replace``
    it onto ``path`` when complete."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(8)}.tmp")


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as JSON atomically; NaN and ±inf are written as ``null`` (JSON has no
    token for them, and Python's ``NaN`` is unreadable by other tools)."""
    atomic_write_text(path, json_text(obj, indent=2) + "\n")


def json_text(obj: Any, *, indent: int | None = None) -> str:
    """Strict JSON of ``obj`` with keys sorted: every non-finite float becomes ``null``."""
    return json.dumps(finite_json(obj), indent=indent, sort_keys=True, allow_nan=False)


def finite_json(obj: Any) -> Any:
    """``obj`` as plain JSON data: NumPy arrays and scalars become lists and Python numbers,
    and every float that is NaN or ±inf becomes None, through dicts, lists and tuples."""
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite_json(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return finite_json(obj.tolist())
    if isinstance(obj, float | np.floating):
        return float(obj) if np.isfinite(obj) else None
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def atomic_save_npz(path: str | Path, arrays: dict[str, Any]) -> None:
    """``np.savez_compressed`` through a temporary file (no pickles: plain arrays only)."""
    buf = io.BytesIO()
    plain: dict[str, Any] = {k: np.asarray(v) for k, v in arrays.items()}
    np.savez_compressed(buf, **plain)
    atomic_write_bytes(path, buf.getvalue())


def read_json(path: str | Path) -> Any:
    """Read a JSON file; a damaged one raises :class:`StoreError` naming the file: not a
    regular file (a FIFO would block), over :data:`MAX_JSON_BYTES`, not JSON, or nested more
    than :data:`~smallinit.core.config.MAX_DEPTH` levels deep (the store's files nest a few;
    the parser and every recursive walk after it fail near 1000)."""
    path = Path(path)
    hint = "; delete its run directory or rerun with --force"
    try:
        if path.exists() and not path.is_file():
            raise StoreError(f"{path} is corrupt (not a regular file){hint}")
        if path.stat().st_size > MAX_JSON_BYTES:
            raise StoreError(f"{path} is corrupt (over {MAX_JSON_BYTES // 1024**2} MiB){hint}")
        return check_depth(json.loads(path.read_text(encoding="utf-8")), str(path))
    except FileNotFoundError:
        raise StoreError(f"{path} is missing") from None
    except OSError as err:  # a symlink loop, no permission, ...
        raise StoreError(f"{path} cannot be read ({err.strerror or one_line(err)})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise StoreError(f"{path} is corrupt ({one_line(err)}){hint}") from None
    except (RecursionError, MemoryError) as err:
        raise StoreError(
            f"{path} is corrupt ({type(err).__name__}: nested too deeply or too large){hint}"
        ) from None
    except ConfigError:
        raise StoreError(
            f"{path} is corrupt (nested more than {MAX_DEPTH} levels deep){hint}"
        ) from None
