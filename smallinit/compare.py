"""``smallinit compare``: theory, two-layer simulation and transformer on the same axes.

Not built yet (issue 9): the command is registered so that ``--help`` documents it, and
running it says so instead of pretending to compare anything.
"""

from __future__ import annotations

import argparse

from smallinit.cliutil import HelpFormatter, float_list, positive_int_list, profile_arg
from smallinit.errors import SmallinitError


def _cmd_compare(args: argparse.Namespace) -> int:
    raise SmallinitError("smallinit compare is not built yet (issue 9)")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="toy-to-LLM comparison table (not built yet)",
        description="For each γ: theory's predicted regime and S_w interval for the FFN "
        "blocks, the two-layer simulation's S_w, and the transformer's measured slopes.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--gammas", type=float_list, default=[0.3, 0.5, 0.75, 1.0, 1.25],
                        help="γ values, comma-separated")
    parser.add_argument("--widths", type=positive_int_list, default=[64, 128, 256, 512],
                        help="transformer widths d_model, comma-separated")
    parser.add_argument("--profile", type=profile_arg, default="quick",
                        help="quick (CPU minutes) or full (GPU scale)")
    parser.set_defaults(func=_cmd_compare)
