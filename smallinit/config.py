"""Configs are dataclasses: loaded from TOML, overridden with ``key=value``, hashed canonically.

A config class is any ``@dataclass`` whose fields have type annotations from this set:
``int``, ``float``, ``str``, ``bool``, ``Literal[...]``, ``X | None``, ``tuple[X, ...]``,
``list[X]`` and nested config dataclasses. Values are checked against the annotation and
unknown keys are rejected with the list of allowed ones, so a typo never passes silently.
Further checks belong in the dataclass's ``__post_init__`` (raise :class:`ConfigError`).

Overrides use dotted keys for nested configs (``model.d_model=256``); their values are
read as TOML literals (``3``, ``1e-5``, ``true``, ``"text"``, ``[1, 2]``) and fall back to
plain strings, and a comma-separated string fills a tuple field (``widths=64,128,256``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import tomli_w

from smallinit.errors import ConfigError

C = TypeVar("C")

# A field added to a config class after runs of it were stored is declared with
# ``field(default=..., metadata={KEY_NEUTRAL: True})``: at its default value it is left out
# of the plain dict, hence of the canonical JSON and of every run key, so the runs made
# before the field existed keep their keys (and a stored config without it loads with the
# default). Set to anything else it is written out and the run gets a key of its own.
KEY_NEUTRAL = "key_neutral_default"


# ----------------------------------------------------------------------------- to plain data
def config_to_dict(cfg: Any) -> dict[str, Any]:
    """Plain, JSON- and TOML-ready dict of a config dataclass (tuples become lists); a
    :data:`KEY_NEUTRAL` field at its default is left out."""
    if not dataclasses.is_dataclass(cfg) or isinstance(cfg, type):
        raise TypeError(f"expected a dataclass instance, got {type(cfg).__name__}")
    return {f.name: _plain(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)
            if not (f.metadata.get(KEY_NEUTRAL) and getattr(cfg, f.name) == f.default)}


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return config_to_dict(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def canonical_json(data: Any) -> str:
    """Deterministic JSON text: sorted keys, no whitespace, floats by shortest repr.

    Non-finite floats are rejected: they have no stable meaning in a run key.
    """

    def check(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):
            raise ConfigError(f"value {x!r} is not allowed in a config; use a finite number")
        if isinstance(x, dict):
            return {k: check(v) for k, v in x.items()}
        if isinstance(x, list):
            return [check(v) for v in x]
        return x

    return json.dumps(check(_plain(data)), sort_keys=True, separators=(",", ":"))


# ----------------------------------------------------------------------------- from plain data
def config_from_dict(cls: type[C], data: Mapping[str, Any], *, where: str = "config") -> C:
    """Build ``cls`` from a mapping, checking keys and value types against the annotations."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a table of key = value pairs, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown key {where}.{unknown[0]}; allowed keys: {', '.join(sorted(fields))}"
        )
    kwargs = {
        name: _coerce(hints[name], value, f"{where}.{name}") for name, value in data.items()
    }
    try:
        return cls(**kwargs)
    except TypeError as err:  # a required field without a default is missing
        raise ConfigError(f"{where}: {err}") from None


def _coerce(tp: Any, value: Any, name: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        # Scalar members first: a scalar also fills a one-element tuple (below), which
        # must not win over an exact scalar match.
        members = sorted((a for a in args if a is not type(None)),
                         key=lambda a: typing.get_origin(a) in (tuple, list))
        for arg in members:
            try:
                return _coerce(arg, value, name)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0] if errors else f"{name}={value!r} is not allowed")
    if origin is typing.Literal:
        if value not in args:
            allowed = ", ".join(repr(a) for a in args)
            raise ConfigError(f"{name}={value!r} is not allowed; choose one of {allowed}")
        return value
    if origin in (tuple, list):
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
            value = [_literal(v) for v in value]
        elif isinstance(value, int | float | bool):
            value = [value]  # widths=64: a one-element list (the field's checks decide)
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{name}={value!r} is not allowed; it must be a list")
        item_tp = args[0] if args else Any
        items = [_coerce(item_tp, v, f"{name}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        return config_from_dict(tp, value, where=name)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{name}={value!r} is not allowed; it must be true or false")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{name}={value!r} is not allowed; it must be an integer")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{name}={value!r} is not allowed; it must be a number")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{name}={value!r} is not allowed; it must be a string")
    return value


