"""The anchor ablation (docs/anchor_ablation.md): one candidate setting, trained at
the given γ values × seeds through the job driver, its per-seed (4, 3) shares appended to
docs/anchor_ablation.json and judged against the thresholds:

* γ = 0.5 (large init): a symmetric majority (share_symmetric > 0.5) in >= 4 of 5 seeds and
  mean symmetric share >= 0.8;
* γ >= 0.8 (small init): an inferential majority in >= 4 of 5 seeds and mean inferential
  share >= 0.8.

Usage (from the repository root; SMALLINIT_RUNS picks the run store):

    .venv/bin/python docs/anchor_ablation.py NAME [--gammas 0.5,0.8] [--seeds 0-4]
        [--workers 2] [KEY=VALUE ...]

KEY=VALUE are run-config overrides of the quick profile's [anchor] table
(model.norm_position=post, model.n_heads=1, train.lr=2e-4, ...).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

from smallinit.core.atomic import json_text
from smallinit.core.jobs import run_jobs
from smallinit.core.store import RunStore
from smallinit.llm.experiments.anchor import AnchorScan, load_profile, scan_jobs

OUT = Path(__file__).resolve().parent / "anchor_ablation.json"
MAJORITY = 0.5
MIN_SEEDS_WITH_MAJORITY = 4
MIN_MEAN = 0.8


def verdict(gamma: float, shares: dict[str, list[float]]) -> dict:
    """Which share the thresholds test at ``gamma`` and whether it passes (the thresholds
    are set for γ <= 0.5 and γ >= 0.8; between them the inferential share is judged the
    same way, for reference, with ``in_scope`` false)."""
    key = "share_symmetric" if gamma <= 0.5 else "share_inferential"
    vals = np.asarray(shares[key])
    majority = int(np.sum(vals > MAJORITY))
    ok = majority >= MIN_SEEDS_WITH_MAJORITY and float(vals.mean()) >= MIN_MEAN
    return {"tested": key, "mean": float(vals.mean()), "seeds_with_majority": majority,
            "n": int(vals.size), "passes": bool(ok),
            "in_scope": bool(gamma <= 0.5 or gamma >= 0.8)}


def render(records: list[dict]) -> str:
    """The ablation table as Markdown (one row per setting and γ)."""
    lines = ["| setting | overrides of quick [anchor] | depth | γ | seeds | "
             "symmetric share per seed | inferential share per seed | other (mean) | "
             "seen-pair test acc (min) | tested: mean, majority | verdict | wall |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        depth = re.search(r"--layers (\d+)", r["command"]).group(1)
        wall = f"{r['wall_s']:.0f} s" if r["wall_s"] >= 1 else "reused runs"
        for g, c in r["cells"].items():
            v = c["verdict"]
            verdict = ("PASS" if v["passes"] else "fail") if v["n"] >= 5 else (
                f"screen only (n = {v['n']} < 5)")
            verdict += "" if v["in_scope"] else " (γ outside thresholds)"
            f = " ".join(f"{x:.2f}" for x in c["share_symmetric"])
            i = " ".join(f"{x:.2f}" for x in c["share_inferential"])
            lines.append(
                f"| {r['name']} | {' '.join(r['overrides']) or '(none)'} | {depth} | {g} | "
                f"{','.join(map(str, c['seed']))} | {f} | {i} | "
                f"{np.mean(c['share_other']):.2f} | {min(c['acc_seen_test']):.3f} | "
                f"{v['tested'][6:]} {v['mean']:.2f}, {v['seeds_with_majority']}/{v['n']} | "
                f"{verdict} | {wall} |")
    return "\n".join(lines) + "\n"


def seeds_arg(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("name", help="the setting's name; 'render' prints the Markdown table")
    p.add_argument("--gammas", default="0.5,0.8")
    p.add_argument("--seeds", type=seeds_arg, default=seeds_arg("0-4"))
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--note", default="", help="where the runs came from, if not this command")
    p.add_argument("overrides", nargs="*")
    args = p.parse_intermixed_args(argv)
    if args.name == "render":
        print(render(json.loads(OUT.read_text())), end="")
        return 0
    gammas = tuple(float(g) for g in args.gammas.split(","))
    base, _ = load_profile("quick", args.overrides)
    scan = AnchorScan(gammas=gammas, layers=(args.layers,), weight_decays=(),
                      seeds=tuple(args.seeds))
    t0 = time.time()
    results = run_jobs(scan_jobs(base, scan), RunStore(), workers=args.workers,
                       desc=f"ablation {args.name}")
    wall = time.time() - t0
    per_gamma: dict[float, dict[str, list[float]]] = {}
    for job, run in results:
        if not run.done:
            print(f"failed: {job.tags} {run.status().get('reason')}", file=sys.stderr)
            continue
        s = run.summary
        cell = per_gamma.setdefault(job.tags["gamma"], {k: [] for k in (
            "seed", "share_symmetric", "share_inferential", "share_other", "acc_seen_train",
            "acc_seen_test")})
        cell["seed"].append(job.tags["seed"])
        for k in cell:
            if k != "seed":
                cell[k].append(round(float(s[k]), 4))
    record = {
        "name": args.name,
        "command": "SMALLINIT_RUNS=/tmp/anchor-runs .venv/bin/python "
                   "docs/anchor_ablation.py " + " ".join(
                       [args.name, f"--gammas {args.gammas}",
                        f"--seeds {','.join(map(str, args.seeds))}",
                        f"--layers {args.layers}", *args.overrides]),
        "overrides": args.overrides,
        "note": args.note,
        "wall_s": round(wall, 1),
        "runs": len(results),
        "cells": {f"{g:g}": {**per_gamma[g], "verdict": verdict(g, per_gamma[g])}
                  for g in sorted(per_gamma)},
    }
    old = json.loads(OUT.read_text()) if OUT.exists() else []
    old = [r for r in old if r["name"] != args.name] + [record]
    OUT.write_text(json_text(old, indent=1) + "\n", encoding="utf-8")
    for g, cell in record["cells"].items():
        v = cell["verdict"]
        print(f"{args.name} γ={g}: sym {cell['share_symmetric']} inf {cell['share_inferential']}"
              f" fit {cell['acc_seen_test']} -> {v['tested']} mean {v['mean']:.3f} "
              f"majority {v['seeds_with_majority']}/{v['n']} "
              f"{'PASS' if v['passes'] else 'fail'}")
    print(f"wall {wall:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
