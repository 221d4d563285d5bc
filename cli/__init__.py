"""The ``smallinit`` command line (also ``python -m smallinit``).

All command-line code lives in this package, on top of the components: each module here
adds one command group through ``register(subparsers)`` and imports the libraries it calls
inside its handlers, so ``smallinit --help`` stays fast (no torch, jax or sympy).
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import re
import sys
import warnings
from collections.abc import Sequence

from smallinit import __version__
from smallinit.cli import claims, compare, data, figs, gpu_check, llm, runs, theory, toy
from smallinit.cli.util import ArgumentParser, HelpFormatter, reopen_closed_std_streams
from smallinit.core import interrupts
from smallinit.core.errors import SmallinitError, SmallinitWarning, one_line
from smallinit.core.progress import configure_logging, set_quiet

#: The modules whose ``register(subparsers)`` adds one command group each, in help order.
COMMAND_GROUPS = (
    theory,  # smallinit theory ...
    toy,  # smallinit toy ...
    llm,  # smallinit llm ...
    compare,  # smallinit compare
    figs,  # smallinit figs
    runs,  # smallinit runs ...
    claims,  # smallinit claims
    data,  # smallinit data fetch
    gpu_check,  # smallinit gpu-check
)

DESCRIPTION = """\
smallinit: how the scale of initialization decides what a network learns.

Exact theory (theory), two-layer simulations (toy), transformer pretraining (llm),
the toy-to-LLM comparison (compare) and the paper figures (figs). Every result is
cached in the run store (./runs or $SMALLINIT_RUNS) and reused until --force.
Run `smallinit GROUP --help` for the commands of a group."""


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="smallinit", description=DESCRIPTION, formatter_class=HelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"smallinit {__version__}")
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no progress bars, warnings and errors only"
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="debug logging (and tracebacks on errors)",
    )
    groups = parser.add_subparsers(dest="group", metavar="GROUP", required=True)
    for module in COMMAND_GROUPS:
        module.register(groups)
    return parser


def describe_os_error(err: OSError) -> str:
    """One line naming the path and what went wrong, e.g. ``cannot use /x/y: Not a
    directory (a folder is needed there)``."""
    reason = err.strerror or one_line(err)
    hints = {
        "ENOTDIR": "a part of this path is a file, not a folder",
        "EISDIR": "this is a folder; a file is needed here",
        "EACCES": "no permission; choose a folder you can write",
        "EROFS": "read-only file system; choose a writable folder",
        "ENOENT": "no such file or folder",
        "ENOSPC": "the disk is full",
    }
    hint = hints.get(errno.errorcode.get(err.errno or 0, ""), "")
    where = f"{err.filename}" if err.filename else "a file"
    return one_line(f"cannot use {where}: {reason}" + (f" ({hint})" if hint else ""))


def parse(parser: ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)``, where a command's ``KEY=VALUE`` overrides may come in
    several places among its options (``toy scan gammas=0.5 --json widths=250,500``):
    argparse takes positionals in one run only, so the ones it leaves over are added to the
    command's ``overrides`` when they look like ``key=value``."""
    args, rest = parser.parse_known_args(argv)
    stray = [a for a in rest if not OVERRIDE.fullmatch(a)]
    if rest and (stray or not isinstance(getattr(args, "overrides", None), list)):
        parser.error(f"unrecognized arguments: {' '.join(stray or rest)}")
    if rest:
        args.overrides = [*args.overrides, *rest]
    return args


OVERRIDE = re.compile(r"[A-Za-z_][\w.-]*=.*", re.DOTALL)


def one_line_warnings(show):
    """A ``warnings.showwarning`` that prints a user's warning (:class:`SmallinitWarning`) in
    one line, ``smallinit: warning: ...``, and passes any other to ``show``."""

    def show_warning(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, SmallinitWarning):
            print(f"smallinit: warning: {one_line(message)}", file=file or sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)

    return show_warning


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; returns the exit status."""
    reopen_closed_std_streams()
    parser = build_parser()
    args = parse(parser, argv)
    if args.quiet:
        set_quiet(True)
    configure_logging(args.verbose)
    try:
        with interrupts.catching(), warnings.catch_warnings():
            warnings.showwarning = one_line_warnings(warnings.showwarning)
            status = int(args.func(args) or 0)
            interrupts.check()  # a Ctrl-C that every raise of it missed still counts
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below
        return status
    except (SmallinitError, ValueError) as err:
        # ValueError: theory and kernels raise it for bad input (they import nothing of ours).
        if args.verbose or os.environ.get("SMALLINIT_DEBUG"):
            logging.getLogger("smallinit").exception("error")
        print(f"smallinit: error: {one_line(err)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `smallinit theory schemes | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as err:
        # the file system refused something the user pointed at (--runs-dir, --out, --json
        # FILE, --config, SMALLINIT_RUNS): name the path and the reason, exit 2
        if args.verbose or os.environ.get("SMALLINIT_DEBUG"):
            logging.getLogger("smallinit").exception("error")
        print(f"smallinit: error: {describe_os_error(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "smallinit: interrupted (finished runs are kept in the store; unfinished ones "
            "resume on the next call)",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
