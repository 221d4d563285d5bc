"""``smallinit figs``: render the paper figures (:mod:`smallinit.study.figs` does the work)."""

from __future__ import annotations

import argparse
from pathlib import Path

from smallinit.cli.util import (
    HelpFormatter,
    add_executor_options,
    add_overlay_options,
    add_print_config_option,
    add_run_options,
    add_sink_options,
    dir_path,
    integer,
    overlaid_profile,
    path_arg,
    print_config,
    print_json,
    profile_arg,
)
from smallinit.core.errors import ConfigError


def _item_count(text: str) -> int:
    value = integer(text)
    if value < 10:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not allowed; give an integer >= 10 (data.synthetic_items' own floor)"
        )
    return value


def _figure_numbers(text: str) -> list[int]:
    from smallinit.study.figure_list import FIGURES  # not .figs: the whole study

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
    from smallinit.core.memory import human
    from smallinit.core.store import RunStore
    from smallinit.study import power
    from smallinit.study.budget import estimate, format_estimate
    from smallinit.study.experiments import plan, plan_totals
    from smallinit.study.figs import FIGURES

    rows = plan(args.profile, args.only, population=args.population)
    totals = plan_totals(rows)
    if args.spread is not None and not Path(args.spread).is_file():
        raise ConfigError(
            f"--spread {args.spread}: no such file; give a claims JSON (smallinit claims --json)"
        )
    spread_file = Path(args.spread) if args.spread else power.default_spread(args.profile)
    powers, source = _powers(args.profile, spread_file)
    est = estimate(args.profile, args.only, RunStore(args.runs_dir))
    if args.json:
        print_json(
            {
                "profile": args.profile,
                "runs": rows,
                "total": totals,
                "estimate": est.as_dict(),
                "power": {"sd_source": source, "claims": powers},
            },
            indent=1,
        )
        return 0
    if args.commands:
        return _print_commands(args.profile, args.only, RunStore(args.runs_dir))
    seen = set()
    for r in rows:
        again = " (shared)" if (r["kind"], r["key"]) in seen else ""
        again += f" (inside {r['experiment']})" if r["inner"] else ""
        seen.add((r["kind"], r["key"]))
        c = r["cost"]
        size = (
            f"  N={c['params']:.3g} (non-emb {c['params_non_embedding']:.3g}) "
            f"T={c['tokens']:.3g} C={c['flops']:.3g} mem {human(c['memory_bytes'])} "
            f"{c['h200_hours']:.3f} H200-h"
            if c
            else ""
        )
        together = f" (population {r['population']})" if r["population"] else ""
        print(
            f"fig {r['figure']:2d} {r['experiment']:<20} {r['kind']:<24} {r['key']}  "
            f"{r['summary']}{again}{together}{size}"
        )
    print(power.format_rows(powers, source))
    print(
        f"{totals['transformer_runs']} transformer runs: {totals['flops']:.3g} training "
        f"FLOPs, {totals['h200_hours']:.1f} H200-hours at {totals['mfu']:.0%} MFU of "
        f"{totals['peak_flops'] / 1e12:.0f} TFLOP/s ({totals['h200_hours_small_mfu']:.1f} "
        f"at {totals['small_mfu']:.0%}, a small model's published MFU), largest peak memory "
        f"{human(totals['max_memory_bytes'])} (of {totals['gpu_memory_gib']} GiB)"
    )
    if totals["measured"]:
        m = totals["measured"]
        print(
            f"  at the measured {m['mfu']:.1%} MFU ({m['part']} of {m['source']}): "
            f"{m['h200_hours']:.1f} H200-hours"
        )
    print(
        f"  {totals['formula']}  [{totals['sources']}; {totals['peak_source']}; "
        f"{totals['small_mfu']:.0%}: {totals['small_mfu_source']}]"
    )
    for line in format_estimate(est, FIGURES):
        print(line)
    if totals["populations"]:
        print(
            f"{totals['populations']} populations train {totals['in_populations']} runs "
            "together (one process each)"
        )
    print(f"{totals['runs']} distinct runs in {len(rows)} rows at profile {args.profile}")
    return 0


