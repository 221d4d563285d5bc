"""A finished run's manifest: the size and SHA-256 of every file it keeps.

A run proves what it holds in two steps. Its *identity*: the ``config.json`` in its folder
hashes to the folder's name, the run key (:func:`smallinit.core.runs.config_key`), so an edited
config or a renamed folder is seen. Its *results*: when a run finishes, the store records in
``status.json`` a manifest of every regular file below the folder (``config.json``,
``metrics.jsonl``, ``arrays.npz``, the weights, ...) with its size in bytes and the SHA-256
of its contents; ``status.json`` itself, which holds the manifest, and names starting with a
dot (temporary files of a writer) are left out. A reader compares a file with its entry
before using it, so a truncated or altered file is named instead of read.

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


def kept_files(folder: Path) -> Iterator[tuple[str, Path]]:
    """(name relative to ``folder``, path) of every file a manifest lists, sorted: regular
    files below ``folder``, without ``status.json`` and without names starting with a dot
    (nor anything inside a folder whose name does). Symbolic links are not followed."""
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        base = Path(root)
        for name in sorted(files):
            path = base / name
            rel = path.relative_to(folder).as_posix()
            if name.startswith(".") or rel in LEFT_OUT:
                continue
            if stat.S_ISREG(os.lstat(path).st_mode):
                yield rel, path


def build_manifest(folder: Path) -> dict[str, dict[str, Any]]:
    """``{name: {"bytes": size, "sha256": hex}}`` of every file :func:`kept_files` lists."""
    manifest = {}
    for rel, path in kept_files(folder):
        st = os.lstat(path)
        manifest[rel] = {"bytes": st.st_size, "sha256": sha256_of(path, st)}
    return manifest


def entry_problem(folder: Path, name: str, entry: Any, *, hashes: bool = True) -> str | None:
    """Why the file ``name`` below ``folder`` does not match its manifest ``entry`` (size,
    then, with ``hashes``, SHA-256), or None when it matches."""
    if not (isinstance(entry, dict) and isinstance(entry.get("bytes"), int)
            and isinstance(entry.get("sha256"), str)) or not _inside(name):
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


def manifest_problem(folder: Path, manifest: Any, *, hashes: bool = True) -> str | None:
    """The first file below ``folder`` that does not match ``manifest`` (every entry, sizes
    first so a truncated file is found without hashing), or None when all match."""
    if not isinstance(manifest, dict):
        return f"the manifest in {folder / 'status.json'} is damaged"
    for name, entry in manifest.items():
        problem = entry_problem(folder, name, entry, hashes=False)
        if problem:
            return problem
    if hashes:
        for name, entry in manifest.items():
            problem = entry_problem(folder, name, entry, hashes=True)
            if problem:
                return problem
    return None
