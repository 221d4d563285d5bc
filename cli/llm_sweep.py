"""``smallinit llm sweep``: run one experiment of figs 7–11 (or all) through the run store.

:mod:`smallinit.cli.llm` calls :func:`register_sweep_commands` with its command subparsers.
"""

from __future__ import annotations

import argparse

from smallinit.cli.util import (
    add_command,
    add_executor_options,
    add_overlay_options,
    add_print_config_option,
    add_run_options,
    add_sink_options,
    overlaid_profile,
    print_config,
    profile_arg,
)

DESCRIPTION = """\
Compute the runs of one experiment of the study at a profile (quick: tiny models on CPU;
full: the GPU-scale version of the same experiments) and print one line per run. Finished
runs are reused, killed ones resumed, and experiments share runs, so `make figs` afterwards
only draws. The LLM experiments (figure): gamma-sweep (7: γ grid × sizes + baselines),
eps-gating (8: RMSNorm ε standard/relaxed × gated attention off/on), critical-init (9: γ
grid × seeds at the smallest size), condense-expand (10: fig 8's γ = 0.5 and 1 runs
followed over training), token-gains (11: matched γ = 0.5 / γ = 1 models per seed),
gain-scaling (12: the gain against size); `smallinit figs --plan` lists every experiment's
runs. --config FILE and KEY=VALUE are laid over the profile's tables, e.g.
  smallinit llm sweep --experiment gamma-sweep llm-sweeps.plan.seeds=[0]"""


def cmd_sweep(args: argparse.Namespace) -> int:
    from smallinit.core import profiles
    from smallinit.core.jobs import run_specs
    from smallinit.core.store import RunStore
    from smallinit.llm.training.cost import training_flops_of
    from smallinit.llm.training.sinks import sink_environment
    from smallinit.study import experiments
    from smallinit.study.run_names import profile_names

    experiment = experiments.get(args.experiment)
    args.profile = overlaid_profile(args, args.profile)
    if print_config(args, profiles.load(args.profile)):
        return 0
    specs = experiments.specs(args.experiment, args.profile)
    workers = args.workers or experiment.workers(args.profile)
    with sink_environment(
        args.tensorboard, args.wandb, lambda: profile_names(args.profile, [args.experiment])
    ):
        pairs = run_specs(
            specs,
            RunStore(args.runs_dir),
            force=args.force,
            workers=workers,
            executor=args.executor,
            desc=args.experiment,
            weigh=training_flops_of,
        )
    failed = 0
    for spec, run in pairs:
        label = " ".join(
            f"{k}={v}"
            for k, v in spec.tags.items()
            if k in ("size", "init", "seed", "eps_setting", "eps", "gated")
        )
        if not run.done:
            failed += 1
            print(f"{label}: {run.state} ({run.status().get('reason', '')})")
            continue
        s = run.summary
        print(
            f"{label}: val_loss {s['val_loss']:.4f} train_loss {s['train_loss']:.4f} "
            f"acc_reasoning {s.get('acc_reasoning', float('nan')):.3f} "
            f"acc_fact {s.get('acc_fact', float('nan')):.3f}  [{run.kind}/{run.key}]"
        )
    print(
        f"{len(pairs) - failed} of {len(pairs)} runs finished"
        + (f", {failed} failed (reasons above; rerun to retry)" if failed else "")
    )
    return 1 if failed else 0


def register_sweep_commands(commands) -> None:
    """Add ``sweep`` to the ``llm`` group's command subparsers."""
    p = add_command(
        commands,
        "sweep",
        cmd_sweep,
        help="compute the runs of one LLM experiment of figs 7-12",
        description=DESCRIPTION,
    )
    p.add_argument(
        "--experiment",
        required=True,
        metavar="NAME",
        help="which experiment's runs to compute (gamma-sweep, eps-gating, "
        "critical-init, condense-expand, token-gains, gain-scaling)",
    )
    p.add_argument(
        "--profile",
        type=profile_arg,
        default="quick",
        help="quick (CPU minutes, tiny models), full (GPU scale) or another packaged profile",
    )
    add_overlay_options(p, "llm-sweeps.plan.seeds=[0] llm-sweeps.base.train.steps=100")
    add_print_config_option(p)
    add_executor_options(p)
    add_run_options(p)
    add_sink_options(p)
