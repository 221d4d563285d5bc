"""``smallinit llm sweep``: run one experiment of figs 7–11 (or all) through the run store.

``llm/cli.py`` calls :func:`register_sweep_commands` with its command subparsers.
"""

from __future__ import annotations

import argparse

from smallinit.cli.util import add_command, add_executor_options, add_run_options, profile_arg

DESCRIPTION = """\
Run the training runs of one LLM experiment at a profile (quick: tiny models on CPU, about
30 minutes for all five together on 2 cores; full: the GPU-scale version of the same
sweeps) and print one line per run. Finished runs are reused, killed ones resumed, and
experiments share runs, so `make figs` (figs 7–11) afterwards only draws.

Experiments (figure): gamma-sweep (7: γ grid × sizes + nanogpt/fixed:0.02 baselines),
eps-gating (8: RMSNorm ε standard/relaxed × gated attention off/on at γ = 0.5, 1, 2, traced
with saturation/sink/residual diagnostics), critical-init (9: γ grid × seeds at the smallest
size), condense-expand (10: traced γ = 0.5 and 1 runs of fig 8), token-gains (11: matched
γ = 0.5 / γ = 1 models per seed), all (the union)."""


def cmd_sweep(args: argparse.Namespace) -> int:
    from smallinit.jobs import run_jobs
    from smallinit.llm.experiments.sweeps import experiment_jobs, plan
    from smallinit.runs import RunStore

    jobs = experiment_jobs(args.experiment, args.profile)
    workers = args.workers or plan(args.profile).workers
    pairs = run_jobs(jobs, RunStore(args.runs_dir), force=args.force, workers=workers,
                     executor=args.executor, desc=args.experiment)
    failed = 0
    for job, run in pairs:
        label = " ".join(f"{k}={v}" for k, v in job.tags.items() if k in
                         ("size", "init", "seed", "eps_setting", "eps", "gated"))
        if not run.done:
            failed += 1
            print(f"{label}: {run.state} ({run.status().get('reason', '')})")
            continue
        s = run.summary
        print(f"{label}: val_loss {s['val_loss']:.4f} train_loss {s['train_loss']:.4f} "
              f"acc_reasoning {s.get('acc_reasoning', float('nan')):.3f} "
              f"acc_fact {s.get('acc_fact', float('nan')):.3f}  [{run.kind}/{run.key}]")
    print(f"{len(pairs) - failed} of {len(pairs)} runs finished"
          + (f", {failed} failed (reasons above; rerun to retry)" if failed else ""))
    return 1 if failed else 0


def register_sweep_commands(commands) -> None:
    """Add ``sweep`` to the ``llm`` group's command subparsers."""
    from smallinit.llm.experiments.names import FIGURE_OF

    p = add_command(commands, "sweep", cmd_sweep,
                    help="run an experiment of figs 7-11 (γ sweep, ε × gating, critical "
                         "init, condense-expand, token gains)", description=DESCRIPTION)
    p.add_argument("--experiment", required=True, choices=[*FIGURE_OF, "all"],
                   help="which experiment's runs to compute")
    p.add_argument("--profile", type=profile_arg, default="quick",
                   help="quick (CPU minutes, tiny models) or full (GPU scale)")
    add_executor_options(p)
    add_run_options(p)
