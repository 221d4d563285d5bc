"""``smallinit llm ...``: transformer pretraining under the γ rule."""

from __future__ import annotations

import argparse

from smallinit.cli.llm_config import load_run_config
from smallinit.cli.llm_downstream import add_trust_option
from smallinit.cli.util import (
    add_command,
    add_config_options,
    add_group,
    add_json_option,
    add_print_key_option,
    add_sink_options,
    path_arg,
    positive_int,
    print_config,
    print_json,
    print_key,
    run_arg,
)


def _number(value, digits: int = 3) -> str:
    return "—" if not isinstance(value, int | float) or value != value else f"{value:.{digits}f}"


def results_table(summary: dict) -> str:
    """The main results of a pretraining run's summary, short: size, losses, then per
    reasoning task and level n, accuracy, the prompt-blind baseline and the answer loss,
    and memorized facts (``--json`` prints the whole summary)."""
    from smallinit.llm.analysis.reasoning import cells

    lines = []
    size = [
        f"{name} {summary[name]:,}"
        for name in ("params", "steps", "tokens")
        if isinstance(summary.get(name), int)
    ]
    if size:
        lines.append("  ".join(size))
    lines.append(
        f"loss      train {_number(summary.get('train_loss'))}   held-out "
        f"{_number(summary.get('val_loss'))}"
    )
    scored = cells(summary)
    if scored or "acc_fact" in summary:
        lines.append(
            f"{'task':<10}{'level':>5}{'n':>6}{'acc':>8}{'baseline':>10}{'answer loss':>13}"
        )
    for c in scored:
        lines.append(
            f"{c.task:<10}{c.difficulty:>5}{c.n:>6}{_number(c.acc):>8}"
            f"{_number(c.baseline):>10}{_number(c.answer_loss):>13}"
        )
    if "acc_fact" in summary:
        lines.append(
            f"{'fact':<10}{'':>5}{'':>6}{_number(summary['acc_fact']):>8}{'':>10}"
            f"{_number(summary.get('answer_loss_fact')):>13}"
        )
    if "acc_reasoning" in summary:
        lines.append(f"reasoning accuracy, pooled: {_number(summary['acc_reasoning'])}")
    return "\n".join(lines)


def cmd_train(args: argparse.Namespace) -> int:
    cfg = load_run_config(args)  # checked before torch is imported
    if print_config(args, cfg):
        return 0
    from smallinit.llm.training.sinks import chosen_sinks
    from smallinit.llm.training.train import Dist, train
    from smallinit.llm.training.train_spec import TrainSpec

    if print_key(args, TrainSpec(cfg)):
        return 0
    sinks = chosen_sinks(args.tensorboard, args.wandb)
    run = train(cfg, runs_dir=args.runs_dir, force=args.force, callbacks=sinks)
    if not Dist.from_env().main:
        return 0
    status = run.status()
    if args.json:
        print_json(
            {
                "run": str(run.path),
                "kind": run.kind,
                "key": run.key,
                "state": status["state"],
                "reason": status.get("reason"),
                "summary": status.get("summary", {}),
            },
            sort_keys=True,
        )
        return 1 if status["state"] == "failed" else 0
    if status["state"] == "failed":
        print(f"run {run.path} failed: {status.get('reason')}")
        return 1
    summary = status.get("summary", {})
    print(f"run {run.kind}/{run.key} ({status['state']}): {run.path}")
    print(results_table(summary))
    print(f"({len(summary)} summary entries: --json, or smallinit runs show {run.key[:8]})")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from smallinit.llm.training.trained import evaluate_run, resolve_run

    metrics = evaluate_run(
        resolve_run(args.run, args.runs_dir),
        n_items=args.items,
        n_windows=args.windows,
        trust_data=args.trust_run_data,
    )
    print_json(metrics, sort_keys=True)
    return 0


def cmd_init_table(args: argparse.Namespace) -> int:
    from smallinit.core.config import override

    cfg = load_run_config(args)  # checked before torch is imported
    if args.init is not None:
        cfg = override(cfg, {"init": args.init})
    if print_config(args, cfg):
        return 0
    from smallinit.llm.model.init import (
        applied_scheme,
        as_scheme,
        check_head,
        init_table,
        matrix_table,
    )
    from smallinit.llm.training.trained import build_for_table

    scheme = cfg.init
    model = build_for_table(cfg.model, args.model)
    specs = matrix_table(model)
    check_head(model, specs, as_scheme(scheme))  # refused, and warned of, as apply_init does
    applied_scheme(model, specs, as_scheme(scheme))
    rows = init_table(model, scheme)
    if args.json or args.format == "json":
        print_json(rows)
        return 0
    cols = ("name", "part", "shape", "d_in", "std", "gamma_eff")
    if args.format == "csv":
        print(",".join(cols))
        for r in rows:
            print(
                ",".join(
                    ["x".join(map(str, r["shape"])) if c == "shape" else str(r[c]) for c in cols]
                )
            )
        return 0
    print(
        f"init {scheme} on {args.model} (d_model={cfg.model.d_model}, "
        f"n_layers={cfg.model.n_layers}, d_ff={cfg.model.ffn_dim})"
    )
    width = max(len(r["name"]) for r in rows)
    print(f"{'matrix':<{width}}  {'part':<9}  {'shape':>11}  {'d_in':>5}  {'sigma':>9}  gamma_eff")
    for r in rows:
        shape = "x".join(map(str, r["shape"]))
        print(
            f"{r['name']:<{width}}  {r['part']:<9}  {shape:>11}  {r['d_in']:>5}  "
            f"{r['std']:>9.3g}  {r['gamma_eff']:.3f}"
        )
    return 0


