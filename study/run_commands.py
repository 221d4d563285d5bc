"""One shell command per run of a profile's plan: the command that recomputes exactly that
run, under the same run key (``smallinit runs show KEY --command``, ``smallinit figs
--plan --commands``).

Every run kind of the plan has one command that computes a run of it alone
(:data:`COMMANDS`), and that command's config starts where every command's does (the one
order, :data:`smallinit.cli.util.PRECEDENCE`: the defaults in code < ``--profile P`` <
``--config FILE`` < ``KEY=VALUE``). The printed command is ``smallinit <command> --profile P``
followed by a ``KEY=VALUE`` override for every leaf of the run's config that differs from
what the command starts from at ``P`` (its :attr:`Command.base`), each shell-quoted
(:func:`shlex.quote`), so it is self-contained and safe to paste. For ``llm train``, which
may also start from the defaults in code alone, the shorter of the two is printed.

A run whose learning rate is chosen by tuning (:class:`~smallinit.llm.training.lr_choice.
TunedSpec`, profiles with an ``lr_grid``) is listed under a key of its own until the store
holds its tuning runs; its command is the ``llm train`` of its config at the chosen rate,
and is known only once the tuning runs are (:func:`command_of` says so otherwise).
"""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from smallinit.compare.comparison import profile_config as compare_config
from smallinit.core import profiles
from smallinit.core.config import canonical_json, config_from_dict
from smallinit.core.errors import ConfigError
from smallinit.core.jobs import RunSpec
from smallinit.core.results import KEY_PREFIX, load_run
from smallinit.core.store import RunStore
from smallinit.llm.run_config import profile_config as train_config
from smallinit.llm.training.lr_choice import TunedSpec
from smallinit.study.experiments import anchor_scan, planned
from smallinit.toy import condense, diagonal, initial_condensation, scan

#: The program every printed command starts with.
PROGRAM = "smallinit"


@dataclass(frozen=True)
class Command:
    """The command that computes one run of a kind: its words after ``smallinit`` and the
    config it starts from at a profile (``base(profile)``; the same function its handler
    calls). ``bare``: it may also start without a profile, from the defaults in code
    (``base(None)``)."""

    words: tuple[str, ...]
    base: Callable[[str | None], Any]
    bare: bool = False


#: run kind -> the command that computes one run of it
COMMANDS: dict[str, Command] = {
    "toy-scan": Command(("toy", "scan"), scan.from_profile),
    "toy-condense": Command(("toy", "condense"), condense.from_profile),
    "toy-initial-condensation": Command(
        ("toy", "initial-condensation"), initial_condensation.from_profile
    ),
    "toy-diagonal": Command(("toy", "diagonal"), lambda p: diagonal.from_profile(p)[0]),
    "compare": Command(("compare",), compare_config),
    "llm-anchor": Command(("llm", "anchor"), lambda p: anchor_scan.load(p)[0]),
    "llm-train": Command(("llm", "train"), train_config, bare=True),
}


# ----------------------------------------------------------------------------- KEY=VALUE items
def _full(value: Any) -> Any:
    """Plain data of a config with every field (key-neutral ones at their default too)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _full(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_full(v) for v in value]
    return value


def _leaves(data: dict[str, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    for key, value in data.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def toml_value(value: Any, where: str = "value") -> str:
    """``value`` as the TOML literal a ``KEY=VALUE`` override reads back to it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(
                f"{where}={value!r} has no TOML literal; a run's config holds finite numbers"
            )
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v, where) for v in value) + "]"
    raise ConfigError(
        f"{where}={value!r} cannot be given as KEY=VALUE (TOML has no null); "
        "give the whole config in a --config FILE instead"
    )


def differences(config: Any, base: Any) -> list[str]:
    """``KEY=VALUE`` items (dotted keys, in field order) that turn ``base`` into ``config``:
    one for every leaf whose value differs, type included (``1`` is not ``1.0``)."""
    have = dict(_leaves(_full(base)))
    out = []
    for key, value in _leaves(_full(config)):
        if key not in have or canonical_json(have[key]) != canonical_json(value):
            out.append(f"{key}={toml_value(value, key)}")
    return out


