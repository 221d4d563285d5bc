"""``smallinit runs ls | show``: the run store as a list of runs (:mod:`smallinit.core.results`)."""

from __future__ import annotations

import argparse

from smallinit.cli.util import (
    add_command,
    add_group,
    add_json_option,
    path_arg,
    print_json,
    profile_arg,
    run_arg,
    toml_text,
)

DESCRIPTION = """\
Every result lives in the run store (./runs, $SMALLINIT_RUNS or --runs-dir) as
<kind>/<key>/ with config.json, status.json, metrics.jsonl and arrays.npz; a finished run's
status.json holds the size and SHA-256 of each of its files. These commands read it (only
`verify` writes: the manifest of a run stored before manifests existed); `log` replays
stored runs into TensorBoard or W&B. From Python:
smallinit.load_run(KEY), smallinit.list_runs() and smallinit.verify_runs()."""


def _runs_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runs-dir",
        type=path_arg,
        default=None,
        metavar="DIR",
        help="run store root (default: $SMALLINIT_RUNS or ./runs)",
    )


def _metrics_text(metrics: dict) -> str:
    return " ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items()
    )


def chosen_runs(args: argparse.Namespace) -> list:
    """The runs of the store that the listing options choose (--kind, --profile, --where),
    in the --sort order (oldest first by default)."""
    from smallinit.core.results import list_runs
    from smallinit.core.run_table import parse_where, select
    from smallinit.study.run_names import profile_names

    where = parse_where(args.where)
    runs = list_runs(args.runs_dir, kind=args.kind)
    if args.profile:
        planned = profile_names(args.profile)
        runs = [r for r in runs if (r.kind, r.key) in planned]
    return select(runs, where, args.sort, args.reverse)


def cmd_ls(args: argparse.Namespace) -> int:
    runs = chosen_runs(args)
    if args.json:
        print_json([r.record() for r in runs])
        return 0
    if not runs:
        print("no runs")
        return 0
    width = max(len(r.kind) for r in runs)
    print(f"{'kind':<{width}}  {'key':<16}  {'state':<8}  {'created':<24}  config | metrics")
    for r in runs:
        metrics = _metrics_text(r.main_metrics())
        what = f"{r.config_summary(60)}" + (f" | {metrics}" if metrics else "")
        if r.state == "corrupt":
            what = r.reason or ""
        print(f"{r.kind:<{width}}  {r.key:<16}  {r.state:<8}  {r.created or '-':<24}  {what}")
    corrupt = sum(r.state == "corrupt" for r in runs)
    print(
        f"{len(runs)} runs"
        + (f", {corrupt} corrupt (`smallinit runs verify` for more)" if corrupt else "")
    )
    return 0


def cmd_export_csv(args: argparse.Namespace) -> int:
    import sys

    from smallinit.core.atomic import atomic_write_text
    from smallinit.core.run_table import write_csv

    runs = chosen_runs(args)
    if args.out is None:
        write_csv(runs, sys.stdout)
        return 0
    import io

    buffer = io.StringIO()
    columns = write_csv(runs, buffer)
    atomic_write_text(args.out, buffer.getvalue())
    print(f"{len(runs)} runs, {columns} columns -> {args.out}", file=sys.stderr)
    return 0


def _listing_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--kind",
        default=None,
        metavar="K",
        help="only runs of this kind (e.g. llm-train, toy-scan)",
    )
    p.add_argument(
        "--profile",
        type=profile_arg,
        default=None,
        metavar="P",
        help="only the runs of this profile's plan (`smallinit figs --plan "
        "--profile P`); a run does not record a profile, so a run two "
        "profiles share is listed under both",
    )
    p.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only runs whose config has this dotted key at this value, e.g. "
        "--where model.d_model=128 --where init=gamma:1.0 (repeatable; all "
        "must hold)",
    )
    p.add_argument(
        "--sort",
        default=None,
        metavar="FIELD",
        help="sort by kind, key, state, created, finished, a summary entry "
        "(val_loss) or a dotted config key (model.d_model); runs without it "
        "last (default: oldest first)",
    )
    p.add_argument("--reverse", action="store_true", help="with --sort: largest first")
    _runs_dir_option(p)


