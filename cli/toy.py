"""``smallinit toy ...``: two-layer simulations."""

from __future__ import annotations

from smallinit.cli.util import (
    add_command,
    add_config_options,
    add_group,
    add_json_option,
    add_print_key_option,
    command_config,
    print_config,
    print_json,
    print_key,
)


def _config(args, cls, profile_base):
    """A toy command's config: the profile's (``profile_base(profile)``: the class defaults
    with the profile's table laid over them), then ``--config FILE``, then the
    ``key=value`` overrides (:data:`smallinit.cli.util.PRECEDENCE`)."""
    return command_config(args, cls, profile_base(args.profile))


def _scan_config(args):
    from smallinit.toy.scan import ScanConfig, from_profile

    return _config(args, ScanConfig, from_profile)


def _cmd_scan(args) -> int:
    from smallinit.core.store import RunStore
    from smallinit.toy.scan import ScanSpec, format_table, run_scan

    cfg = _scan_config(args)
    if print_config(args, cfg) or print_key(args, ScanSpec(cfg), engine=args.engine):
        return 0
    result = run_scan(cfg, RunStore(args.runs_dir), force=args.force, engine=args.engine)
    if args.json:
        keys = (
            "gamma",
            "gamma_prime",
            "S_w",
            "regime",
            "agree",
            "delta",
            "interval",
            "in_interval",
            "failed_networks",
        )
        print_json([{k: r[k] for k in keys} for r in result.records])
    else:
        print(format_table(result.records))
        print(f"stored in {result.run_path}")
    return 0


def _cmd_condense(args) -> int:
    from smallinit.core.store import RunStore
    from smallinit.toy import condense
    from smallinit.toy.twolayer import STATUS

    cfg = _config(args, condense.CondenseConfig, condense.from_profile)
    if print_config(args, cfg) or print_key(args, condense.CondenseSpec(cfg)):
        return 0
    r = condense.run(cfg, RunStore(args.runs_dir), force=args.force)
    rows = []
    for i, g in enumerate(cfg.gammas):
        for j, gp in enumerate(cfg.gamma_primes):
            rows.append(
                {
                    "gamma": g,
                    "gamma_prime": gp,
                    "score": float(r["score"][i, j]),
                    "clusters": int(r["clusters"][i, j]),
                    "mean_abs_cos": float(r["mean_abs_cos"][i, j]),
                    "status": STATUS[int(r["status"][i, j])],
                }
            )
    if args.json:
        print_json({"init_score": r["init_score"], "points": rows})
        return 0
    print(f"{'gamma':>6} {'gamma_p':>7} {'score':>6} {'clusters':>8} {'mean|cos|':>9} status")
    for row in rows:
        print(
            f"{row['gamma']:6.2f} {row['gamma_prime']:7.2f} {row['score']:6.3f} "
            f"{row['clusters']:8d} {row['mean_abs_cos']:9.3f} {row['status']}"
        )
    print(f"score at init (isotropic baseline): {r['init_score']:.3f}")
    return 0


def _cmd_initial_condensation(args) -> int:
    from smallinit.core.store import RunStore
    from smallinit.toy import initial_condensation as ic

    cfg = _config(args, ic.InitialCondensationConfig, ic.from_profile)
    if print_config(args, cfg) or print_key(args, ic.InitialCondensationSpec(cfg)):
        return 0
    r = ic.run(cfg, RunStore(args.runs_dir), force=args.force)
    summary = {k: v for k, v in r.items() if not hasattr(v, "shape")}
    if args.json:
        print_json(summary)
        return 0
    print(
        f"{cfg.activation} (p = {summary['p']}, at most {summary['max_orientations']} "
        f"orientations): {summary['clusters']} clusters ({summary['lines']} lines), "
        f"{summary['clusters_at_init']} at init; mean |cos| {summary['mean_abs_cos']:.3f} "
        f"(init {summary['mean_abs_cos_init']:.3f}); loss {summary['loss_first']:.4g} -> "
        f"{summary['loss_last']:.4g}"
        + (
            f"; median |cos| to theory's direction {summary['median_abs_cos_to_theory']:.3f}"
            if "median_abs_cos_to_theory" in summary
            else ""
        )
    )
    return 0


def _cmd_diagonal(args) -> int:
    from smallinit.core.store import RunStore
    from smallinit.toy import diagonal

    cfg = _config(args, diagonal.DiagonalConfig, lambda profile: diagonal.from_profile(profile)[0])
    if print_config(args, cfg) or print_key(args, diagonal.DiagonalSpec(cfg)):
        return 0
    r = diagonal.run(cfg, RunStore(args.runs_dir), force=args.force)
    rows = [
        {
            "alpha": float(a),
            "rel_err": float(r["rel_err"][i]),
            "dist_l1": float(r["dist_l1"][i]),
            "dist_l2": float(r["dist_l2"][i]),
            "steps": int(r["steps"][i]),
        }
        for i, a in enumerate(r["alphas"])
    ]
    if args.json:
        print_json({"depth": cfg.depth, "rows": rows})
        return 0
    print(f"depth {cfg.depth}: gradient descent from w = alpha vs theory's argmin Q_alpha")
    print(f"{'alpha':>8} {'rel_err':>9} {'to_l1':>7} {'to_l2':>7} {'steps':>7}")
    for row in rows:
        print(
            f"{row['alpha']:8.3g} {row['rel_err']:9.2e} {row['dist_l1']:7.3f} "
            f"{row['dist_l2']:7.3f} {row['steps']:7d}"
        )
    return 0


