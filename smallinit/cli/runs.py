"""``smallinit runs ls | show``: the run store as a list of runs (:mod:`smallinit.core.results`)."""

from __future__ import annotations

import argparse

from smallinit.cli.util import (
    add_command,
    add_group,
    add_json_option,
    path_arg,
    print_json,
    run_arg,
    toml_text,
)

DESCRIPTION = """\
Every result lives in the run store (./runs, $SMALLINIT_RUNS or --runs-dir) as
<kind>/<key>/ with config.json, status.json, metrics.jsonl and arrays.npz; a finished run's
status.json holds the size and SHA-256 of each of its files. These commands read it (only
`verify` writes: the manifest of a run stored before manifests existed). From Python:
smallinit.load_run(KEY), smallinit.list_runs() and smallinit.verify_runs()."""


def _runs_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs-dir", type=path_arg, default=None, metavar="DIR",
                        help="run store root (default: $SMALLINIT_RUNS or ./runs)")


def _metrics_text(metrics: dict) -> str:
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in metrics.items())


def cmd_ls(args: argparse.Namespace) -> int:
    from smallinit.core.results import list_runs

    runs = list_runs(args.runs_dir, kind=args.kind)
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
    print(f"{len(runs)} runs" + (f", {corrupt} corrupt (`smallinit runs verify` for more)"
                                 if corrupt else ""))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from smallinit.core.results import load_run

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
    if run.summary:
        print("\n[summary]")
        for k, v in run.summary.items():
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
    print(f"{len(checked)} runs checked ({what}): {len(checked) - len(bad)} ok, {len(bad)} "
          f"corrupt" + (f"; manifests recorded for {recorded} older runs" if recorded else ""))
    if bad:
        print("asking for a corrupt run again (the command that made it, same config) "
              "recomputes it; its damaged folder is kept under .corrupt/ of the store")
    return 1 if bad else 0


def register(subparsers) -> None:
    commands = add_group(subparsers, "runs", help="list and inspect stored runs",
                         description=DESCRIPTION)
    p = add_command(commands, "ls", cmd_ls, help="list the stored runs",
                    description="One line per run: kind, key, state, when it was started, "
                    "its config in short and its main metrics (oldest first).")
    p.add_argument("--kind", default=None, metavar="K",
                   help="only runs of this kind (e.g. llm-train, toy-scan)")
    add_json_option(p, help="print one JSON record per run instead of the table")
    _runs_dir_option(p)
    p = add_command(commands, "show", cmd_show, help="show one run: config, state, metrics, "
                    "files", description="The full config (as TOML), state, summary, "
                    "metrics overview and files of one run.")
    p.add_argument("run", type=run_arg, metavar="KEY", help="a run key, a unique key prefix, "
                   "KIND/KEY or a run directory")
    add_json_option(p, help="print everything as one JSON object")
    _runs_dir_option(p)
    p = add_command(commands, "verify", cmd_verify, help="check that runs are what their keys "
                    "say", description="For every run (or the KEYs given): its config.json "
                    "hashes to its key, and a finished run's files match the manifest recorded "
                    "when it finished (size, then SHA-256). Prints the corrupt ones and a "
                    "count; exit status 1 when any is corrupt. A run stored before manifests "
                    "existed gets its manifest now.")
    p.add_argument("runs", nargs="*", metavar="KEY", help="run keys, unique key prefixes, "
                   "KIND/KEY or run directories (default: every run of the store)")
    p.add_argument("--quick", action="store_true", help="keys and file sizes only (no "
                   "hashing: one stat call per file)")
    add_json_option(p, help="print one JSON record per run: kind, key, state, ok, problem, "
                    "recorded")
    _runs_dir_option(p)
