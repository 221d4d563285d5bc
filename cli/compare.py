"""``smallinit compare``: theory, two-layer simulation and transformer on the same axes.

The command builds a :class:`~smallinit.compare.comparison.CompareConfig` from a profile, the
options and ``KEY=VALUE`` overrides, runs it (:func:`smallinit.compare.run.run_compare`),
prints the table (:func:`smallinit.compare.table.format_table`) and where its CSV/JSON
files are, or with ``--json`` the records.
"""

from __future__ import annotations

import argparse

from smallinit.cli.util import (
    HelpFormatter,
    add_config_options,
    add_executor_options,
    add_print_key_option,
    add_sink_options,
    command_config,
    print_config,
    print_json,
    print_key,
)

DESCRIPTION = """\
For each γ: theory's phase-diagram point for the transformer's FFN blocks under
proportional widths (d_ff = r·d_model: (γ, γ') = (2γ, 0)), the predicted regime and S_w
interval; the two-layer ReLU net trained at that point (S_w over the toy widths, and its
condensation score); and a transformer trained with init gamma:<γ> at every width for a
fixed token budget, measured per layer with the toy's functions: RD of the FFN input
weights and of Q/K, their slope S_w = d ln RD / d ln d_ff, and the condensation score of
the FFN neurons (amplitude ‖W_down[:,k]‖·‖W_up[k,:]‖).

"agree" is yes when the FFN slope of every layer has the sign theory predicts (linear
< 0, condensed > 0, critical |S_w| <= critical_tol). Results: a run of kind 'compare' in
the run store, with table.csv, table.json and measurements.json.

Quick profile (CPU minutes on 2 cores): widths 32,64,128 — not 64..512, because one
training step at d_model = 512 takes ~1.4 s on one thread, so a few hundred steps for five
γ would take most of an hour; 2 layers, context 64, 240 steps of 16 sequences, GELU FFN
with d_ff = 4·d_model. Full profile (GPU): widths 128..1024, 4 layers, 5120 steps of 256.

Examples:
  smallinit compare
  smallinit compare gammas=0.5,1 widths=32,64,128,256 llm.train.steps=400
  smallinit compare --profile full --json > compare.json
"""


def build_config(args: argparse.Namespace):
    """The comparison config: the profile's, then ``--config FILE``, then the overrides
    (:data:`smallinit.cli.util.PRECEDENCE`)."""
    from smallinit.compare.comparison import CompareConfig, profile_config

    return command_config(args, CompareConfig, profile_config(args.profile))


def _cmd_compare(args: argparse.Namespace) -> int:
    from smallinit.compare.run import CompareSpec, llm_specs, run_compare
    from smallinit.compare.table import format_table
    from smallinit.core.store import RunStore
    from smallinit.llm.training.sinks import sink_environment
    from smallinit.study.run_names import spec_names

    cfg = build_config(args)
    if print_config(args, cfg) or print_key(args, CompareSpec(cfg)):
        return 0
    with sink_environment(
        args.tensorboard, args.wandb, lambda: spec_names(llm_specs(cfg), prefix="compare")
    ):
        result = run_compare(
            cfg,
            RunStore(args.runs_dir),
            force=args.force,
            workers=args.workers,
            executor=args.executor,
        )
    if args.json:
        print_json(result.records, sort_keys=True)
        return 0
    print(format_table(result.records))
    print(f"table: {result.table_csv}")
    print(f"       {result.table_json}")
    print(f"measurements: {result.run_path / 'measurements.json'}")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="toy-to-LLM comparison table: theory, two-layer net and transformer per γ",
        description=DESCRIPTION,
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the table's records as JSON instead of the text table",
    )
    add_executor_options(parser)
    add_config_options(
        parser,
        "the profile's [compare] table",
        "gammas=0.5,1 widths=32,64,128,256 llm.train.steps=400 toy_seeds=5",
    )
    add_print_key_option(parser)
    add_sink_options(parser)
    parser.set_defaults(func=_cmd_compare)
