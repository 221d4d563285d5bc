"""Configs are dataclasses: loaded from TOML, overridden with ``key=value``, hashed canonically.

A config class is any ``@dataclass`` whose fields have type annotations from this set:
``int``, ``float``, ``str``, ``bool``, ``Literal[...]``, ``X | None``, ``tuple[X, ...]``,
``list[X]`` and nested config dataclasses. Values are checked against the annotation and
unknown keys are rejected with the list of allowed ones, so a typo never passes silently.
Further checks belong in the dataclass's ``__post_init__`` (raise :class:`ConfigError`).

One order of precedence, lowest first, for every command and function that builds a run's
config: the defaults in code (the dataclass's field defaults) < a profile's table (an
overlay, :mod:`smallinit.core.profiles`) < a ``--config FILE`` (a TOML overlay) <
``key=value`` overrides. :func:`load_config` applies the last three in that order over a
``base`` (the defaults, or the defaults with the profile's table laid over them); the
CLI states it once as ``smallinit.cli.util.PRECEDENCE``.

Overrides use dotted keys for nested configs (``model.d_model=256``); their values are
read as TOML literals (``3``, ``1e-5``, ``true``, ``"text"``, ``[1, 2]``) and fall back to
plain strings, and a comma-separated string fills a tuple field (``widths=64,128,256``).
A config built directly in Python is held to the same rules when its ``__post_init__``
calls :func:`check_fields` (a misspelled ``Literal`` value is refused with the allowed
ones; ``widths="64,128"`` is read as the tuple ``(64, 128)``, as on the command line).

User-given files are read through :func:`open_user_file` / :func:`read_user_file`: only
regular files (a FIFO would block, ``/dev/zero`` never ends), at most a stated size, and
parsed data nested at most :data:`MAX_DEPTH` levels deep (:func:`check_depth`; the
parsers themselves recurse and would otherwise fail with ``RecursionError``).
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import math
import numbers
import os
import stat
import tomllib
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

from smallinit.core.errors import ConfigError, one_line
from smallinit.core.memory import human

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

C = TypeVar("C", bound="DataclassInstance")  # a config class

# A field added to a config class after runs of it were stored is declared with
# ``field(default=..., metadata={KEY_NEUTRAL: True})``: at its default value it is left out
# of the plain dict, hence of the canonical JSON and of every run key, so the runs made
# before the field existed keep their keys (and a stored config without it loads with the
# default). Set to anything else it is written out and the run gets a key of its own.
KEY_NEUTRAL = "key_neutral_default"


#: Size of a config file (TOML) read at most: a config is a few kilobytes.
CONFIG_BYTES = 1024**2
#: Nesting depth (tables, arrays, objects) of a config or a JSON file read at most. A config
#: is three or four levels deep; the parsers (and every recursive walk after them) fail
#: with RecursionError near 1000 levels, so the bound is checked before anything walks it.
MAX_DEPTH = 64


# ----------------------------------------------------------------------------- user-given files
def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words (``"a FIFO (named pipe)"``, ...)."""
    for test, kind in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def _checked(path: Path, info: os.stat_result, what: str, limit: int | None) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{what} {path} is {file_kind(info.st_mode)}; give a regular file")
    if limit is not None and info.st_size > limit:
        raise ConfigError(
            f"{what} {path} is {human(info.st_size)}; at most {human(limit)} is allowed"
        )


def _os_error(path: Path, what: str, err: OSError) -> ConfigError:
    if isinstance(err, FileNotFoundError):
        return ConfigError(f"{what} {path} does not exist")
    reason = err.strerror or one_line(err)  # a socket (ENXIO), a symlink loop (ELOOP), ...
    return ConfigError(f"{what} {path} cannot be read ({reason}); give a regular file")


def check_user_file(path: str | Path, *, what: str, limit: int | None = None) -> int:
    """The size of ``path`` when it is a regular file of at most ``limit`` bytes (None: any
    size), found without opening it; else a :class:`ConfigError` naming ``what``, the path
    and what is allowed."""
    path = Path(path)
    if not str(path).strip():
        raise ConfigError(f"{what} path is empty; give a file")
    try:
        info = path.stat()
    except OSError as err:
        raise _os_error(path, what, err) from None
    _checked(path, info, what, limit)
    return info.st_size


