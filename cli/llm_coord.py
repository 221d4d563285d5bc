"""``smallinit llm coord-check``: activation scale per part against width (the γ-rule
coordinate check, :mod:`smallinit.llm.analysis.coordcheck`; docs/science.md §9.1)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from smallinit.cli.util import (
    add_command,
    add_config_options,
    add_json_option,
    nonnegative_int,
    path_arg,
    positive_int,
    positive_int_list,
    print_config,
)

DESCRIPTION = """\
Build the transformer at several widths d_model (same depth, heads, vocabulary; d_ff in
proportion), draw it by an init scheme, train it a few AdamW steps at a constant learning
rate on random tokens, and record the RMS of each part's activation (embedding, norm
output, Q|K|V, attention output, up/gate, FFN output, residual stream, logits) on a fixed
probe batch after every step. Prints the slope of ln RMS against ln d_model per part and
block at init and at the last step, next to the γ rule's prediction at init (a matrix of
fan-in d_in and std d_in^-γ maps unit-scale inputs to scale d_in^(1/2-γ)), and writes a
log-log figure (PNG and PDF, one panel per part, one line per step) and the JSON.

The model template is small by default (2 layers, 4 heads, vocabulary 256, context 32,
batch 8: seconds on a CPU); change it with KEY=VALUE overrides or --config, e.g.
  smallinit llm coord-check --init gamma:1 --widths 32,64,128,256 model.norm_eps=1e-10
"""


def slug(scheme: str) -> str:
    """A file-name-safe spelling of a scheme (``gamma:0.5,qk=1.0`` → ``gamma-0.5-qk-1.0``)."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", scheme).strip("-")


def load_coord_config(args: argparse.Namespace):
    """The coord check's template: coordcheck.DEFAULTS (or --profile's [llm-train] run),
    then --config FILE, then the overrides (:data:`smallinit.cli.util.PRECEDENCE`), then
    --init."""
    from smallinit.cli.llm_config import load_run_config
    from smallinit.core.config import override
    from smallinit.llm.analysis.coordcheck import DEFAULTS

    cfg = load_run_config(args, default=DEFAULTS)
    if args.init is not None:
        cfg = override(cfg, {"init": args.init})
    return cfg