def cmd_show(args: argparse.Namespace) -> int:
    from smallinit.core.errors import ConfigError
    from smallinit.core.results import load_run

    if args.profile and not args.command:
        raise ConfigError("runs show --profile applies with --command only")
    if args.command:
        from smallinit.study.run_commands import command_for

        print(command_for(args.run, [args.profile] if args.profile else None, args.runs_dir))
        return 0
    run = load_run(args.run, runs_dir=args.runs_dir)
    info = run.describe()
    if args.json:
        print_json(info)
        return 0
    print(f"run {run.name} ({run.state}{': ' + run.reason if run.reason else ''})")
    print(f"path      {run.path}")
    print(f"version   {run.version or '-'}")
    print(f"created   {run.created or '-'}   finished {run.finished or '-'}")
    print("\n[config]")
    print(toml_text(run.config).rstrip() if run.config else "(none)")
    if run.listed_summary:
        print("\n[summary]")
        for k, v in run.listed_summary.items():
            print(f"{k} = {v:.6g}" if isinstance(v, float) else f"{k} = {v}")
    overview = info["metrics"]
    print("\n[metrics.jsonl]")
    if "error" in overview:
        print(overview["error"])
    else:
        print(f"{overview['records']} records; fields: {', '.join(overview['fields']) or '-'}")
    print("\n[files]")
    for f in info["files"]:
        print(f"{f['bytes']:>12,d}  {f['path']}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from smallinit.core.results import verify_runs

    checked = verify_runs(args.runs or None, runs_dir=args.runs_dir, hashes=not args.quick)
    bad = [c for c in checked if c.problem]
    if args.json:
        print_json([c.record() for c in checked])
        return 1 if bad else 0
    for c in bad:
        print(f"corrupt  {c.kind}/{c.key}: {c.problem}")
    recorded = sum(c.recorded for c in checked)
    what = "keys and sizes" if args.quick else "keys, sizes and SHA-256"
    print(
        f"{len(checked)} runs checked ({what}): {len(checked) - len(bad)} ok, {len(bad)} "
        f"corrupt" + (f"; manifests recorded for {recorded} older runs" if recorded else "")
    )
    if bad:
        print(
            "asking for a corrupt run again (the command that made it, same config) "
            "recomputes it; its damaged folder is kept under .corrupt/ of the store"
        )
    return 1 if bad else 0


def cmd_log(args: argparse.Namespace) -> int:
    from smallinit.core.errors import ConfigError
    from smallinit.core.results import load_run
    from smallinit.llm.training.replay import replay
    from smallinit.llm.training.sinks import TensorBoard, WandB, final_evaluation
    from smallinit.study.run_names import profile_names

    if args.tensorboard is None and args.wandb is None:
        raise ConfigError("runs log needs a sink: give --tensorboard DIR, --wandb PROJECT or both")
    runs = [load_run(ref, runs_dir=args.runs_dir) for ref in args.runs]
    sinks = ([TensorBoard(args.tensorboard)] if args.tensorboard is not None else []) + (
        [WandB(args.wandb)] if args.wandb is not None else []
    )
    names = profile_names(args.profile) if args.profile else {}
    where = ", ".join(f"{s.label} {s.target}" for s in sinks)
    for run in runs:
        name = names.get((run.kind, run.key))
        records = replay(run, sinks, name=name)
        shown = sinks[0].log_dir if isinstance(sinks[0], TensorBoard) else name or run.name
        print(
            f"{run.name} ({run.state}): {records} records, "
            f"{len(final_evaluation(run.summary))} final numbers -> {where} ({shown})"
        )
    return 0


def register(subparsers) -> None:
    commands = add_group(
        subparsers, "runs", help="list and inspect stored runs", description=DESCRIPTION
    )
    p = add_command(
        commands,
        "ls",
        cmd_ls,
        help="list the stored runs",
        description="One line per run: kind, key, state, when it was started, "
        "its config in short and its main metrics (oldest first).",
    )
    add_json_option(p, help="print one JSON record per run instead of the table")
    _listing_options(p)
    p = add_command(
        commands,
        "export-csv",
        cmd_export_csv,
        help="the runs as one flat CSV table",
        description="One row per run: kind, key, state, created, "
        "finished, version, then a config.<dotted key> column per config field and "
        "a summary.<entry> column per summary entry (lists as JSON text, a missing "
        "value empty): pandas.read_csv reads it with numbers as numbers. The "
        "options of `runs ls` choose and sort the runs.",
    )
    p.add_argument(
        "--out",
        type=path_arg,
        default=None,
        metavar="FILE",
        help="write the table to FILE (default: standard output)",
    )
    _listing_options(p)
    p = add_command(
        commands,
        "show",
        cmd_show,
        help="show one run: config, state, metrics, files",
        description="The full config (as TOML), state, summary, "
        "metrics overview and files of one run; with --command, the shell command that "
        "recomputes it.",
    )
    p.add_argument(
        "run",
        type=run_arg,
        metavar="KEY",
        help="a run key, a unique key prefix, KIND/KEY or a run directory",
    )
    add_json_option(p, help="print everything as one JSON object")
    p.add_argument(
        "--command",
        action="store_true",
        help="print one shell command that recomputes exactly this run (the same "
        "key): smallinit <command> --profile P KEY=VALUE..., for a run of any "
        "profile's plan (`smallinit figs --plan`; the run need not be in the "
        "store) or of the store; add --print-key to the command to check the "
        "key without running",
    )
    p.add_argument(
        "--profile",
        type=profile_arg,
        default=None,
        metavar="P",
        help="with --command: look the key up in this profile's plan only "
        "(default: every profile's, quick first, then the store)",
    )
    _runs_dir_option(p)
    p = add_command(
        commands,
        "verify",
        cmd_verify,
        help="check that runs are what their keys say",
        description="For every run (or the KEYs given): its config.json "
        "hashes to its key, and a finished run's files match the manifest recorded "
        "when it finished (size, then SHA-256). Prints the corrupt ones and a "
        "count; exit status 1 when any is corrupt. A run stored before manifests "
        "existed gets its manifest now.",
    )
    p.add_argument(
        "runs",
        nargs="*",
        metavar="KEY",
        help="run keys, unique key prefixes, "
        "KIND/KEY or run directories (default: every run of the store)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="keys and file sizes only (no hashing: one stat call per file)",
    )
    add_json_option(
        p, help="print one JSON record per run: kind, key, state, ok, problem, recorded"
    )
    _runs_dir_option(p)
    p = add_command(
        commands,
        "log",
        cmd_log,
        help="replay stored runs into TensorBoard or W&B",
        description="Writes each run's config (as hyperparameters), every "
        "record of its metrics.jsonl at its step and its final evaluation into "
        "the sinks, as `llm train --tensorboard/--wandb` would have while it "
        "trained: for a run reused from the store, computed on another machine "
        "or whose sink failed. Runs are named by their config (e.g. "
        "llm-train/γ0.5/synthetic/d16/L1/lr0.003/seed0), or with --profile by the "
        "profile's plan (quick/fig7/d128/γ1/seed3); the key is a tag. Logging a "
        "run to TensorBoard again replaces what it logged before.",
    )
    p.add_argument(
        "runs",
        nargs="+",
        metavar="KEY",
        help="run keys, unique key prefixes, KIND/KEY or run directories",
    )
    p.add_argument(
        "--tensorboard",
        type=path_arg,
        default=None,
        metavar="DIR",
        help="TensorBoard folder: each run in DIR/<name>/<key>",
    )
    p.add_argument(
        "--wandb",
        default=None,
        metavar="PROJECT",
        help="W&B project (W&B's own settings apply, e.g. WANDB_MODE=offline)",
    )
    p.add_argument(
        "--profile",
        type=profile_arg,
        default=None,
        metavar="P",
        help="name the runs by this profile's plan (its figures and tags)",
    )
    _runs_dir_option(p)