def open_user_file(path: str | Path, *, what: str, limit: int | None = None) -> io.BufferedReader:
    """``path`` opened for reading in binary, when it is a regular file of at most ``limit``
    bytes (None: any size); else a :class:`ConfigError` naming ``what``, the path and what
    is allowed.

    The file is opened without blocking (a FIFO would wait for a writer) and checked on the
    open descriptor, so a special file (``/dev/zero``, a FIFO, a socket, a folder) is refused
    before a byte is read. A reader should still read at most ``limit + 1`` bytes: some
    regular files (under ``/proc``) report size 0."""
    path = Path(path)
    if not str(path).strip():
        raise ConfigError(f"{what} path is empty; give a file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as err:
        raise _os_error(path, what, err) from None
    try:
        _checked(path, os.fstat(fd), what, limit)
    except ConfigError:
        os.close(fd)
        raise
    os.set_blocking(fd, True)
    return open(fd, "rb")


def read_user_file(path: str | Path, *, what: str, limit: int | None = None) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (:func:`open_user_file`)."""
    with open_user_file(path, what=what, limit=limit) as fh:
        data = fh.read() if limit is None else fh.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise ConfigError(f"{what} {path} holds more than {human(limit)}; at most that is allowed")
    return data


def check_depth(data: Any, what: str, limit: int = MAX_DEPTH) -> Any:
    """``data`` (parsed JSON or TOML) when its lists and dicts nest at most ``limit`` levels
    deep, else a :class:`ConfigError` naming ``what``. Walks level by level, not
    recursively."""
    level, depth = [data], 0  # the values ``depth`` containers down
    while level:
        containers = [x for x in level if isinstance(x, dict | list | tuple)]
        if containers and depth >= limit:
            raise ConfigError(
                f"{what}: tables or arrays nest more than {limit} levels deep; "
                f"at most {limit} are allowed"
            )
        level = [v for x in containers for v in (x.values() if isinstance(x, dict) else x)]
        depth += 1
    return data


def parse_json(text: str | bytes, what: str) -> Any:
    """``json.loads`` with a :class:`ConfigError` naming ``what`` for text that is not JSON
    or nests deeper than :data:`MAX_DEPTH` levels."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise ConfigError(
            f"{what}: arrays or objects nest too deeply to be read; at most "
            f"{MAX_DEPTH} levels are allowed"
        ) from None
    except json.JSONDecodeError as err:
        raise ConfigError(
            f"{what}: not valid JSON ({err.msg}, line {err.lineno} column {err.colno})"
        ) from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{what}: not UTF-8 text (byte {err.start})") from None
    return check_depth(data, what)


# ----------------------------------------------------------------------------- to plain data
def config_to_dict(cfg: Any) -> dict[str, Any]:
    """Plain, JSON- and TOML-ready dict of a config dataclass (tuples become lists); a
    :data:`KEY_NEUTRAL` field at its default is left out."""
    if not dataclasses.is_dataclass(cfg) or isinstance(cfg, type):
        raise TypeError(f"expected a dataclass instance, got {type(cfg).__name__}")
    return {
        f.name: _plain(getattr(cfg, f.name))
        for f in dataclasses.fields(cfg)
        if not (f.metadata.get(KEY_NEUTRAL) and getattr(cfg, f.name) == f.default)
    }


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

    Non-finite floats are rejected: they have no stable meaning in a run key; so is a
    dict or list config nested more than :data:`MAX_DEPTH` levels deep.
    """
    if isinstance(data, dict | list | tuple):
        check_depth(data, "a run config")

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
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown key {where}.{unknown[0]}; allowed keys: {', '.join(sorted(fields))}"
        )
    kwargs = {name: _coerce(hints[name], value, f"{where}.{name}") for name, value in data.items()}
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
        members = sorted(
            (a for a in args if a is not type(None)),
            key=lambda a: typing.get_origin(a) in (tuple, list),
        )
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
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
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


def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


#: a class's type hints, cached per class (a plain callable to mypy, which does not take every
#: ``type[...]`` as Hashable for functools.cache's wrapper)
_hints: Callable[[type], dict[str, Any]] = functools.cache(_type_hints)


def _takes_str(tp: Any) -> bool:
    return tp is str or (
        typing.get_origin(tp) in (typing.Union, types.UnionType) and str in typing.get_args(tp)
    )


def _number_in_float(value: Any, checked: Any) -> bool:
    return isinstance(value, int | float) and isinstance(checked, float)


# ----------------------------------------------------------------------------- numeric bounds
#: The largest magnitude of an integer field without a bound of its own: the int32 range
#: that JAX's default integers (loop counters, seeds) hold. A larger count, size or seed
#: is a typing mistake, and some would overflow NumPy's, torch's or JAX's integers.
INT_BOUND = 2**31 - 1
#: Optimizer or solver steps of one run at most (``train.steps``, ``max_steps``).
MAX_STEPS = 10**9
#: CPU threads of one run at most (``train.threads``): more than any one machine has.
MAX_THREADS = 1024

#: A field's bound: (lowest, highest), both included; None: the default of its type
#: (an int: +-INT_BOUND; a float: any finite number).
Bound = tuple[float | None, float | None]


def _numeric(tp: Any, items: bool = False) -> type | None:
    """int or float for a field of that type (or that type | None), else None; with
    ``items``, the type of the items of a ``tuple[int | float, ...]`` or ``list`` field."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _numeric(args[0], items) if len(args) == 1 else None
    if items:
        item_args = typing.get_args(tp)
        return (
            _numeric(item_args[0]) if typing.get_origin(tp) in (tuple, list) and item_args else None
        )
    return tp if tp in (int, float) else None


