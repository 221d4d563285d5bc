"""Pieces every command group uses to register itself with the ``smallinit`` CLI.

A component exposes ``register(subparsers)``; inside it, :func:`add_group` creates its
group and :func:`add_command` each command, with a handler ``func(args) -> int | None``.
Handlers import heavy libraries (jax, torch) inside themselves, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from smallinit.core.errors import ConfigError


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad argument on one line and exits with status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps descriptions' line breaks and shows an option's default when it says something
    (not for flags, unset options, or help text that already names its default)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or isinstance(action, argparse._CountAction)
            or not (action.option_strings or action.nargs in ("?", "*"))
        ):
            return text
        return text + " (default: %(default)s)"


def reopen_closed_std_streams() -> None:
    """Put ``/dev/null`` on standard input, output and error where they were closed when
    the command started (``smallinit runs ls >&-``): what the command prints there is
    discarded, it runs to its own exit status, and no file it opens can take descriptor
    0, 1 or 2 and receive bytes meant for the terminal."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: fd itself
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        if getattr(sys, name) is None:  # Python starts with None for a closed stream
            setattr(sys, name, open(fd, mode, closefd=False, encoding="utf-8"))


def add_group(subparsers: Any, name: str, *, help: str, description: str) -> Any:
    """Add a command group (``smallinit NAME ...``); returns its command subparsers."""
    group = subparsers.add_parser(
        name, help=help, description=description, formatter_class=HelpFormatter
    )
    return group.add_subparsers(dest="command", metavar="COMMAND", required=True)


def add_command(
    commands: Any,
    name: str,
    func: Callable[[argparse.Namespace], int | None],
    *,
    help: str,
    description: str | None = None,
) -> ArgumentParser:
    """Add one command with handler ``func``; returns its parser for options."""
    parser = commands.add_parser(
        name, help=help, description=description or help, formatter_class=HelpFormatter
    )
    parser.set_defaults(func=func)
    return parser


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """``--force`` and ``--runs-dir``, for every command that computes through the store."""
    parser.add_argument(
        "--force",
        action="store_true",
        help="recompute runs even if finished results exist "
        "(a run another process is computing is waited for, and the result it finishes kept)",
    )
    parser.add_argument(
        "--runs-dir",
        type=path_arg,
        default=None,
        metavar="DIR",
        help="run store root (default: $SMALLINIT_RUNS or ./runs)",
    )


#: The one order in which a value reaches a command's config, lowest first (every command
#: that has these options; ``--config FILE`` means the same in each of them):
PRECEDENCE = (
    "the defaults in code (the config dataclass)",
    "--profile P (its table)",
    "--config FILE (a TOML overlay)",
    "KEY=VALUE overrides",
)
PRECEDENCE_TEXT = " < ".join(PRECEDENCE)
CONFIG_FILE_HELP = (
    "a TOML file laid over what --profile gives, before the KEY=VALUE "
    "overrides (order: " + PRECEDENCE_TEXT + ")"
)


def add_config_options(
    parser: argparse.ArgumentParser,
    starts: str,
    example: str,
    *,
    profile_default: str | None = "quick",
    store: bool = True,
) -> None:
    """What every command that computes runs takes for its config: ``--profile``, ``--config
    FILE``, ``key=value`` overrides and ``--print-config``, then the run-store options;
    ``starts``: where its config starts at a profile; ``example``: override examples;
    ``profile_default``: the profile without ``--profile`` (None: the defaults in code);
    ``store``: whether the command computes through the run store (its options).
    The order is :data:`PRECEDENCE` (applied by :func:`smallinit.core.config.load_config`)."""
    parser.add_argument(
        "--profile",
        type=profile_arg,
        default=profile_default,
        help=f"where the config starts: {starts} (default: {profile_default or 'none'})",
    )
    parser.add_argument(
        "--config",
        type=path_arg,
        default=None,
        metavar="FILE",
        help=CONFIG_FILE_HELP + "; it holds the config's own keys",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help=f"config overrides, e.g. {example} (--print-config shows every key)",
    )
    add_print_config_option(parser)
    if store:
        add_run_options(parser)


