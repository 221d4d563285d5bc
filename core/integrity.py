"""A finished run's manifest: the size and SHA-256 of every file it keeps.

A run proves what it holds in two steps. Its *identity*: the ``config.json`` in its folder
hashes to the folder's name, the run key (:func:`smallinit.core.runs.config_key`), so an edited
config or a renamed folder is seen. Its *results*: when a run finishes, the store records in
``status.json`` a manifest of every regular file below the folder (``config.json``,
``metrics.jsonl``, ``arrays.npz``, the weights, ...) with its size in bytes and the SHA-256
of its contents; ``status.json`` itself, which holds the manifest, and names starting with a
dot (temporary files of a writer) are left out. A reader compares a file with its entry
before using it, so a truncated or altered file is named instead of read. The summary a done
run finished with lives in ``status.json`` itself, so the status also holds the SHA-256 of
the summary's JSON text (:func:`summary_digest`), compared whenever the summary is read.

The same entries (``{"bytes", "sha256"}``) prove the other files a run reads: a cached
corpus (its ``meta.json`` lists its files, :mod:`smallinit.llm.data.corpus`) and each
checkpoint (a ``step-*.pt.json`` beside it, :mod:`smallinit.llm.training.checkpoint`).
:func:`first_link` finds a symbolic link in a folder, which a writer of the store refuses to
follow.

Sizes are a stat call; hashes read the whole file (about 1 GB/s). Each process remembers the
files it has hashed, keyed by device, inode, size and modification and change times
(``st_ctime`` moves on any write and cannot be set back by a program), so a file read twice
in one process is hashed once.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from smallinit.core.atomic import json_text

CHUNK = 1 << 20  # bytes read at a time while hashing
LEFT_OUT = frozenset({"status.json"})  # holds the manifest; cannot list itself

_HASHED: dict[tuple[int, int, int, int, int], str] = {}  # file identity -> its sha256


def _identity(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def sha256_of(path: Path, st: os.stat_result | None = None) -> str:
    """The SHA-256 (hex) of the regular file ``path`` (remembered for this process)."""
    st = st or os.stat(path)
    ident = _identity(st)
    digest = _HASHED.get(ident)
    if digest is None:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            while chunk := fh.read(CHUNK):
                h.update(chunk)
        digest = _HASHED[ident] = h.hexdigest()
    return digest


def file_entry(path: Path) -> dict[str, Any]:
    """``{"bytes": size, "sha256": hex}`` of the regular file ``path`` (a manifest entry)."""
    st = os.lstat(path)
    return {"bytes": st.st_size, "sha256": sha256_of(path, st)}


def summary_digest(summary: Any) -> str:
    """The SHA-256 (hex) of ``summary`` as ``status.json`` stores it (strict JSON, keys
    sorted: :func:`smallinit.core.atomic.json_text`), so the summary read back from the file
    gives the digest it was written with."""
    return hashlib.sha256(json_text(summary).encode("utf-8")).hexdigest()


def first_link(folder: Path) -> Path | None:
    """The first symbolic link at or below ``folder`` (walked without following links), or
    None when there is none (or ``folder`` does not exist)."""
    if folder.is_symlink():
        return folder
    for root, dirs, files in os.walk(folder):
        for name in sorted(dirs) + sorted(files):
            path = Path(root) / name
            if path.is_symlink():
                return path
    return None


def kept_files(folder: Path, left_out: frozenset[str] = LEFT_OUT) -> Iterator[tuple[str, Path]]:
    """(name relative to ``folder``, path) of every file a manifest lists, sorted: regular
    files below ``folder``, without ``left_out`` (the file that holds the manifest) and
    without names starting with a dot (nor anything inside a folder whose name does).
    Symbolic links are not followed."""
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        base = Path(root)
        for name in sorted(files):
            path = base / name
            rel = path.relative_to(folder).as_posix()
            if name.startswith(".") or rel in left_out:
                continue
            if stat.S_ISREG(os.lstat(path).st_mode):
                yield rel, path


def build_manifest(folder: Path, left_out: frozenset[str] = LEFT_OUT) -> dict[str, dict[str, Any]]:
    """``{name: {"bytes": size, "sha256": hex}}`` of every file :func:`kept_files` lists."""
    return {rel: file_entry(path) for rel, path in kept_files(folder, left_out)}


def entry_problem(folder: Path, name: str, entry: Any, *, hashes: bool = True) -> str | None:
    """Why the file ``name`` below ``folder`` does not match its manifest ``entry`` (size,
    then, with ``hashes``, SHA-256), or None when it matches."""
    if not (
        isinstance(entry, dict)
        and isinstance(entry.get("bytes"), int)
        and isinstance(entry.get("sha256"), str)
    ) or not _inside(name):
        return f"the manifest entry {name!r} is damaged"
    path = folder / name
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return f"{path} is missing"
    except OSError as err:
        return f"{path} cannot be read ({err.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    if st.st_size != entry["bytes"]:
        return f"{path} is {st.st_size:,} bytes, its manifest says {entry['bytes']:,}"
    if hashes:
        try:
            digest = sha256_of(path, st)
        except OSError as err:
            return f"{path} cannot be read ({err.strerror})"
        if digest != entry["sha256"]:
            return f"{path} does not match its manifest (its SHA-256 differs: altered contents)"
    return None


def _inside(name: str) -> bool:
    """Whether ``name`` is a plain relative path below the run folder (no ``..``)."""
    parts = Path(name).parts
    return bool(parts) and not Path(name).is_absolute() and ".." not in parts


def first_mismatch(folder: Path, manifest: Any, *, hashes: bool = True) -> tuple[str, str] | None:
    """(name, why) of the first file below ``folder`` that does not match ``manifest``
    (every entry, sizes first so a truncated file is found without hashing; name ``""``
    for a damaged manifest), or None when all match."""
    if not isinstance(manifest, dict):
        return "", f"the manifest of {folder} is damaged"
    for with_hashes in (False, True) if hashes else (False,):
        for name, entry in manifest.items():
            problem = entry_problem(folder, name, entry, hashes=with_hashes)
            if problem:
                return name, problem
    return None


def manifest_problem(folder: Path, manifest: Any, *, hashes: bool = True) -> str | None:
    """Why the first file below ``folder`` does not match ``manifest``
    (:func:`first_mismatch`), or None when all match."""
    found = first_mismatch(folder, manifest, hashes=hashes)
    return found[1] if found else None