def _allowed(kind: type, lo: float | None, hi: float | None) -> str:
    what = "an integer" if kind is int else "a finite number"
    if lo is not None and hi is not None:
        return f"{what} in [{lo}, {hi}]"
    if lo is not None:
        return f"{what} >= {lo}"
    return f"{what} <= {hi}" if hi is not None else what


def check_bound(name: str, value: Any, kind: type, bound: Bound | None = None) -> None:
    """A :class:`ConfigError` naming ``name``, ``value`` and what is allowed unless the
    number ``value`` (of field type ``kind``: int or float) lies in ``bound`` (both ends
    included; an end left None is the type's default: +-:data:`INT_BOUND` for an int,
    finite for a float)."""
    lo, hi = bound or (None, None)
    if kind is int:
        lo = -INT_BOUND if lo is None else lo
        hi = INT_BOUND if hi is None else hi
    if (
        (kind is float and not math.isfinite(value))
        or (lo is not None and value < lo)
        or (hi is not None and value > hi)
    ):
        raise ConfigError(f"{name}={value!r} is not allowed; it must be {_allowed(kind, lo, hi)}")


def check_fields(cfg: Any, where: str = "", bounds: Mapping[str, Bound] | None = None) -> None:
    """Hold a config dataclass built in Python to the rules :func:`config_from_dict` applies
    to a loaded one; call it first in ``__post_init__``. Every field is checked against its
    annotation (a ``Literal`` value must be one of its choices, an ``int`` an integer and
    not a bool, ...), a :class:`ConfigError` names ``where.field``, the value and what is
    allowed. A field given in another form than its own is replaced by the form loading
    gives: a comma-separated string or a list for a tuple field (``widths="64,128"`` is
    ``(64, 128)``, as on the command line), a table for a nested config, an integral float
    for an int, a path for a string. An int in a float field stays as given (its run key
    is the one it always had).

    Every int and float field, and every item of a tuple of them, is held to a bound
    (:func:`check_bound`): its entry in ``bounds`` ({field name: (lowest, highest)}), else
    its type's default, so an override such as ``steps=1e20`` is refused where the config
    is checked."""
    hints = _hints(type(cfg))
    bounds = bounds or {}
    unknown = sorted(set(bounds) - set(hints))
    if unknown:
        raise TypeError(f"bounds for {unknown} name no field of {type(cfg).__name__}")
    for f in dataclasses.fields(cfg):
        if not f.init or f.name not in hints:
            continue
        tp, value = hints[f.name], getattr(cfg, f.name)
        if isinstance(value, os.PathLike) and _takes_str(tp):
            value = os.fspath(value)
        elif isinstance(value, numbers.Integral) and not isinstance(value, int):
            value = int(value)  # a NumPy integer: JSON (the run key) has no type for it
        elif isinstance(value, numbers.Real) and not isinstance(value, int | float):
            value = float(value)
        checked = _coerce(tp, value, f"{where}.{f.name}" if where else f.name)
        if isinstance(value, list | tuple) and isinstance(checked, list | tuple):
            # an int item of a tuple[float, ...] stays as given: (1, 2) keeps its run key
            items = [
                v if _number_in_float(v, c) else c for v, c in zip(value, checked, strict=True)
            ]
            same = type(value) is type(checked) and all(
                v is c for v, c in zip(value, items, strict=True)
            )
            checked = value if same else type(checked)(items)
        elif _number_in_float(value, checked):
            checked = value  # likewise an int in a float field
        if checked is not getattr(cfg, f.name):
            object.__setattr__(cfg, f.name, checked)
        name, kind, item = (
            f"{where}.{f.name}" if where else f.name,
            _numeric(tp),
            _numeric(tp, items=True),
        )
        if kind is not None and checked is not None:
            check_bound(name, checked, kind, bounds.get(f.name))
        if item is not None and isinstance(checked, list | tuple):
            for i, value in enumerate(checked):
                check_bound(f"{name}[{i}]", value, item, bounds.get(f.name))