# ----------------------------------------------------------------------------- commands
def command(kind: str, config: Any, profile: str) -> str:
    """The shell command that computes the run of ``kind`` with ``config``, starting at
    ``profile`` (the shortest form: see the module doc)."""
    if kind not in COMMANDS:
        raise ConfigError(
            f"run kind {kind!r} has no command that computes one run of it; "
            f"kinds with one: {', '.join(COMMANDS)}"
        )
    cmd = COMMANDS[kind]
    starts = [profile, None] if cmd.bare else [profile]
    forms = []
    for start in starts:
        items = differences(config, cmd.base(start))
        forms.append([PROGRAM, *cmd.words, *(["--profile", start] if start else []), *items])
    return shlex.join(min(forms, key=len))


def tuned_config(spec: TunedSpec, store: RunStore | None) -> Any | None:
    """The config a tuned run trains at (its chosen learning rate), None while the store
    lacks its tuning runs."""
    return spec.chosen(store or RunStore())


def command_of(spec: RunSpec, profile: str, store: RunStore | None = None) -> str:
    """The command of the run ``spec`` of ``profile``'s plan (:func:`command`); a tuned run
    needs its chosen learning rate, read from ``store``, else a ConfigError says which
    command computes its tuning runs."""
    config = spec.config
    if isinstance(spec, TunedSpec):
        config = tuned_config(spec, store)
        if config is None:
            raise ConfigError(
                f"run {spec.key} of profile {profile} trains at a learning rate "
                "tuned on runs the store does not hold yet (its tuning runs, "
                "listed by `smallinit figs --plan --commands --profile "
                f"{shlex.quote(profile)}`); compute them, then ask again (with "
                "--runs-dir of that store)"
            )
    return command(spec.kind, config, profile)


def find(
    key: str, among: Iterable[str] | None = None, kind: str | None = None
) -> tuple[str, RunSpec] | None:
    """(profile, spec) of the first run of a plan (the profiles ``among``, default every
    packaged one, in :func:`smallinit.core.profiles.names` order) whose key is ``key`` or
    starts with it, of kind ``kind`` if given (a prefix that two runs of one profile share
    is refused); None if none does."""
    for profile in among or profiles.names():
        found: dict[str, RunSpec] = {}
        for _, _, spec, _ in planned(profile):
            if spec.key.startswith(key) and kind in (None, spec.kind):
                found.setdefault(spec.key, spec)
        if len(found) > 1:
            raise ConfigError(
                f"run key prefix {key!r} matches {len(found)} runs of profile "
                f"{profile} ({', '.join(sorted(found)[:3])}, ...); give more of "
                "the key"
            )
        if found:
            return profile, next(iter(found.values()))
    return None


def stored_command(kind: str, config: dict[str, Any], profile: str = "quick") -> str:
    """The command of a run as the store holds it (its kind and config.json), for a run of
    no plan (an ad hoc ``llm train``, a derived profile's)."""
    if kind not in COMMANDS:
        raise ConfigError(
            f"run kind {kind!r} has no command that computes one run of it; "
            f"kinds with one: {', '.join(COMMANDS)}"
        )
    cls = type(COMMANDS[kind].base(profile))
    return command(kind, config_from_dict(cls, config), profile)


def command_for(
    ref: str, among: Iterable[str] | None = None, runs_dir: str | Path | None = None
) -> str:
    """The command of the run ``ref`` names (a run key, a unique key prefix, ``KIND/KEY``
    or a run directory): the run of a plan of the profiles ``among`` (default: every
    packaged one) with that key (:func:`find`, :func:`command_of`), else the run of the
    store with it (:func:`stored_command`, starting at the first of ``among``). A
    one-line ConfigError names ``ref`` and where it was looked for when neither has it."""
    among = list(among or profiles.names())
    text = str(ref).strip()
    kind, _, key = text.rpartition("/")
    if not (Path(text) / "config.json").is_file():
        if not KEY_PREFIX.fullmatch(key):
            raise ConfigError(
                f"RUN {text!r} is neither a run directory (with a config.json) "
                "nor a run key (1 to 16 lowercase hex digits, optionally after "
                "KIND/)"
            )
        hit = find(key, among, kind=kind or None)
        if hit is not None:
            profile, spec = hit
            return command_of(spec, profile, RunStore(runs_dir))
    try:
        run = load_run(text, runs_dir=runs_dir)
    except ConfigError as err:
        where = f"profile{'s' * (len(among) > 1)} {', '.join(among)}"
        said = str(err).removeprefix(f"RUN {text!r}").lstrip(": ")
        raise ConfigError(
            f"RUN {text!r} is in no plan of {where} (`smallinit figs --plan "
            f"--profile P` lists their runs); the store: {said}"
        ) from None
    return stored_command(run.kind, run.config, among[0])
