"""Profiles: every experiment's parameters at one scale, as TOML data in this folder.

A profile is one file ``<name>.toml`` here (``quick``: CPU minutes; ``full``: GPU scale). A
profile may start from another, ``extends = "quick"``, and state only what differs: its
tables are laid over the base's key by key. Each top-level table belongs to one
experiment of :mod:`smallinit.study.experiments` (``toy-scan``, ``compare``, ``anchor``,
``llm-sweeps``, ...) or to a packaged run config (``llm-train``: what
``smallinit llm train --config quick`` trains). The code that builds an experiment's runs
reads its table with :func:`section` and nothing else decides its sizes.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

from smallinit.core.config import merge_tables, read_toml
from smallinit.core.errors import ConfigError

FOLDER = Path(__file__).resolve().parent


def names() -> tuple[str, ...]:
    """The packaged profiles, ``quick`` first, then ``full``, then any others by name."""
    found = sorted(p.stem for p in FOLDER.glob("*.toml"))
    order = {"quick": 0, "full": 1}
    return tuple(sorted(found, key=lambda n: (order.get(n, 2), n)))


def path(profile: str) -> Path:
    """The TOML file of ``profile``; a one-line error names the known ones."""
    file = FOLDER / f"{profile}.toml"
    if not isinstance(profile, str) or "/" in profile or not file.is_file():
        raise ConfigError(f"profile {profile!r} does not exist; use one of "
                          f"{', '.join(names())}")
    return file


@cache
def _load(profile: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """The profile's tables, laid over those of the profile it ``extends`` (tables merge
    key by key; a value, list included, replaces the base's)."""
    if profile in seen:
        raise ConfigError(f"profile {profile!r} extends itself (through "
                          f"{' -> '.join((*seen, profile))})")
    data = read_toml(path(profile))
    base = data.pop("extends", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise ConfigError(f"{path(profile)}: extends = {base!r} must name a profile")
    return merge_tables(_load(base, (*seen, profile)), data)


def load(profile: str) -> dict[str, Any]:
    """The whole profile as nested dicts (a fresh copy), its base profile's tables included."""
    return copy.deepcopy(_load(profile))


def section(profile: str, name: str) -> dict[str, Any]:
    """Table ``name`` of ``profile`` (a fresh copy); a missing table is a ConfigError."""
    data = _load(profile)
    if name not in data:
        raise ConfigError(f"profile {profile!r} has no [{name}] table "
                          f"({path(profile)}); it has {', '.join(sorted(data))}")
    return copy.deepcopy(data[name])