def _config_args(parser: argparse.ArgumentParser) -> None:
    add_config_options(
        parser,
        "the defaults in code with the profile's [llm-train] table laid over them",
        "init=gamma:1.0 model.d_model=256 train.steps=1000",
        profile_default=None,
    )


def register(subparsers) -> None:
    commands = add_group(
        subparsers,
        "llm",
        help="transformer pretraining with the γ-initialization rule",
        description="Decoder-only transformers, init schemes, training and analysis "
        "(docs/science.md §1, §5, §6).",
    )
    p = add_command(
        commands,
        "train",
        cmd_train,
        help="train (or resume, or reuse) a language model",
        description="Train a decoder-only transformer on a corpus under an init scheme. "
        "A finished run with the same config is reused; a killed one resumes from its last "
        "checkpoint. Runs under torchrun too:\n"
        "  torchrun --nproc_per_node 2 -m smallinit llm train --profile quick",
    )
    _config_args(p)
    add_print_key_option(p)
    add_json_option(
        p,
        help="print one JSON object (run path, kind, key, state, the whole "
        "summary) instead of the run line and the table of main results",
    )
    add_sink_options(p)
    p = add_command(
        commands,
        "eval",
        cmd_eval,
        help="re-evaluate a trained run on its held-out split",
        description="Loss per category, greedy answer accuracy and per-token "
        "losses of a finished run (writes nothing; prints JSON).",
    )
    p.add_argument(
        "run",
        type=run_arg,
        metavar="RUN",
        help="llm-train/<key> or a unique key prefix under RUNS_DIR, or a run directory",
    )
    p.add_argument(
        "--items",
        type=positive_int,
        default=None,
        help="held-out items per category for answer accuracy (default: the "
        "run's eval.answer_items)",
    )
    p.add_argument(
        "--windows",
        type=positive_int,
        default=None,
        help="held-out context windows for the losses (default: the run's eval.token_windows)",
    )
    p.add_argument(
        "--runs-dir",
        type=path_arg,
        default=None,
        metavar="DIR",
        help="run store root (default: $SMALLINIT_RUNS or ./runs)",
    )
    add_trust_option(p)
    p = add_command(
        commands,
        "init-table",
        cmd_init_table,
        help="print every matrix's σ and effective γ under an init scheme",
        description="σ of every weight matrix (from smallinit.theory.init_rules) "
        "and its effective rate γ_eff = −ln σ / ln d_in (docs/science.md §1).",
    )
    add_config_options(
        p,
        "the defaults in code with the profile's [llm-train] table laid over them",
        "model.d_model=256",
        profile_default=None,
        store=False,
    )
    p.add_argument(
        "--init",
        default=None,
        metavar="SCHEME",
        help="init scheme (overrides the config's init), e.g. gamma:1.0, "
        "gamma:0.5,qk=1.0,depth, nanogpt, fixed:0.02, mitchell, mup:128",
    )
    p.add_argument(
        "--model",
        choices=("ours", "gpt2", "llama", "phi3"),
        default="ours",
        help="which model family to build from the config's sizes (gpt2, llama "
        "and phi3 need the transformers package)",
    )
    add_json_option(p, help="print the rows as JSON (same as --format json)")
    p.add_argument(
        "--format",
        choices=("text", "csv", "json"),
        default="text",
        help="output format (json: the same as --json)",
    )
    # commands of the other llm modules (anchor task, benchmarks, figure sweeps)
    from smallinit.cli.llm_anchor import register_anchor_commands
    from smallinit.cli.llm_coord import register_coord_commands
    from smallinit.cli.llm_downstream import register_downstream_commands
    from smallinit.cli.llm_export import register_export_command
    from smallinit.cli.llm_sample import register_sample_command
    from smallinit.cli.llm_sweep import register_sweep_commands

    register_anchor_commands(commands)
    register_downstream_commands(commands)
    register_export_command(commands)
    register_sample_command(commands)
    register_sweep_commands(commands)
    register_coord_commands(commands)
