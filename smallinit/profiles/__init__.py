"""Profiles: every experiment's parameters at one scale, as TOML data in this folder.

A profile is one file ``<name>.toml`` here (``quick``: CPU minutes; ``full``: GPU scale; a
new scale is a new file with the same tables). Each top-level table belongs to one
experiment of :mod:`smallinit.experiments` (``toy-scan``, ``compare``, ``anchor``,
``llm-sweeps``, ...) or to a packaged run config (``llm-train``: what
``smallinit llm train --config quick`` trains). The code that builds an experiment's runs
reads its table with :func:`section` and nothing else decides its sizes.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

from smallinit.config import config_from_dict, config_to_dict, read_toml
from smallinit.errors import ConfigError

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
def _load(profile: str) -> dict[str, Any]:
    return read_toml(path(profile))


def load(profile: str) -> dict[str, Any]:
    """The whole profile as nested dicts (a fresh copy)."""
    return copy.deepcopy(_load(profile))


def section(profile: str, name: str) -> dict[str, Any]:
    """Table ``name`` of ``profile`` (a fresh copy); a missing table is a ConfigError."""
    data = _load(profile)
    if name not in data:
        raise ConfigError(f"profile {profile!r} has no [{name}] table "
                          f"({path(profile)}); it has {', '.join(sorted(data))}")
    return copy.deepcopy(data[name])


def merged(base: Any, table: dict[str, Any], where: str) -> Any:
    """``base`` (a config dataclass) with the table's values laid over it, checked."""
    return config_from_dict(type(base), _merge(config_to_dict(base), table), where=where)


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out
