"""``smallinit toy ...``: two-layer simulations."""

from __future__ import annotations

import json

from smallinit.cliutil import (
    add_command,
    add_group,
    add_run_options,
    float_list,
    positive_int,
    positive_int_list,
    profile_arg,
)


def _scan_config(args):
    from smallinit.config import replace_config
    from smallinit.toy.scan import profile_config

    cfg = profile_config(args.profile)
    changes = {}
    for name in ("gammas", "gamma_primes", "widths", "seeds", "max_steps", "tol"):
        value = getattr(args, name)
        if value is not None:
            changes[name] = value
    return replace_config(cfg, **changes) if changes else cfg


def _cmd_scan(args) -> int:
    from smallinit.runs import RunStore
    from smallinit.toy.scan import format_table, run_scan

    result = run_scan(_scan_config(args), RunStore(args.runs_dir), force=args.force)
    if args.json:
        keys = ("gamma", "gamma_prime", "S_w", "regime", "agree", "delta", "interval",
                "in_interval", "failed_networks")
        print(json.dumps([{k: r[k] for k in keys} for r in result.records], indent=1))
    else:
        print(format_table(result.records))
        print(f"stored in {result.run_path}")
    return 0


def register(subparsers) -> None:
    commands = add_group(
        subparsers,
        "toy",
        help="two-layer simulations: phase scan, condensation, lazy vs rich",
        description="Two-layer network simulations in JAX (SPEC §2-§4).",
    )
    p = add_command(
        commands, "scan", _cmd_scan,
        help="RD slope S_w over a (γ, γ') grid against theory's regimes",
        description=(
            "Train ReLU two-layer nets (SPEC §2: 4 points, y = x², ASI, β1 = 1, β2 = m^γ', "
            "α = β2 m^γ) at every grid point, width and seed until the loss is below tol; fit "
            "S_w = d ln RD / d ln m (median over seeds) and compare with theory's regime and "
            "slope interval point by point. Results are cached in the run store."
        ),
    )
    p.add_argument("--profile", type=profile_arg, default="quick",
                   help="defaults for the grid: quick (7x7 grid, widths 250-1000, 3 seeds) "
                        "or full (17x17 grid, widths 250-8000, 5 seeds)")
    p.add_argument("--gammas", type=float_list, default=None, metavar="G[,G...]",
                   help="γ values (comma-separated; default from the profile)")
    p.add_argument("--gamma-primes", dest="gamma_primes", type=float_list, default=None,
                   metavar="G[,G...]", help="γ' values (comma-separated; default from the profile)")
    p.add_argument("--widths", type=positive_int_list, default=None, metavar="M[,M...]",
                   help="even widths m, at least two (default from the profile)")
    p.add_argument("--seeds", type=positive_int, default=None,
                   help="number of seeds per point (default from the profile)")
    p.add_argument("--max-steps", dest="max_steps", type=positive_int, default=None,
                   help="step budget per network (default from the profile)")
    p.add_argument("--tol", type=float, default=None,
                   help="loss tolerance that defines t* (default 1e-6, SPEC §2)")
    p.add_argument("--json", action="store_true",
                   help="print the per-point records as JSON instead of the table")
    add_run_options(p)