def command_config(args: argparse.Namespace, cls: type, base: Any) -> Any:
    """The config a command runs: ``base`` (the defaults in code, with ``--profile``'s table
    laid over them; None: ``cls()``), then ``--config FILE``, then the ``key=value``
    overrides (:data:`PRECEDENCE`)."""
    from smallinit.core.config import load_config

    return load_config(cls, args.config, args.overrides, base=base)


def add_overlay_options(parser: argparse.ArgumentParser, example: str) -> None:
    """``--config FILE`` and ``key=value`` overrides laid over the profile that the command's
    ``--profile`` names (:func:`overlaid_profile`); ``example``: a whole command line."""
    parser.add_argument(
        "--config",
        type=path_arg,
        default=None,
        metavar="FILE",
        help=CONFIG_FILE_HELP + "; it holds profile tables (its extends = "
        '"NAME", if it has one, must name that profile)',
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="dotted paths into the profile's tables, laid over it after "
        f"--config, e.g. {example}; the derived profile's name "
        "(PROFILE+HASH) is logged, and the same overlay gives it again",
    )


def overlaid_profile(
    args: argparse.Namespace, base: str, overrides: list[str] | None = None
) -> str:
    """The profile a command runs at: ``base`` with ``args.config`` and the ``key=value``
    overrides (``overrides``, default ``args.overrides``) laid over it
    (:func:`smallinit.core.profiles.derive`); a derived one is named once on stderr."""
    from smallinit.core import profiles
    from smallinit.core.config import parse_overrides

    items = args.overrides if overrides is None else overrides
    name = profiles.derive(base, args.config, parse_overrides(items))
    if name != base:
        given = ([f"--config {args.config}"] if args.config else []) + list(items)
        logging.getLogger("smallinit.cli").info(
            "profile %s: %s with %s", name, base, " ".join(given)
        )
    return name


def add_executor_options(parser: argparse.ArgumentParser) -> None:
    """``--workers`` and ``--executor``, for every command that runs many runs (the job
    driver, :func:`smallinit.core.jobs.run_specs`)."""
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        metavar="N",
        help="local processes computing runs side by side (default: a profile's pin, else "
        "$SMALLINIT_WORKERS, else every core: max(1, cores // threads per run))",
    )
    parser.add_argument(
        "--executor",
        choices=("local", "ray"),
        default=None,
        help="where runs compute: local worker processes, or one Ray task per run on the "
        "cluster at $RAY_ADDRESS (else a local Ray); needs the ray extra and a run "
        "store every node mounts (default: $SMALLINIT_EXECUTOR, else local)",
    )


def add_sink_options(parser: argparse.ArgumentParser) -> None:
    """``--tensorboard DIR`` and ``--wandb PROJECT``, for every command that trains
    transformer runs (:mod:`smallinit.llm.training.sinks`): one command trains them itself
    (``llm train``), the others through :func:`smallinit.llm.training.sinks.
    sink_environment`, which reaches their worker processes."""
    parser.add_argument(
        "--tensorboard",
        type=path_arg,
        default=None,
        metavar="DIR",
        help="also log every metric of each transformer run it trains to TensorBoard in "
        "DIR/<run name>/<key> (needs pip install 'smallinit[tb]'; default: "
        "$SMALLINIT_TENSORBOARD, else off); not part of a run's config or key",
    )
    parser.add_argument(
        "--wandb",
        default=None,
        metavar="PROJECT",
        help="also log every metric, the config and the final evaluation of each transformer "
        "run it trains to the Weights & Biases project PROJECT (needs pip install "
        "'smallinit[wandb]'; W&B's own settings apply, e.g. WANDB_MODE=offline; "
        "default: $SMALLINIT_WANDB, else off); not part of a run's config or key",
    )


def print_json(obj: Any, *, indent: int = 2, sort_keys: bool = False) -> None:
    """Print ``obj`` as strict JSON, the one way every command writes JSON to stdout: NumPy
    values become plain ones and NaN/±inf print as null (:func:`smallinit.core.atomic.finite_json`);
    values JSON has no type for (exact fractions) print as strings."""
    from smallinit.core.atomic import finite_json

    print(
        json.dumps(
            finite_json(obj),
            indent=indent,
            sort_keys=sort_keys,
            allow_nan=False,
            ensure_ascii=False,
            default=str,
        )
    )


def _plain(data: Any) -> Any:
    """A config dataclass as a dict; anything else as it is."""
    import dataclasses

    from smallinit.core.config import config_to_dict

    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        return config_to_dict(data)
    return data