#: How to give a run store, for :func:`check_instance` on a ``store=`` argument.
STORE_HINT = "give smallinit.core.store.RunStore(path), or None for $SMALLINIT_RUNS or ./runs"


def check_instance(value: Any, cls: type, where: str, hint: str | None = None) -> Any:
    """``value`` if it is a ``cls``, else a TypeError naming ``where``, what was given and
    how to make a ``cls`` (``hint``; by default: the config class's constructor or
    :func:`load_config`)."""
    if not isinstance(value, cls):
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        hint = hint or (
            f"build one with {cls.__name__}(...) or smallinit.core.config.load_config("
            f"{cls.__name__}, path, overrides)"
        )
        raise TypeError(
            f"{where} needs a {cls.__name__}, got {type(value).__name__} {shown}; {hint}"
        )
    return value


# ----------------------------------------------------------------------------- TOML and overrides
def _literal(text: str) -> Any:
    """Read ``text`` as a TOML value; anything TOML rejects is kept as a plain string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
    except RecursionError:
        raise ConfigError(
            f"value {text[:40]!r}... nests arrays or tables too deeply; at "
            f"most {MAX_DEPTH} levels are allowed"
        ) from None


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """Turn ``["a=1", "model.d=2"]`` into ``{"a": 1, "model.d": 2}`` (dotted paths to values,
    for :func:`override`)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or "" in key.split("."):
            raise ConfigError(f"override {item!r} is not allowed; write key=value")
        if len(key.split(".")) > MAX_DEPTH:
            raise ConfigError(
                f"override key {key[:40]!r}... has {len(key.split('.'))} dotted "
                f"parts; at most {MAX_DEPTH} are allowed"
            )
        out[key] = check_depth(_literal(raw.strip()), f"override {key}")
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


def dotted_items(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """The leaves of nested tables as ``(dotted path, value)`` pairs, in table order (the
    inverse of what :func:`override` applies): ``{"train": {"lr": 1e-3}}`` gives
    ``("train.lr", 1e-3)``; an empty table gives nothing."""
    for key, value in data.items():
        if isinstance(value, Mapping):
            yield from dotted_items(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


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
                where = ".".join(parents[: i + 1])
                raise ConfigError(
                    f"override {path}={value!r} is not allowed: {where} is a "
                    "value, not a table of keys"
                )
            else:
                child = node[part] = dict(child)
            node = child
        if isinstance(value, Mapping) and isinstance(node.get(leaf), dict):
            node[leaf] = merge_tables(node[leaf], value)
        else:
            node[leaf] = value
    return out


@overload
def override(
    cfg: Mapping[str, Any], changes: Mapping[str, Any], *, where: str = "config"
) -> dict[str, Any]: ...
@overload
def override(cfg: C, changes: Mapping[str, Any], *, where: str = "config") -> C: ...
def override(
    cfg: Mapping[str, Any] | C, changes: Mapping[str, Any], *, where: str = "config"
) -> dict[str, Any] | C:
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
    """Read a TOML file, with a one-line error naming the file when it is missing, not a
    regular file, larger than :data:`CONFIG_BYTES`, not TOML or nested deeper than
    :data:`MAX_DEPTH` levels."""
    path = Path(path)
    raw = read_user_file(path, what="config file", limit=CONFIG_BYTES)
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"config file {path} is not UTF-8 text (byte {err.start}); a config is TOML"
        ) from None
    except RecursionError:
        raise ConfigError(
            f"config file {path}: tables or arrays nest too deeply to be "
            f"read; at most {MAX_DEPTH} levels are allowed"
        ) from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config file {path} is not valid TOML: {err}") from None
    return check_depth(data, f"config file {path}")


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
    import tomli_w  # lazy: only writing TOML needs it; GPU images without it import the rest

    def drop_none(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: drop_none(v) for k, v in x.items() if v is not None}
        return x

    return tomli_w.dumps(drop_none(config_to_dict(cfg)))
