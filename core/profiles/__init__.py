"""Profiles: every experiment's parameters at one scale, as TOML data in this folder.

A profile is one file ``<name>.toml`` here (``quick``: CPU minutes; ``full``: GPU scale). A
profile may start from another, ``extends = "quick"``, and state only what differs: its
tables are laid over the base's key by key. Each top-level table belongs to one
experiment of :mod:`smallinit.study.experiments` (``toy-scan``, ``compare``, ``anchor``,
``llm-sweeps``, ...) or to a packaged run config (``llm-train``: what
``smallinit llm train --profile quick`` trains). The code that builds an experiment's runs
reads its table with :func:`section` and nothing else decides its sizes.

A profile is an overlay: the defaults live in code (the config dataclasses); a table states
only the values it sets, and ``--config FILE`` and ``key=value`` overrides are laid over it
in turn (:mod:`smallinit.core.config`, the one order of precedence).

A *derived* profile is a packaged one with a user's overlay on top (:func:`derive`: a TOML
file of the same tables, then dotted ``key=value`` overrides), held in memory for the
process under the name ``<base>+<8 hex digits>``; :func:`section` and :func:`load` read
it like any other. :func:`names` lists the packaged profiles only; :func:`path` of a
derived name is the file of its base.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from smallinit.core.config import canonical_json, merge_tables, override, read_toml
from smallinit.core.errors import ConfigError

FOLDER = Path(__file__).resolve().parent

#: The derived profiles of this process: name -> (packaged base, overlay tables).
_DERIVED: dict[str, tuple[str, dict[str, Any]]] = {}


def names() -> tuple[str, ...]:
    """The packaged profiles, ``quick`` first, then ``full``, then any others by name."""
    found = sorted(p.stem for p in FOLDER.glob("*.toml"))
    order = {"quick": 0, "full": 1}
    return tuple(sorted(found, key=lambda n: (order.get(n, 2), n)))


def path(profile: str) -> Path:
    """The TOML file of ``profile`` (of a derived profile: its base's); a one-line error
    names the known ones."""
    if isinstance(profile, str) and profile in _DERIVED:
        return path(_DERIVED[profile][0])
    file = FOLDER / f"{profile}.toml"
    if not isinstance(profile, str) or "/" in profile or not file.is_file():
        raise ConfigError(f"profile {profile!r} does not exist; use one of {', '.join(names())}")
    return file


@cache
def _load(profile: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """The profile's tables, laid over those of the profile it ``extends`` (tables merge
    key by key; a value, list included, replaces the base's)."""
    if profile in seen:
        raise ConfigError(
            f"profile {profile!r} extends itself (through {' -> '.join((*seen, profile))})"
        )
    if profile in _DERIVED:
        base, tables = _DERIVED[profile]
        return merge_tables(_load(base), tables)
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
        raise ConfigError(
            f"profile {profile!r} has no [{name}] table "
            f"({path(profile)}); it has {', '.join(sorted(data))}"
        )
    return copy.deepcopy(data[name])


def lineage(profile: str) -> tuple[str, ...]:
    """``profile``, then the profile it extends, and so on (a derived profile: itself, then
    its packaged base's lineage)."""
    base: object  # a name, then whatever a file's ``extends`` holds
    base, _ = overlay(profile)
    chain = (profile,) if base != profile else ()
    seen: list[str] = []
    while isinstance(base, str) and base not in seen:
        seen.append(base)
        base = read_toml(path(base)).get("extends")
    return (*chain, *seen)


def stated(profile: str, name: str) -> dict[str, Any] | None:
    """Table ``name`` as ``profile`` states it itself, not taken from the profile it
    extends (a derived profile: its base's, with its overlay's laid over it); None where it
    states none. For tables that describe one profile only, such as its time budget."""
    base, tables = overlay(profile)
    own = read_toml(path(base)).get(name)
    extra = tables.get(name)
    if own is None and extra is None:
        return None
    return merge_tables(own or {}, extra or {})


# ----------------------------------------------------------------------------- derived profiles
def derive(base: str, file: str | Path | None = None, overrides: Mapping[str, Any] = {}) -> str:  # noqa: B006 (never changed)
    """The name of packaged profile ``base`` with an overlay laid over it: the tables of the
    TOML ``file`` (its ``extends``, if it has one, must be ``base``), then ``overrides``,
    dotted paths into the tables (``{"llm-sweeps.plan.seeds": [0, 1]}``, as
    :func:`smallinit.core.config.parse_overrides` gives them; applied by
    :func:`~smallinit.core.config.override`).

    The name is ``<base>+<h>``, ``h`` the first 8 hex digits of the SHA-256 of the
    overlay's canonical JSON, so the same overlay gives the same name in any order and in
    any process; the profile is registered in memory under it. An overlay that changes
    nothing (none, or only values equal to the base's) gives ``base`` itself.

    Every key of the overlay must be one a packaged profile states at that place (the
    tables of ``base``, or of another packaged profile: a key a reader accepts); else a
    one-line ConfigError names the key and the keys allowed there, as a config does. The
    values are checked where an experiment reads them."""
    if base not in names():
        raise ConfigError(f"profile {base!r} does not exist; use one of {', '.join(names())}")
    if not isinstance(overrides, Mapping):
        raise TypeError(
            f"overrides={overrides!r} must map dotted keys to values, e.g. "
            "smallinit.core.config.parse_overrides(['anchor.train.steps=200'])"
        )
    tables = _file_tables(base, file) if file is not None else {}
    tables = override(tables, dict(overrides))
    _check_keys(tables, _known_keys(), base)
    if merge_tables(_load(base), tables) == _load(base):
        return base
    digest = hashlib.sha256(canonical_json(tables).encode()).hexdigest()[:8]
    name = f"{base}+{digest}"
    if _DERIVED.setdefault(name, (base, tables)) != (base, tables):
        raise ConfigError(f"two overlays of profile {base!r} hash to {name}; change one")
    return name


def overlay(profile: str) -> tuple[str, dict[str, Any]]:
    """``(base, tables)`` of a derived profile (:func:`derive` with ``overrides=tables``
    rebuilds it); ``(profile, {})`` of a packaged one."""
    if profile in _DERIVED:
        base, tables = _DERIVED[profile]
        return base, copy.deepcopy(tables)
    path(profile)
    return profile, {}


def exists(profile: str) -> bool:
    """Whether ``profile`` names a packaged profile or a derived one of this process."""
    return isinstance(profile, str) and (profile in names() or profile in _DERIVED)


def derived() -> tuple[str, ...]:
    """The derived profiles registered in this process, in the order they were made."""
    return tuple(_DERIVED)


def _file_tables(base: str, file: str | Path) -> dict[str, Any]:
    data = read_toml(file)
    extends = data.pop("extends", base)
    if extends != base:
        raise ConfigError(
            f"config file {file}: extends = {extends!r}, but it is laid over "
            f"profile {base!r}; write extends = {base!r} or leave it out"
        )
    return data


@cache
def _known_keys() -> dict[str, Any]:
    """Every packaged profile's tables laid over each other: the keys a profile may state."""
    known: dict[str, Any] = {}
    for name in names():
        known = merge_tables(known, _load(name))
    return known


def _check_keys(tables: Mapping[str, Any], known: Mapping[str, Any], where: str) -> None:
    for key, value in tables.items():
        if key not in known:
            raise ConfigError(
                f"unknown key {where}.{key}; allowed keys: {', '.join(sorted(known))}"
            )
        here = f"{where}.{key}"
        if isinstance(known[key], Mapping):
            if not isinstance(value, Mapping):
                raise ConfigError(
                    f"{here}={value!r} is not allowed: {here} is a table; set "
                    f"its keys ({here}.KEY=value): {', '.join(sorted(known[key]))}"
                )
            _check_keys(value, known[key], here)
        elif isinstance(value, Mapping):
            raise ConfigError(
                f"{here} is a value, not a table of keys; give it one value ({here}=value)"
            )
