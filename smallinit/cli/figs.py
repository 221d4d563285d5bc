"""``smallinit figs``: render the paper figures (:mod:`smallinit.figs` does the work)."""

from __future__ import annotations

import argparse
from pathlib import Path

from smallinit.cli.util import HelpFormatter, add_run_options, profile_arg
from smallinit.figs import FIGURES, make_figures
from smallinit.runs import RunStore


def _figure_numbers(text: str) -> list[int]:
    try:
        numbers = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of figure numbers") from None
    bad = [n for n in numbers if n not in FIGURES]
    if bad or not numbers:
        raise argparse.ArgumentTypeError(
            f"figure {bad[0] if bad else text!r} does not exist; choose from 1-{max(FIGURES)}"
        )
    return numbers


def _cmd_figs(args: argparse.Namespace) -> int:
    results = make_figures(
        only=args.only,
        profile=args.profile,
        out_dir=args.out,
        store=RunStore(args.runs_dir),
        force=args.force,
    )
    for number, paths in results.items():
        label = f"fig {number:2d} {FIGURES[number]:<18}"
        if paths is None:
            print(f"{label} not yet available (its experiment is not built)")
        else:
            print(f"{label} " + ", ".join(str(p) for p in paths))
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "figs",
        help="render the paper figures into paper_figs/out/",
        description=(
            "Render the figures of SPEC §7 from the cached experiments (computing missing "
            "runs first). Figures whose experiment is not built yet are listed as such."
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--only", type=_figure_numbers, default=None, metavar="N[,N...]",
                        help="only these figure numbers (default: all)")
    parser.add_argument("--profile", type=profile_arg, default="quick",
                        help="quick (CPU minutes) or full (GPU scale)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="output folder (default: paper_figs/out)")
    add_run_options(parser)
    parser.set_defaults(func=_cmd_figs)
