"""``smallinit figs``: render the paper figures (:mod:`smallinit.figs` does the work)."""

from __future__ import annotations

import argparse
from pathlib import Path

from smallinit.cli.util import HelpFormatter, add_run_options, print_json, profile_arg
from smallinit.runs import RunStore


def _figure_numbers(text: str) -> list[int]:
    from smallinit.figs import FIGURES

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


def _cmd_plan(args: argparse.Namespace) -> int:
    from smallinit.experiments import plan

    rows = plan(args.profile, args.only)
    if args.json:
        print_json(rows, indent=1)
        return 0
    seen = set()
    for r in rows:
        again = " (shared)" if (r["kind"], r["key"]) in seen else ""
        again += f" (inside {r['experiment']})" if r["inner"] else ""
        seen.add((r["kind"], r["key"]))
        print(f"fig {r['figure']:2d} {r['experiment']:<20} {r['kind']:<24} {r['key']}  "
              f"{r['summary']}{again}")
    print(f"{len(seen)} distinct runs in {len(rows)} rows at profile {args.profile}")
    return 0


def _cmd_figs(args: argparse.Namespace) -> int:
    from smallinit.figs import FIGURES, make_figures

    if args.plan:
        return _cmd_plan(args)
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
        elif not paths:
            print(f"{label} nothing drawn (its experiment has no runs at this profile)")
        else:
            print(f"{label} " + ", ".join(str(p) for p in paths))
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "figs",
        help="render the paper figures (or list their runs with --plan)",
        description=(
            "Render the figures of docs/science.md §7 from the cached experiments (computing "
            "missing runs first). Figures whose experiment is not built yet are listed as such."
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--only", type=_figure_numbers, default=None, metavar="N[,N...]",
                        help="only these figure numbers (default: all)")
    parser.add_argument("--profile", type=profile_arg, default="quick",
                        help="quick (CPU minutes) or full (GPU scale)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="where the PNG/PDF files go (default: $SMALLINIT_FIGS_OUT, else "
                             "paper_figs/out of the checkout, else ./paper_figs_out); the "
                             "figure scripts themselves always come from the package")
    parser.add_argument("--plan", action="store_true",
                        help="list every run of the chosen figures (figure, experiment, kind, "
                             "run key, config summary) without computing anything")
    parser.add_argument("--json", action="store_true", help="with --plan: print JSON rows")
    add_run_options(parser)
    parser.set_defaults(func=_cmd_figs)