# ----------------------------------------------------------------------------- TOML and overrides
def _literal(text: str) -> Any:
    """Read ``text`` as a TOML value; anything TOML rejects is kept as a plain string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """Turn ``["a=1", "model.d=2"]`` into ``{"a": 1, "model.d": 2}`` (dotted paths to values,
    for :func:`override`)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or "" in key.split("."):
            raise ConfigError(f"override {item!r} is not allowed; write key=value")
        out[key] = _literal(raw.strip())
    return out


def merge_tables(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` laid over it: tables merge key by key, any other value (a
    list included) replaces the base's. Neither argument is changed."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_tables(merged[key], value)
        else:
            merged[key] = value
    return merged


def _apply(data: dict[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with each dotted path of ``changes`` set to its value (a mapping value is
    merged into the table at its path), in order; a path through a value that is not a table
    is a ConfigError."""
    out = merge_tables({}, data)
    for path, value in changes.items():
        *parents, leaf = str(path).split(".")
        node = out
        for i, part in enumerate(parents):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                where = ".".join(parents[:i + 1])
                raise ConfigError(f"override {path}={value!r} is not allowed: {where} is a "
                                  "value, not a table of keys")
            else:
                child = node[part] = dict(child)
            node = child
        if isinstance(value, Mapping) and isinstance(node.get(leaf), dict):
            node[leaf] = merge_tables(node[leaf], value)
        else:
            node[leaf] = value
    return out


def override(cfg: C, changes: Mapping[str, Any], *, where: str = "config") -> C:
    """``cfg`` with the values at dotted paths replaced: the one way a config is changed
    (command-line ``key=value``, profiles, experiments)::

        override(cfg, {"model.d_model": 64, "seed": 1})
        override(cfg, {"train": {"steps": 100}})   # a table merges into the section

    A config dataclass comes back checked like a loaded config; a plain table (a dict, e.g.
    a profile's table before it is split into configs) comes back as a new dict."""
    if isinstance(cfg, Mapping):
        return _apply(dict(cfg), changes)
    return config_from_dict(type(cfg), _apply(config_to_dict(cfg), changes), where=where)


def read_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file, with a one-line error naming the file when it is missing or bad."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config file {path} is not valid TOML: {err}") from None


def load_config(
    cls: type[C],
    path: str | Path | None = None,
    overrides: Iterable[str] = (),
    base: C | None = None,
) -> C:
    """Config from (in increasing priority) ``base`` or defaults, a TOML file, and
    ``key=value`` overrides (:func:`parse_overrides`, applied by :func:`override`).

    Without ``base`` the defaults are those of ``cls()`` itself, so a nested section that is
    only partly overridden keeps the parent's defaults for the rest (a parent may give its
    nested config other defaults than the nested class has)."""
    if base is None:
        try:
            base = cls()
        except TypeError:  # a field without a default: it must come from the file/overrides
            base = None
    data: dict[str, Any] = config_to_dict(base) if base is not None else {}
    if path is not None:
        data = merge_tables(data, read_toml(path))
    return config_from_dict(cls, _apply(data, parse_overrides(overrides)))


def dump_toml(cfg: Any) -> str:
    """TOML text of a config (fields that are ``None`` are left out: TOML has no null)."""

    def drop_none(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: drop_none(v) for k, v in x.items() if v is not None}
        return x

    return tomli_w.dumps(drop_none(config_to_dict(cfg)))