def _print_commands(profile: str, only: list[int] | None, store) -> int:
    """One line per distinct run of the plan: the shell command that recomputes it
    (:mod:`smallinit.study.run_commands`); a tuned run whose learning rate the store cannot
    tell yet gets a comment line (``# ...``) saying why."""
    from smallinit.study.experiments import planned
    from smallinit.study.run_commands import command_of

    seen = set()
    for number, experiment, spec, _ in planned(profile, only):
        if spec.ident in seen:
            continue
        seen.add(spec.ident)
        try:
            line = command_of(spec, profile, store)
        except ConfigError as err:
            line = f"# fig {number} {experiment.name} {spec.kind}/{spec.key}: {err}"
        print(line)
    return 0


def _powers(profile: str, spread_file: Path) -> tuple[list[dict], str]:
    """Each claim's power at the profile's seeds (docs/science.md §13.2, 2), σ from a claims
    JSON (``smallinit claims --json``) when there is one."""
    import json

    from smallinit.study import power

    records: list | None = None
    if spread_file.is_file():
        try:
            records = json.loads(spread_file.read_text())
        except (OSError, ValueError) as err:
            raise ConfigError(f"--spread {spread_file}: not a claims JSON ({err})") from None
        if not isinstance(records, list) or not all(
            isinstance(r, dict) and "id" in r for r in records
        ):
            raise ConfigError(f"--spread {spread_file}: not a claims JSON (a list of records)")
    source = str(spread_file) if records is not None else f"nowhere ({spread_file} absent)"
    return power.table(profile, records), source


def _cmd_preflight(args: argparse.Namespace) -> int:
    import dataclasses
    import time

    from smallinit.study import preflight

    t0 = time.perf_counter()
    shown = None if args.json else (lambda check: print(check.line(), flush=True))
    checks = preflight.preflight(
        args.profile, args.only, max_items=args.preflight_items, on_check=shown
    )
    line = preflight.summary(checks, args.profile, time.perf_counter() - t0)
    if args.json:
        print_json(
            {
                "profile": args.profile,
                "checks": [dataclasses.asdict(c) for c in checks],
                "failed": sum(not c.ok for c in checks),
                "summary": line,
            },
            indent=1,
        )
    else:
        print(line)
    return 1 if any(not c.ok for c in checks) else 0