def draw(result: dict[str, Any]):
    """Log-log figure: one panel per part, RMS against width, one line per step (blocks'
    parts as the geometric mean over blocks); the dashed line is the γ rule's predicted
    slope at init, through the measured init value at the smallest width."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import FormatStrFormatter, NullFormatter, NullLocator

    from smallinit.llm.analysis.coordcheck import PARTS

    widths, steps = result["widths"], result["steps"]
    predicted = {s["part"]: s["predicted_init"] for s in result["slopes"]}
    fig, axes = plt.subplots(2, 4, figsize=(13, 6), sharex=True)
    colors = plt.get_cmap("viridis")(np.linspace(0, 0.9, len(steps)))
    for ax, part in zip(axes.flat, PARTS, strict=True):
        logs = {}
        for r in result["records"]:
            if r["part"] == part and r["scale"] is not None and r["scale"] > 0:
                logs.setdefault((r["step"], r["width"]), []).append(np.log(r["scale"]))
        for step, color in zip(steps, colors, strict=True):
            ys = [np.exp(np.mean(logs.get((step, w), [np.nan]))) for w in widths]
            ax.plot(widths, ys, "o-", color=color, ms=3, label=f"step {step}")
        if predicted[part] is not None and (0, widths[0]) in logs:
            y0 = np.exp(np.mean(logs[(0, widths[0])]))
            ax.plot(
                widths,
                [y0 * (w / widths[0]) ** predicted[part] for w in widths],
                "--",
                color="black",
                lw=1,
                label="γ rule at init",
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        lo, hi = ax.get_ylim()
        if hi < 10 * lo:  # less than a decade: four labelled ticks instead of none
            ax.set_yticks(np.geomspace(lo, hi, 6)[1:-1])
            ax.yaxis.set_major_formatter(FormatStrFormatter("%.4g"))
            ax.yaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_minor_formatter(NullFormatter())
        if predicted[part] is None:
            ax.set_title(part)
        else:  # + 0.0: no "-0.00"
            ax.set_title(f"{part} (rule {round(predicted[part], 2) + 0.0:+.2f})")
    for ax in axes[-1]:
        ax.set_xlabel("d_model")
    axes.flat[0].set_ylabel("RMS of activation")
    axes.flat[4].set_ylabel("RMS of activation")
    axes.flat[-1].legend(fontsize=7)
    fig.suptitle(
        f"coord check: {result['init']}, {result['model']['n_layers']} layers, "
        f"AdamW lr {result['lr']:g}"
    )
    fig.tight_layout()
    return fig


def cmd_coord_check(args: argparse.Namespace) -> int:
    from smallinit.cli.util import print_json
    from smallinit.core.atomic import atomic_write_json
    from smallinit.core.errors import ConfigError
    from smallinit.core.plotting import save_figure, use_style
    from smallinit.llm.analysis.coordcheck import coord_check

    cfg = load_coord_config(args)
    if print_config(args, cfg):
        return 0
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {str(out)!r} is a file; give a folder for the figure and JSON")
    out.mkdir(parents=True, exist_ok=True)  # before the work: a bad folder fails at once
    result = coord_check(cfg, args.widths, steps=args.steps, seeds=args.seeds)
    stem = f"coord-{slug(cfg.init)}"
    with use_style():
        fig = draw(result)
        paths = save_figure(fig, out, stem)
    atomic_write_json(out / f"{stem}.json", result)
    if args.json:
        print_json(result)
        return 0
    print(
        f"coord check of {cfg.init} over d_model = {', '.join(map(str, result['widths']))}"
        f" ({len(result['steps']) - 1} AdamW steps at lr {cfg.train.lr:g})"
    )
    print(f"{'part':<10} {'block':>5}  {'slope@init':>10}  {'γ rule':>7}  {'slope@last':>10}")
    for s in result["slopes"]:
        pred = "" if s["predicted_init"] is None else f"{s['predicted_init']:+.3f}"
        print(
            f"{s['part']:<10} {s['layer']:>5}  {s['slope_init']:>+10.3f}  {pred:>7}  "
            f"{s['slope_last']:>+10.3f}"
        )
    print("wrote " + ", ".join(str(p) for p in [*paths, out / f"{stem}.json"]))
    return 0


def register_coord_commands(commands) -> None:
    """Add ``coord-check`` to the ``smallinit llm`` group."""
    p = add_command(
        commands,
        "coord-check",
        cmd_coord_check,
        help="activation scale per part against width over the first steps "
        "(the γ-rule coordinate check)",
        description=DESCRIPTION,
    )
    p.add_argument(
        "--init",
        default=None,
        metavar="SCHEME",
        help="init scheme, e.g. gamma:0.5, gamma:1, nanogpt, mup:32 (default: "
        "the config's init, gamma:0.5)",
    )
    p.add_argument(
        "--widths",
        type=positive_int_list,
        default=[32, 64, 128, 256],
        metavar="W,W,...",
        help="d_model values, at least two, each a multiple "
        "of 2·model.n_heads for RoPE (default: 32,64,128,256)",
    )
    p.add_argument(
        "--steps", type=nonnegative_int, default=4, help="AdamW steps after init (0: init only)"
    )
    p.add_argument(
        "--seeds",
        type=positive_int,
        default=1,
        help="seeds averaged (geometric mean of the RMS), from the config's seed",
    )
    p.add_argument(
        "--out",
        type=path_arg,
        default="coord-check",
        metavar="DIR",
        help="folder for coord-<scheme>.png, .pdf and .json",
    )
    add_json_option(p, help="print the whole result as JSON instead of the slope table")
    add_config_options(
        p,
        "the coord check's small template, or with --profile the "
        "defaults in code with the profile's [llm-train] table laid over them",
        "model.n_layers=4 model.norm_eps=1e-10 train.lr=0.01 train.threads=1",
        profile_default=None,
        store=False,
    )
