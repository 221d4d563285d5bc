"""Step throughput of a population against the same runs one after another, as JSON.

    python -m smallinit.tools.population_bench [--members 40] [--sizes 32 128]
        [--steps 20] [--warmup 5] [--device auto] [--executions eager compile cudagraphs]
    [--cache DIR] [--tiny]

For each d_model of ``--sizes``: ``--members`` pretraining runs of fair's shape (vocabulary
512, context 64, 2 layers, 4 heads, batch 16; synthetic text, so nothing is downloaded)
that differ in seed and learning rate. The single runs take their steps through the
one :class:`~smallinit.llm.training.train.Trainer`'s ``train_step``, one run after
another in this process (no process start-up counted: the single runs' best case); the
population takes the same steps at once (:class:`~.population.Population.train_step`).
Both are timed over ``--steps`` steps after ``--warmup`` untimed ones, with the device
synchronized around each timing. The numbers: tokens/s of each, and their ratio
(population / singles). ``--tiny`` shrinks everything (d_model 16, context 16, 4 members,
3 steps) so the path is tested on a CPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from smallinit.core.config import load_config
from smallinit.core.errors import ConfigError, one_line
from smallinit.core.jobs import POPULATION_EXECS
from smallinit.llm.data import corpus as corpus_mod
from smallinit.llm.run_config import RunConfig
from smallinit.llm.training.population import Population, build_members, check_execution
from smallinit.llm.training.train import Dist, ScratchRun, Trainer, autocast, lr_at, train_step

FAIR = [
    "model.vocab_size=512",
    "model.context=64",
    "model.n_layers=2",
    "model.n_heads=4",
    "train.batch_size=16",
    "data.synthetic_items=2000",
    "data.synthetic_val_items=200",
    "data.synthetic_facts=20",
    "train.steps=1000",
    "train.warmup=10",
]
TINY = [
    "model.vocab_size=320",
    "model.context=16",
    "model.n_layers=2",
    "model.n_heads=2",
    "train.batch_size=4",
    "data.synthetic_items=400",
    "data.synthetic_val_items=40",
    "data.synthetic_facts=10",
    "train.steps=100",
    "train.warmup=2",
    "train.threads=1",
]


def member_configs(
    d_model: int,
    members: int,
    *,
    tiny: bool = False,
    device: str = "auto",
    cache: str | None = None,
) -> list[RunConfig]:
    """``members`` runs of one shape at ``d_model``, differing in seed and learning rate."""
    base = [*(TINY if tiny else FAIR), f"model.d_model={d_model}", f"train.device={device}"]
    if cache:
        base.append(f"data.cache_dir={cache}")
    return [
        load_config(RunConfig, None, [*base, f"seed={i}", f"train.lr={1e-3 * (1 + i % 4)}"])
        for i in range(members)
    ]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(
    cfgs: list[RunConfig], *, steps: int, warmup: int, executions: tuple[str, ...] = ("eager",)
) -> dict[str, Any]:
    """Tokens/s of ``cfgs`` trained as single runs one after another, and as one
    population, over ``steps`` timed steps each (module docstring); the population once
    per execution of ``executions`` (:func:`~.population.chosen_execution`; the first is
    the headline, all are under ``executions``)."""
    corpus_mod.prepare(cfgs[0].data, cfgs[0].model.vocab_size)
    tokens = cfgs[0].train.batch_size * cfgs[0].model.context
    with tempfile.TemporaryDirectory(prefix="smallinit-population-bench-") as tmp:
        singles = 0.0
        for cfg in cfgs:
            trainer = Trainer(cfg, Dist(), callbacks=[])
            ctx = autocast(cfg, trainer.device)
            for step in range(1, warmup + steps + 1):
                if step == warmup + 1:
                    _sync(trainer.device)
                    t0 = time.perf_counter()
                x, y = trainer.task.batch(step, Dist())
                train_step(
                    trainer.objective,
                    trainer.optimizer,
                    x,
                    y,
                    lr=lr_at(step, cfg),
                    clip=cfg.train.grad_clip,
                    ctx=ctx,
                )
            _sync(trainer.device)
            singles += time.perf_counter() - t0
            device = trainer.device
            del trainer
        n = len(cfgs) * steps * tokens
        timed: dict[str, dict[str, float]] = {}
        for execution in executions:
            check_execution(execution, device)
            runs = [ScratchRun(Path(tmp) / execution / str(i)) for i in range(len(cfgs))]
            population = Population(build_members(cfgs, runs, callbacks=[]), execution)
            ctx = autocast(cfgs[0], population.device)
            for step in range(1, warmup + steps + 1):
                if step == warmup + 1:  # the warmup steps hold a compiled step's build
                    _sync(device)
                    t0 = time.perf_counter()
                population.train_step(step, ctx)
            _sync(device)
            together = time.perf_counter() - t0
            timed[execution] = {
                "population_s": together,
                "population_tok_per_s": n / together,
                "ratio": singles / together,
            }
            del population
        peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    head = timed[executions[0]]
    return {
        "d_model": cfgs[0].model.d_model,
        "members": len(cfgs),
        "steps": steps,
        "tokens_per_step": tokens,
        "device": str(device),
        "singles_s": singles,
        "population_s": head["population_s"],
        "singles_tok_per_s": n / singles,
        "population_tok_per_s": head["population_tok_per_s"],
        "ratio": head["ratio"],
        "execution": executions[0],
        "executions": timed,
        "cuda_peak_bytes": peak,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m smallinit.tools.population_bench",
        description="Step throughput of one population against the same runs one after "
        "another (tokens/s and their ratio), as JSON on stdout.",
    )
    parser.add_argument("--members", type=int, default=40, help="runs per population")
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[32, 128], help="d_model of each measurement"
    )
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps before them")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--cache", default=None, help="corpus cache folder")
    parser.add_argument(
        "--executions",
        nargs="+",
        choices=POPULATION_EXECS,
        default=["eager"],
        help="how the population's step runs, each measured (the first is "
        "the headline; cudagraphs needs CUDA)",
    )
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="toy sizes (d_model 16, 4 members, 3 steps) for a CPU check",
    )
    args = parser.parse_args(argv)
    for name in ("members", "steps"):
        if getattr(args, name) < 1:
            print(
                f"error: --{name}={getattr(args, name)} is not allowed; it must be >= 1",
                file=sys.stderr,
            )
            return 2
    if args.warmup < 0:
        print(f"error: --warmup={args.warmup} is not allowed; it must be >= 0", file=sys.stderr)
        return 2
    sizes, members, steps = args.sizes, args.members, args.steps
    if args.tiny:
        sizes, members, steps = [16], min(members, 4), min(steps, 3)
    try:
        results = [
            measure(
                member_configs(d, members, tiny=args.tiny, device=args.device, cache=args.cache),
                steps=steps,
                warmup=args.warmup,
                executions=tuple(dict.fromkeys(args.executions)),
            )
            for d in sizes
        ]
    except ConfigError as err:
        print(f"error: {one_line(err)}", file=sys.stderr)
        return 2
    print(json.dumps({"torch": torch.__version__, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