def _cmd_figs(args: argparse.Namespace) -> int:
    from smallinit.core import profiles

    # the arguments and the overlay are checked before the study (torch, jax) is imported
    if args.plan and args.preflight:
        raise ConfigError("figs --plan and --preflight: give one of them")
    if args.preflight_items is not None and not args.preflight:
        raise ConfigError("figs --preflight-items applies with --preflight only")
    if args.commands and not args.plan:
        raise ConfigError("figs --commands applies with --plan only")
    if args.commands and args.json:
        raise ConfigError("figs --plan --commands and --json: give one of them")
    base = args.profile
    args.profile = overlaid_profile(args, args.profile)
    if args.print_config and args.profile != base:
        from smallinit.study.experiments import planned

        planned(args.profile, args.only)  # the overlay's values checked, as --plan checks them
    if print_config(args, profiles.load(args.profile)):
        return 0
    if args.plan:
        return _cmd_plan(args)
    if args.preflight:
        return _cmd_preflight(args)
    from smallinit.core.store import RunStore
    from smallinit.llm.training.sinks import sink_environment
    from smallinit.study.experiments import of_figure
    from smallinit.study.figs import FIGURES, FigureFailed, default_out_dir, make_figures
    from smallinit.study.report import REPORT
    from smallinit.study.run_names import profile_names

    chosen = None if args.only is None else [e.name for n in args.only for e in of_figure(n)]
    with sink_environment(
        args.tensorboard, args.wandb, lambda: profile_names(args.profile, chosen)
    ):
        results = make_figures(
            only=args.only,
            profile=args.profile,
            out_dir=args.out,
            store=RunStore(args.runs_dir),
            force=args.force,
            workers=args.workers,
            executor=args.executor,
            population=args.population,
            population_exec=args.population_exec,
        )
    failed = 0
    for number, paths in results.items():
        label = f"fig {number:2d} {FIGURES[number]:<18}"
        if isinstance(paths, FigureFailed):
            failed += 1
            print(f"{label} {paths} (traceback in the log above)")
        elif not paths:
            print(f"{label} nothing drawn (its experiment has no runs at this profile)")
        else:
            print(f"{label} " + ", ".join(str(p) for p in paths))
    print(f"report page {(args.out or default_out_dir()) / REPORT} (open it in a browser)")
    return 1 if failed else 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "figs",
        help="render the paper figures (or list their runs with --plan)",
        description=(
            "Render the figures of docs/science.md §7 from the cached experiments (computing "
            "missing runs first). Figures whose experiment is not built yet are listed as such.\n"
            "The experiments' sizes come from --profile, with --config FILE and KEY=VALUE laid "
            "over it (dotted paths into its tables), e.g.\n"
            "  smallinit figs --only 7 llm-sweeps.plan.seeds=[0]"
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--only",
        type=_figure_numbers,
        default=None,
        metavar="N[,N...]",
        help="only these figure numbers (default: all)",
    )
    parser.add_argument(
        "--profile",
        type=profile_arg,
        default="quick",
        help="where the experiments' sizes start: quick (CPU minutes), full "
        "(GPU scale) or another packaged profile",
    )
    add_overlay_options(parser, "llm-sweeps.plan.seeds=[0] anchor.train.steps=200")
    parser.add_argument(
        "--out",
        type=dir_path,
        default=None,
        metavar="DIR",
        help="where the PNG/PDF files go (default: $SMALLINIT_FIGS_OUT, else "
        "paper_figs/out of the checkout, else ./paper_figs_out); the "
        "figure scripts themselves always come from the package",
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="list every run of the chosen figures (figure, experiment, kind, "
        "run key, config summary; for transformers parameters, tokens, "
        "training FLOPs, peak memory and H200 hours), the totals and "
        "each figure's estimated minutes beside the profile's budget "
        "(smallinit.study.budget), without computing anything",
    )
    parser.add_argument(
        "--commands",
        action="store_true",
        help="with --plan: print, instead of the listing, one shell command "
        "per distinct run that recomputes exactly that run (as `smallinit "
        "runs show KEY --command`)",
    )
    parser.add_argument(
        "--spread",
        type=path_arg,
        default=None,
        metavar="FILE",
        help="with --plan: the claims JSON (smallinit claims --json) whose "
        "per-seed spread gives each claim's power at the profile's "
        "seeds, docs/science.md §13.2 (default: the first of "
        "bench-results/claims/P.json and bench-results/claims/"
        "rules-13.1/P.json that exists, P the profile, then the "
        "profile it extends, and so on)",
    )
    parser.add_argument(
        "--preflight",
        action="store_true",
        help="check, on this machine and storing nothing, what would fail: "
        "every run's config (init table on the meta device, memory of "
        "its device; a GPU run on a machine without one against the "
        "planned H200), every corpus and anchor task built, and one "
        "optimizer step of each distinct configuration at a cut width "
        "through the trainer (exit 1 if anything fails)",
    )
    parser.add_argument(
        "--preflight-items",
        type=_item_count,
        default=None,
        metavar="N",
        help="with --preflight: build synthetic corpora at N training items "
        "at most, by the same rules (their held-out capacity is still "
        "checked at the profile's count)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="with --plan: print JSON ({profile, runs: [rows], total}); with "
        "--preflight: {profile, checks, failed, summary}",
    )
    parser.add_argument(
        "--population",
        choices=("auto", "on", "off"),
        default=None,
        help="train the missing runs of one shape together, one process per "
        "population (smallinit.llm.training.population): auto where "
        "that pays (runs on a CUDA device), on also on a CPU, off every "
        "run alone (default: $SMALLINIT_POPULATION, else auto); with "
        "--plan: which runs go together",
    )
    parser.add_argument(
        "--population-exec",
        choices=("eager", "compile", "cudagraphs"),
        default=None,
        help="how a population's training step runs: eager (op by op), "
        "compile (torch.compile of the members' batched forward and "
        "backward) or cudagraphs (compiled and replayed as CUDA graphs; "
        "CUDA only). Never part of a run's key (default: "
        "$SMALLINIT_POPULATION_EXEC, else eager)",
    )
    add_print_config_option(parser)
    add_executor_options(parser)
    add_run_options(parser)
    add_sink_options(parser)
    parser.set_defaults(func=_cmd_figs)
