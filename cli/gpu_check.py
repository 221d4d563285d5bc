"""``smallinit gpu-check``: the prepared GPU check (:mod:`smallinit.tools.gpu_check`), one
JSON of every part's result, the goals and the verdict. The check's module imports nothing
but the standard library (its parts run in processes of their own), so building the parser
with its options stays light."""

from __future__ import annotations

import argparse

from smallinit.cli.util import HelpFormatter, user_error
from smallinit.tools import gpu_check

DESCRIPTION = """\
The GPU check: the parts environment, kernels, throughput, compiled, step_profile, gpu_tests
and full_run, each in a process of its own with its own time limit, within --budget seconds
(540 on a GPU: a machine that ends a command at 10 minutes leaves it a minute). It writes
OUT/gpu_check.json after every part; the report page (`smallinit figs`) shows the checks
committed as bench-results/gpu/<date>/gpu_check.json. Exit 1 with `GPU CHECK FAILED` on
stderr when the verdict fails, 143 after SIGTERM. --dry walks the same parts on the CPU at
toy sizes (no goal judged)."""


def cmd_gpu_check(args: argparse.Namespace) -> int:
    try:
        chosen = gpu_check.chosen_parts(args)
    except ValueError as err:
        raise user_error(str(err)) from None
    return gpu_check.run(args, chosen)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "gpu-check",
        help="the prepared GPU check: every part's result, goals and verdict as one JSON",
        description=DESCRIPTION,
        formatter_class=HelpFormatter,
    )
    gpu_check.add_arguments(parser)
    parser.set_defaults(func=cmd_gpu_check)