def _cmd_escape(args) -> int:
    from smallinit.core.store import RunStore
    from smallinit.toy import escape

    cfg = _config(args, escape.EscapeConfig, lambda profile: escape.EscapeConfig())
    if print_config(args, cfg):
        return 0
    r = escape.run(cfg, RunStore(args.runs_dir), force=args.force)
    if args.json:
        print_json(
            {
                "summary": r["summary"],
                "rows": [
                    {
                        "L": L,
                        "eps": float(e),
                        "T": float(t),
                        "T_minus_ref": float(a),
                        "theory_minus_ref": float(b),
                    }
                    for L in cfg.orders
                    for e, t, a, b in zip(
                        r[f"eps_{L}"],
                        r[f"T_{L}"],
                        r[f"T_rel_{L}"],
                        r[f"T_theory_rel_{L}"],
                        strict=True,
                    )
                ],
            }
        )
    else:
        print(escape.format_table(r, cfg))
    return 0


def register(subparsers) -> None:
    commands = add_group(
        subparsers,
        "toy",
        help="two-layer simulations: phase scan, condensation, lazy vs rich",
        description="Two-layer network simulations in JAX (docs/science.md §2-§4).",
    )
    p = add_command(
        commands,
        "scan",
        _cmd_scan,
        help="RD slope S_w over a (γ, γ') grid against theory's regimes",
        description=(
            "Train ReLU two-layer nets (docs/science.md §2: 4 points, y = x², ASI, β1 = 1, β2 = "
            "m^γ', α = β2 m^γ) at every grid point, width and seed until the loss is below tol; "
            "fit S_w = d ln RD / d ln m (median over seeds) and compare with theory's regime and "
            "slope interval point by point. Results are cached in the run store."
        ),
    )
    add_config_options(
        p, "the profile's [toy-scan] table", "gammas=0.5,1,1.75 widths=250,500 seeds=3"
    )
    add_print_key_option(p)
    p.add_argument(
        "--engine",
        choices=("auto", "jax", "grouped"),
        default=None,
        help="jax (compiled JAX loops, one call per width) or grouped (all "
        "widths in one ragged batch through the kernels' grouped two-layer "
        "step; slower on CPU); auto (default, else $SMALLINIT_TOY_ENGINE): "
        "grouped when the kernels' backend is cupy (a CUDA device) and the "
        "activation is ReLU, else jax. Same algorithm, same S_w to rounding; "
        "stored as a separate run",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the per-point records as JSON instead of the table",
    )

    p = add_command(
        commands,
        "condense",
        _cmd_condense,
        help="condensation score and cluster count over a (γ, γ') grid",
        description=(
            "Train one ReLU net per grid point (docs/science.md §2 setting) to the loss "
            "tolerance and measure how its amplitude gathers on few orientations: condensation "
            "score (share of amplitude in the 4 heaviest orientation clusters), cluster count and "
            "mean |cosine| of the input weights."
        ),
    )
    add_config_options(p, "the profile's [condense] table", "gammas=0.5,1 width=500")
    add_print_key_option(p)
    add_json_option(p)

    p = add_command(
        commands,
        "initial-condensation",
        _cmd_initial_condensation,
        help="early condensation of a small-init two-layer net, one activation (fig 3)",
        description=(
            "Train the two-layer net of docs/science.md §3 (Zhou et al. 2022) from a small "
            "init a few Adam steps and count the orientations its input weights gather on "
            "(at most 2p for an activation of multiplicity p); one activation per run."
        ),
    )
    add_config_options(
        p,
        "the profile's [initial-condensation] table at its first activation",
        "activation=xtanh steps=200",
    )
    add_print_key_option(p)
    add_json_option(p)

    p = add_command(
        commands,
        "diagonal",
        _cmd_diagonal,
        help="diagonal linear net across init scale α against theory's argmin Q_α",
        description=(
            "Train β = w+^D − w-^D from w = α (docs/science.md §4, Woodworth et al. 2020) on "
            "theory's planted sparse problem and report the relative error to argmin Q_α and the "
            "distances to the minimum-ℓ1 and minimum-ℓ2 interpolants."
        ),
    )
    add_config_options(
        p, "the profile's [diagonal] table at its first depth", "depth=3 alphas=0.01,1"
    )
    add_print_key_option(p)
    add_json_option(p)

    p = add_command(
        commands,
        "escape",
        _cmd_escape,
        help="plateau length from small init vs ε, L = 2 and 3, against theory",
        description=(
            "Train L-homogeneous diagonal nets (L = 2, 3) from scale ε and measure the "
            "gradient-flow time until the loss halves; compare with theory.escape "
            "(~ln(1/ε)/c for L = 2, ~ε^(2−L)/((L−2)c) for L = 3)."
        ),
    )
    add_config_options(p, "the config's defaults (no profile table)", "orders=2,3")
    add_json_option(p)
