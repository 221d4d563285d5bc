"""``smallinit llm anchor`` and ``smallinit llm anchor-scan``: the anchor task (docs/science.md §6).

``llm/cli.py`` calls :func:`register_anchor_commands` with its command subparsers.
"""

from __future__ import annotations

import argparse

from smallinit.cli.util import (
    add_command,
    add_executor_options,
    add_json_option,
    add_print_config_option,
    add_run_options,
    finite_float,
    float_list,
    path_arg,
    positive_int_list,
    print_config,
    print_json,
    profile_arg,
)

DESCRIPTION_ONE = """\
Train the transformer on the anchor-function composite task (Zhang et al., NeurIPS 2024,
arXiv 2405.05409; docs/science.md §6) and classify its answers on the unseen pair (4, 3):
inferential (x − 10, composing the single maps), symmetric (x − 6, copying the seen
exception (3, 4)) or other. Seen-pair accuracy is reported on the training samples and on
the residue-held-out (x, position) combinations. One run per (γ, depth) combination given;
finished runs are reused from the run store."""

DESCRIPTION_SCAN = """\
The phase diagram of fig 6: train every cell of the (γ, depth) grid at the base weight
decay and of the (γ, weight decay) grid at one depth, then print the inferential and
symmetric shares and the seen-pair accuracies per cell. The grid comes from the profile's
[scan] table; override it with scan.KEY=VALUE (e.g. scan.gammas=0.5,1.0) or the options."""


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", type=profile_arg, default="quick",
                        help="packaged config: quick (CPU minutes) or full (published scale)")
    parser.add_argument("--config", type=path_arg, default=None, metavar="FILE",
                        help="a TOML config file instead of the packaged profile")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="config overrides, e.g. train.steps=2000 model.d_model=128 "
                             "task.n_train=20000 (scan.KEY=VALUE for the grid)")
    add_print_config_option(parser)
    add_run_options(parser)


def _load(args: argparse.Namespace):
    from smallinit.llm.experiments.anchor import load_profile

    return load_profile(args.config or args.profile, args.overrides)


def _print_cells(args: argparse.Namespace, base, cell_config) -> bool:
    """``--print-config``: the one cell's config, or every cell as a ``[[run]]`` table."""
    if not args.print_config:
        return False
    from smallinit.config import config_to_dict

    cells = [cell_config(base, gamma=g, layers=n, weight_decay=args.weight_decay,
                         seed=args.seed)
             for g in args.gamma or [None] for n in args.layers or [None]]
    return print_config(args, cells[0] if len(cells) == 1 else
                        {"run": [config_to_dict(c) for c in cells]})


def cmd_anchor(args: argparse.Namespace) -> int:
    from smallinit.llm.experiments.anchor import cell_config, init_gamma, run_anchor
    from smallinit.runs import RunStore

    base, _ = _load(args)
    if _print_cells(args, base, cell_config):
        return 0
    store = RunStore(args.runs_dir)
    gammas = args.gamma or [None]
    layers = args.layers or [None]
    failed = 0
    for gamma in gammas:
        for n_layers in layers:
            cfg = cell_config(base, gamma=gamma, layers=n_layers,
                              weight_decay=args.weight_decay, seed=args.seed)
            run = run_anchor(cfg, store, force=args.force)
            label = (f"{cfg.init} layers={cfg.model.n_layers} "
                     f"weight_decay={cfg.train.weight_decay:g} seed={cfg.seed}")
            if not run.done:
                failed += 1
                print(f"{label}: failed: {run.status().get('reason')}")
                continue
            s = run.summary
            print(f"{label}: seen pairs {s['acc_seen_train']:.3f} (train) "
                  f"{s['acc_seen_test']:.3f} (held-out x/position) | (4,3): inferential "
                  f"{s['share_inferential']:.3f} symmetric {s['share_symmetric']:.3f} other "
                  f"{s['share_other']:.3f} | W_Q condensation {s['wq_condensation']:.3f}"
                  + ("" if init_gamma(cfg.init) is not None else " (not a plain γ scheme)"))
            print(f"  run {run.path}")
    return 1 if failed else 0


def cmd_anchor_scan(args: argparse.Namespace) -> int:
    from smallinit.llm.experiments.anchor import format_table, run_scan, scan_table
    from smallinit.runs import RunStore

    extra = []
    if args.gammas:
        extra.append("scan.gammas=[" + ",".join(f"{g:g}" for g in args.gammas) + "]")
    if args.layers:
        extra.append("scan.layers=[" + ",".join(str(n) for n in args.layers) + "]")
    if args.weight_decays:
        extra.append("scan.weight_decays=[" + ",".join(f"{w:g}" for w in args.weight_decays)
                     + "]")
    args.overrides = list(args.overrides) + extra
    base, scan = _load(args)
    if print_config(args, base, scan=scan):
        return 0
    results = run_scan(base, scan, RunStore(args.runs_dir), force=args.force,
                       workers=args.workers, executor=args.executor)
    rows = scan_table(results)
    if args.json:
        print_json(rows)
    else:
        print(format_table(rows))
    return 1 if any(r["failed"] for r in rows) else 0


def register_anchor_commands(commands) -> None:
    """Add ``anchor`` and ``anchor-scan`` to the ``llm`` group's command subparsers."""
    p = add_command(commands, "anchor", cmd_anchor,
                    help="train on the anchor task and classify the unseen pair "
                     "(docs/science.md §6)",
                    description=DESCRIPTION_ONE)
    p.add_argument("--gamma", type=float_list, default=None, metavar="G[,G...]",
                   help="initialization rate(s) γ (σ = d_in^-γ); unset: the config's init")
    p.add_argument("--layers", type=positive_int_list, default=None, metavar="N[,N...]",
                   help="transformer depth(s); unset: the config's model.n_layers")
    p.add_argument("--weight-decay", type=finite_float, default=None, metavar="LAMBDA",
                   help="AdamW weight decay λ; unset: the config's train.weight_decay")
    p.add_argument("--seed", type=int, default=None,
                   help="init and batch-order seed; unset: the config's seed")
    _common(p)
    s = add_command(commands, "anchor-scan", cmd_anchor_scan,
                    help="phase diagram over (γ, depth) and (γ, weight decay) (fig 6)",
                    description=DESCRIPTION_SCAN)
    s.add_argument("--gammas", type=float_list, default=None, metavar="G[,G...]",
                   help="γ values of the grid; unset: the profile's scan.gammas")
    s.add_argument("--layers", type=positive_int_list, default=None, metavar="N[,N...]",
                   help="depths of the (γ, depth) panel; unset: the profile's scan.layers")
    s.add_argument("--weight-decays", type=float_list, default=None, metavar="L[,L...]",
                   help="weight decays of the (γ, λ) panel; unset: scan.weight_decays")
    add_executor_options(s)
    add_json_option(s, help="print the per-cell table as JSON instead of the text table")
    _common(s)