def toml_text(data: Any) -> str:
    """TOML of a config dataclass or a plain dict (keys whose value is None left out: TOML
    has no null)."""
    import tomli_w

    def drop_none(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: drop_none(v) for k, v in x.items() if v is not None}
        if isinstance(x, list):
            return [drop_none(v) for v in x]
        return x

    return tomli_w.dumps(drop_none(_plain(data)))


def add_print_config_option(parser: argparse.ArgumentParser) -> None:
    """``--print-config``: print the resolved config as TOML and exit 0 without running."""
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config (defaults, profile, file, options and "
        "overrides applied) as TOML and exit without running",
    )


def print_config(args: argparse.Namespace, config: Any, **tables: Any) -> bool:
    """With ``--print-config``: print ``config`` as TOML, each extra ``tables`` entry as its
    own ``[name]`` table, and return True (the handler then returns 0 without running)."""
    if not getattr(args, "print_config", False):
        return False
    print(toml_text({**_plain(config), **{k: _plain(v) for k, v in tables.items()}}), end="")
    return True


def add_print_key_option(parser: argparse.ArgumentParser) -> None:
    """``--print-key``: print the run's KIND/KEY and exit 0 without running (a dry run)."""
    parser.add_argument(
        "--print-key",
        action="store_true",
        help="print the run's KIND/KEY (what the run store names it by) and exit without running",
    )


def print_key(args: argparse.Namespace, spec: Any, engine: str | None = None) -> bool:
    """With ``--print-key``: print ``KIND/KEY`` of the run ``spec`` (a
    :class:`smallinit.core.jobs.RunSpec`; ``engine``: a toy scan's engine, whose version is
    part of the key) and return True (the handler then returns 0 without running)."""
    if not getattr(args, "print_key", False):
        return False
    key = spec.key
    if engine is not None:
        from smallinit.core.runs import config_key
        from smallinit.toy.scan import chosen_engine, scan_version

        key = config_key(spec.kind, spec.config, scan_version(chosen_engine(spec.config, engine)))
    print(f"{spec.kind}/{key}")
    return True


def add_json_option(
    parser: argparse.ArgumentParser, help: str = "print JSON records instead of a table"
) -> None:
    """``--json``: machine-readable output for scripts."""
    parser.add_argument("--json", action="store_true", help=help)


# ----------------------------------------------------------------------------- argument types
def _typed_list(item: Callable[[str], Any], what: str) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"{text!r} is empty; give {what}, comma-separated")
        out = []
        for t in items:
            try:
                out.append(item(t))
            except (ValueError, argparse.ArgumentTypeError):
                raise argparse.ArgumentTypeError(f"{t!r} in {text!r} is not {what}") from None
        return out

    return parse


def finite_float(text: str) -> float:
    """A finite real number (rejects nan and inf)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def integer(text: str) -> int:
    """An integer, or the argparse error every integer option gives."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def positive_int(text: str) -> int:
    """An integer >= 1."""
    value = integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive integer")
    return value


def nonnegative_int(text: str) -> int:
    """An integer >= 0."""
    value = integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be an integer >= 0")
    return value


def path_arg(text: str) -> str:
    """A file or folder path; an empty one is refused (it would mean the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is an empty path; give a file or folder")
    return text


def dir_path(text: str) -> Path:
    """A folder path (:func:`path_arg`) as a :class:`~pathlib.Path`."""
    return Path(path_arg(text))


def run_arg(text: str) -> str:
    """A run reference (a key, a key prefix, KIND/KEY or a run directory); not empty."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"{text!r} is empty; give a run key, a key prefix, KIND/KEY or a run directory"
        )
    return text


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return value


float_list = _typed_list(finite_float, "a number")
positive_int_list = _typed_list(positive_int, "a positive integer")


def profile_arg(text: str) -> str:
    """A packaged profile: ``quick`` (CPU minutes), ``full`` (GPU scale) or another file of
    core/profiles/."""
    from smallinit.core import profiles

    if text not in profiles.names():
        raise argparse.ArgumentTypeError(
            f"profile {text!r} is not allowed; use {' or '.join(profiles.names())}"
        )
    return text


def user_error(message: str) -> ConfigError:
    """Convenience for handlers: ``raise user_error("...")`` exits 2 with that line."""
    return ConfigError(message)
