"""The prepared GPU check: one command, one JSON, about ten minutes on one GPU.

``python -m smallinit.study.gpu_check OUT_DIR`` runs, each part timed and caught on its own (a
failing part is recorded with its traceback; the others still run):

1. ``kernels`` — the gpu-marked kernel tests and benchmarks
   (:func:`smallinit.kernels.gpu_report.collect`): grouped two-layer step against a
   per-network torch loop (goal ≥ 3×) and a padded ``torch.bmm`` (goal ≥ 1.2×), cosine
   Gram against cuBLAS (goal ≥ 70% of its throughput), the batched stack measurements;
2. ``throughput`` — training tokens/s and MFU of a ~100M-parameter model of the project's
   default architecture in bf16, eager and compiled
   (:func:`smallinit.llm.training.throughput.measure`; goal ≥ 45% MFU on an H200);
3. ``full_run`` — the full profile's first fig-7 run shortened to ``--full-steps`` steps,
   end to end through the trainer and a temporary run store (training, evaluation, stored
   results), its wall time and final loss.

``goals`` gathers each goal with its measured value and whether it was met. ``--dry``
runs the same code on the CPU at toy sizes in seconds (the test suite does that), so the
script cannot rot between GPU sessions; a dry JSON says ``"dry": true`` and no goal is
judged.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from smallinit.core.config import override
from smallinit.kernels import gpu_report as kernels_check
from smallinit.llm.run_config import ModelConfig, RunConfig, TrainConfig
from smallinit.llm.training import throughput as tp
from smallinit.llm.training import train
from smallinit.study import experiments

#: the ~100M configuration: GPT-2-small widths (Radford et al. 2019: d 768, 12 layers,
#: 12 heads, context 1024) with the project's default block (RMSNorm, RoPE, SwiGLU)
BIG = {"vocab_size": 32768, "context": 1024, "d_model": 768, "n_layers": 12, "n_heads": 12}
BIG_BATCH = 16
DRY = {"vocab_size": 256, "context": 32, "d_model": 32, "n_layers": 2, "n_heads": 2}
DRY_BATCH = 4
GOALS = {"grouped_vs_loop": 3.0, "grouped_vs_padded": 1.2, "gram_vs_cublas": 0.7,
         "mfu": 0.45}


def _part(result: dict, name: str, fn: Callable[[], Any]) -> None:
    t0 = time.perf_counter()
    try:
        result[name] = fn()
    except Exception:
        result[name] = {"error": traceback.format_exc()[-3000:]}
    result.setdefault("wall_s", {})[name] = time.perf_counter() - t0


def _run_config(dry: bool):
    model = ModelConfig(**(DRY if dry else BIG))
    train = TrainConfig(batch_size=DRY_BATCH if dry else BIG_BATCH, lr=6e-4,
                        device="cpu" if dry else "cuda", precision="fp32" if dry else "bf16")
    return RunConfig(init="gamma:0.5", model=model, train=train)


def throughput(dry: bool) -> dict:
    cfg = _run_config(dry)
    steps, warmup = (2, 1) if dry else (30, 10)
    out = {"eager": tp.measure(cfg, steps=steps, warmup=warmup)}
    # compiling on the CPU takes longer than the whole dry check is allowed
    out["compiled"] = ("skipped in dry mode" if dry
                       else tp.measure(cfg, steps=steps, warmup=warmup, compile=True))
    return out


def full_run(dry: bool, steps: int) -> dict:
    spec = experiments.specs("gamma-sweep", "quick" if dry else "full")[0]
    changes = {"train.steps": steps, "train.warmup": min(spec.config.train.warmup, steps // 2),
               "train.checkpoint_every": 0, "train.eval_every": 0,
               "train.device": "cpu" if dry else "cuda"}
    if dry:
        changes.update({"eval.answer_items": 8, "eval.token_windows": 4})
    cfg = override(spec.config, changes)
    with tempfile.TemporaryDirectory() as runs:
        t0 = time.perf_counter()
        run = train.train(cfg, runs_dir=runs)
        wall = time.perf_counter() - t0
        summary = run.summary
    return {"profile": "quick" if dry else "full", "tags": spec.tags, "steps": steps,
            "d_model": cfg.model.d_model, "n_layers": cfg.model.n_layers,
            "wall_s": wall, "val_loss": summary.get("val_loss"),
            "train_loss": summary.get("train_loss")}


def goals(result: dict) -> dict:
    """Each goal of the module docstring: its target, the measured value, met or not."""
    kern = result.get("kernels", {})
    grouped = kern.get("grouped_step", {}) if isinstance(kern, dict) else {}
    gram = kern.get("cosine_gram", []) if isinstance(kern, dict) else []
    thr = result.get("throughput", {})
    measured = {
        "grouped_vs_loop": grouped.get("speedup_vs_loop"),
        "grouped_vs_padded": grouped.get("speedup_vs_padded"),
        "gram_vs_cublas": min((r["throughput_ratio"] for r in gram), default=None)
        if isinstance(gram, list) else None,
        "mfu": max((v["mfu"] for v in thr.values() if isinstance(v, dict)
                    and v.get("mfu") is not None), default=None)
        if isinstance(thr, dict) else None,
    }
    return {k: {"goal": GOALS[k], "measured": v,
                "met": None if v is None else bool(v >= GOALS[k])}
            for k, v in measured.items()}


def check(dry: bool, full_steps: int) -> dict:
    result: dict[str, Any] = {"dry": dry, "torch": torch.__version__,
                              "cuda": torch.cuda.is_available(),
                              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if not dry:
        if not torch.cuda.is_available():
            raise SystemExit("gpu_check: no CUDA device; use --dry to exercise it on the CPU")
        result["device"] = torch.cuda.get_device_name(0)
        _part(result, "kernels", kernels_check.collect)
    _part(result, "throughput", lambda: throughput(dry))
    _part(result, "full_run", lambda: full_run(dry, full_steps))
    if not dry:
        result["goals"] = goals(result)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m smallinit.study.gpu_check",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", default=os.environ.get("OUT", "bench-results/gpu"),
                        help="folder for gpu_check.json (default $OUT or bench-results/gpu)")
    parser.add_argument("--dry", action="store_true",
                        help="CPU, toy sizes, seconds: exercise the script without a GPU")
    parser.add_argument("--full-steps", type=int, default=None,
                        help="steps of the shortened full-profile run (default 300; dry 3)")
    args = parser.parse_args(argv)
    steps = args.full_steps if args.full_steps is not None else (3 if args.dry else 300)
    if steps < 1:
        parser.error(f"--full-steps {steps}: must be at least 1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = check(args.dry, steps)
    text = json.dumps(result, indent=2, default=str)
    (out / "gpu_check.json").write_text(text + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "kernels"}, indent=2,
                     default=str))
    failed = [k for k in ("kernels", "throughput", "full_run")
              if isinstance(result.get(k), dict) and "error" in result[k]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

