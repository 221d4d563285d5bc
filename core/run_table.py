"""The run store as a table: runs chosen by their config, sorted, and written flat as CSV.

:func:`select` keeps the runs whose config has each ``dotted.key = value`` asked for
(``model.d_model=128``, ``init="gamma:1.0"``; values read as TOML literals, as overrides
are) and sorts them by a field: a listing column (``kind``, ``key``, ``state``,
``created``, ``finished``), a summary entry (``val_loss``) or a dotted config key; runs
without the field go last. :func:`flat_record` is one run as one flat row — ``kind``,
``key``, ``state``, ``created``, ``finished``, ``version``, then ``config.<dotted key>``
and ``summary.<entry>`` columns — and :func:`write_csv` the table of those rows (the union
of the columns, in order of first appearance; lists and tables as JSON text, a missing
value empty), which ``pandas.read_csv`` reads with numeric columns as numbers
(``smallinit runs export-csv``).
"""

from __future__ import annotations

import csv
import json
from typing import IO, Any

from smallinit.core.config import dotted_items, parse_overrides
from smallinit.core.errors import ConfigError
from smallinit.core.results import StoredRun

#: the listing's own fields, sortable and the first columns of the flat table
RUN_FIELDS = ("kind", "key", "state", "created", "finished", "version")
MISSING = object()


def config_leaves(run: StoredRun) -> dict[str, Any]:
    return dict(dotted_items(run.config))


def parse_where(items: list[str]) -> dict[str, Any]:
    """``["model.d_model=128"]`` -> ``{"model.d_model": 128}``; a ConfigError names a
    filter that is not ``key=value``."""
    for item in items:
        if "=" not in item or not item.partition("=")[0].strip():
            raise ConfigError(
                f"--where {item!r} is not a filter; write a dotted config key "
                "and a value, e.g. --where model.d_model=128"
            )
    return parse_overrides(items)


def field_value(run: StoredRun, name: str) -> Any:
    """``name`` of ``run``: a listing field, a summary entry or a dotted config key
    (:data:`MISSING` when the run has none of them)."""
    if name in RUN_FIELDS:
        return getattr(run, name)
    if name in run.listed_summary:
        return run.listed_summary[name]
    return config_leaves(run).get(name, MISSING)


def _known(runs: list[StoredRun], name: str, what: str, config_only: bool) -> None:
    """A ConfigError naming ``name`` when no run has it (a misspelt key filters
    everything out silently otherwise)."""
    keys = {k for r in runs for k in config_leaves(r)}
    if not config_only:
        keys |= set(RUN_FIELDS) | {k for r in runs for k in r.listed_summary}
    if runs and name not in keys:
        close = sorted(k for k in keys if name.rpartition(".")[2] in k)[:4] or sorted(keys)[:4]
        raise ConfigError(
            f"{what} {name!r} is no {'config key' if config_only else 'field'} "
            f"of these {len(runs)} runs; e.g. {', '.join(close)}"
        )


def select(
    runs: list[StoredRun],
    where: dict[str, Any] | None = None,
    sort: str | None = None,
    descending: bool = False,
) -> list[StoredRun]:
    """The runs whose config has every ``key: value`` of ``where`` (numbers compare by
    value: 1 matches 1.0), sorted by ``sort`` (stable; runs without the field last, in
    their order)."""
    for key in where or {}:
        _known(runs, key, "--where", config_only=True)
    if sort:
        _known(runs, sort, "--sort", config_only=False)
    chosen = [
        r
        for r in runs
        if all(_equal(config_leaves(r).get(k, MISSING), v) for k, v in (where or {}).items())
    ]
    if not sort:
        return chosen
    present = [r for r in chosen if field_value(r, sort) not in (MISSING, None)]
    absent = [r for r in chosen if field_value(r, sort) in (MISSING, None)]
    try:
        present.sort(key=lambda r: field_value(r, sort), reverse=descending)
    except TypeError:  # mixed types (numbers and text): compare as text
        present.sort(key=lambda r: str(field_value(r, sort)), reverse=descending)
    return present + absent


def _equal(stored: Any, wanted: Any) -> bool:
    if isinstance(stored, bool) or isinstance(wanted, bool):
        return stored is wanted
    if isinstance(stored, int | float) and isinstance(wanted, int | float):
        return float(stored) == float(wanted)
    if isinstance(stored, list) and isinstance(wanted, list | tuple):
        return len(stored) == len(wanted) and all(map(_equal, stored, wanted))
    return stored == wanted


def _cell(value: Any) -> Any:
    if isinstance(value, list | dict):
        return json.dumps(value, sort_keys=True)
    return value


def flat_record(run: StoredRun) -> dict[str, Any]:
    """One run as one flat row (module docstring): listing fields, ``config.<key>``,
    ``summary.<entry>`` (nested summary tables dotted too)."""
    row = {name: getattr(run, name) for name in RUN_FIELDS}
    row.update({f"config.{k}": _cell(v) for k, v in dotted_items(run.config)})
    row.update({f"summary.{k}": _cell(v) for k, v in dotted_items(run.listed_summary)})
    return row


def write_csv(runs: list[StoredRun], out: IO[str]) -> int:
    """The flat table of ``runs`` as CSV into ``out`` (a header, then one row per run);
    returns the number of columns."""
    rows = [flat_record(r) for r in runs]
    columns = list(RUN_FIELDS)
    for row in rows:
        columns += [c for c in row if c not in columns]
    writer = csv.DictWriter(out, fieldnames=columns, restval="", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return len(columns)
