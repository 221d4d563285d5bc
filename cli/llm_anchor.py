"""``smallinit llm anchor`` and ``smallinit llm anchor-scan``: the anchor task (docs/science.md §6).

:mod:`smallinit.cli.llm` calls :func:`register_anchor_commands` with its command subparsers.
"""

from __future__ import annotations

import argparse

from smallinit.cli.util import (
    add_command,
    add_config_options,
    add_executor_options,
    add_json_option,
    add_print_key_option,
    add_sink_options,
    print_config,
    print_json,
    print_key,
)
from smallinit.core.errors import ConfigError

DESCRIPTION_ONE = """\
Train the transformer on the anchor-function composite task (Zhang et al., NeurIPS 2024,
arXiv 2405.05409; docs/science.md §6) and classify its answers on the unseen pair (4, 3):
inferential (x − 10, composing the single maps), symmetric (x − 6, copying the seen
exception (3, 4)) or other. Seen-pair accuracy is reported on the training samples and on
the residue-held-out (x, position) combinations. One run, the profile's [anchor] config with
the overrides (e.g. init=gamma:1 model.n_layers=3 train.weight_decay=0.1 seed=2); a
finished run is reused from the run store."""

DESCRIPTION_SCAN = """\
The phase diagram of fig 6: train every cell of the (γ, depth) grid at the base weight
decay and of the (γ, weight decay) grid at one depth, then print the inferential and
symmetric shares and the seen-pair accuracies per cell. The grid is the profile's
[anchor.scan] table, part of the same config tree: override it with scan.KEY=VALUE (e.g.
scan.gammas=0.5,1 scan.layers=2,3), the cells' run config with KEY=VALUE."""


def _common(parser: argparse.ArgumentParser) -> None:
    add_config_options(
        parser,
        "the profile's [anchor] table",
        "init=gamma:1 train.steps=2000 model.d_model=128 (scan.KEY=VALUE for the grid)",
    )
    add_sink_options(parser)


def _load(args: argparse.Namespace):
    from smallinit.study.experiments.anchor_scan import load

    return load(args.profile, args.overrides, file=args.config)


def cmd_anchor(args: argparse.Namespace) -> int:
    from smallinit.core.store import RunStore
    from smallinit.llm.training.anchor import AnchorSpec, run_anchor
    from smallinit.llm.training.sinks import sink_environment
    from smallinit.study.experiments.anchor_scan import init_gamma

    cfg, _ = _load(args)
    if print_config(args, cfg) or print_key(args, AnchorSpec(cfg)):
        return 0
    with sink_environment(args.tensorboard, args.wandb):
        run = run_anchor(cfg, RunStore(args.runs_dir), force=args.force)
    label = (
        f"{cfg.init} layers={cfg.model.n_layers} "
        f"weight_decay={cfg.train.weight_decay:g} seed={cfg.seed}"
    )
    if not run.done:
        print(f"{label}: failed: {run.status().get('reason')}")
        return 1
    s = run.summary
    print(
        f"{label}: seen pairs {s['acc_seen_train']:.3f} (train) "
        f"{s['acc_seen_test']:.3f} (held-out x/position) | (4,3): inferential "
        f"{s['share_inferential']:.3f} symmetric {s['share_symmetric']:.3f} other "
        f"{s['share_other']:.3f} | W_Q condensation {s['wq_condensation']:.3f}"
        + ("" if init_gamma(cfg.init) is not None else " (not a plain γ scheme)")
    )
    print(f"  run {run.path}")
    return 0


def cmd_anchor_scan(args: argparse.Namespace) -> int:
    from smallinit.core.jobs import run_specs
    from smallinit.core.store import RunStore
    from smallinit.llm.training.cost import training_flops_of
    from smallinit.llm.training.sinks import sink_environment
    from smallinit.study.experiments.anchor_scan import cell_specs, format_table, scan_table
    from smallinit.study.run_names import spec_names

    base, scan = _load(args)
    if print_config(args, base, scan=scan):
        return 0
    if not scan.seeds:
        raise ConfigError(
            "scan.seeds=[] names no seed; the scan needs at least one (an "
            "empty list only cuts the anchor task from a profile's figures)"
        )
    cells = cell_specs(base, scan)
    with sink_environment(
        args.tensorboard, args.wandb, lambda: spec_names(cells, prefix="anchor-scan")
    ):
        results = run_specs(
            cells,
            RunStore(args.runs_dir),
            force=args.force,
            workers=args.workers,
            executor=args.executor,
            desc="anchor scan",
            weigh=training_flops_of,
        )
    rows = scan_table(results)
    if args.json:
        print_json(rows)
    else:
        print(format_table(rows))
    return 1 if any(r["failed"] for r in rows) else 0


def register_anchor_commands(commands) -> None:
    """Add ``anchor`` and ``anchor-scan`` to the ``llm`` group's command subparsers."""
    p = add_command(
        commands,
        "anchor",
        cmd_anchor,
        help="train on the anchor task and classify the unseen pair (docs/science.md §6)",
        description=DESCRIPTION_ONE,
    )
    _common(p)
    add_print_key_option(p)
    s = add_command(
        commands,
        "anchor-scan",
        cmd_anchor_scan,
        help="phase diagram over (γ, depth) and (γ, weight decay) (fig 6)",
        description=DESCRIPTION_SCAN,
    )
    add_executor_options(s)
    add_json_option(s, help="print the per-cell table as JSON instead of the text table")
    _common(s)
