"""The parts of the GPU check (:mod:`smallinit.tools.gpu_check`), one function each.

Each part runs in a process of its own (``python -m smallinit.tools.gpu_parts PART OUT
[--limit S] [--dry]``), started by the check with a time limit of its own (``--limit``, which
each part function receives with ``dry``), and writes its result as JSON to ``OUT``; a part
that raises, dies (a CUDA fault poisons its process only) or runs past its limit is
recorded by the check and the others still run. In a dry run (``--dry``) every part walks
the code a GPU run takes, on the CPU at toy sizes: bf16 autocast, the PyTorch ops a
GPU takes instead of the CPU fast path (``SMALLINIT_FASTPATH=0``, set by the check),
``torch.compile``, the full profile's first run, and the CUDA kernels through their CPU
emulation (:mod:`smallinit.tools.emulation`).

* ``environment`` — the host record a run stores (:func:`smallinit.core.host.record`: CPU,
  Python, the loaded libraries' versions), torch's CUDA, the GPU's name and memory (each
  read inside a ``try``), the kernels' backend and why CuPy is not live if it is not, JAX's
  devices;
* ``kernels`` — the kernel benchmarks (:func:`smallinit.tools.gpu_kernels.benchmarks`);
* ``throughput`` — tokens/s and MFU of a ~100M-parameter model in bf16, eager, and the
  share of a step its output layer and loss take
  (:func:`smallinit.llm.training.throughput.measure`, :func:`head_loss_share`);
* ``compiled`` — the same step through ``torch.compile``;
* ``step_profile`` — where the throughput model's step spends its time, eager and compiled:
  the top kernels, each kernel family's share (attention, matmul, loss, optimizer,
  norm, other) and the attention backend ``scaled_dot_product_attention`` picked under
  ``torch.profiler`` (:func:`smallinit.llm.training.throughput.breakdown`);
* ``gpu_tests`` — the gpu-marked kernel tests (dry: their cases through the emulation),
  with pass and skip counts (:func:`smallinit.tools.gpu_kernels.gpu_tests`), pytest
  stopped :data:`PYTEST_MARGIN_S` before the part's limit so that its counts so far are
  recorded as a timeout rather than lost with the part;
* ``full_run`` — the full profile's first run (fig 7's first) shortened to a few hundred
  steps on a corpus of fewer items drawn by the same rules, end to end through the trainer
  and a temporary run store (dry: cut to a toy width and 3 steps, bf16 on the CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from smallinit.core import host
from smallinit.core.config import override
from smallinit.kernels.backend import cupy_status
from smallinit.llm.model.transformer import Transformer
from smallinit.llm.run_config import ModelConfig, RunConfig, TrainConfig
from smallinit.llm.training import throughput as tp
from smallinit.llm.training import train
from smallinit.study import experiments
from smallinit.tools import gpu_kernels
from smallinit.tools.gpu_check import LOSS_CHUNK_ENV

#: the ~100M configuration: GPT-2-small widths (Radford et al. 2019: d 768, 12 layers,
#: 12 heads, context 1024) with the project's default block (RMSNorm, RoPE, SwiGLU)
BIG = {"vocab_size": 32768, "context": 1024, "d_model": 768, "n_layers": 12, "n_heads": 12}
BIG_BATCH = 16
DRY = {"vocab_size": 256, "context": 32, "d_model": 32, "n_layers": 2, "n_heads": 2}
DRY_BATCH = 4
#: the shortened full-profile run: steps and synthetic training items (GPU, dry)
FULL_STEPS = {False: 300, True: 3}
FULL_ITEMS = {False: 200_000, True: 2_000}
#: seconds of a part's limit left to pytest's stop and report once its own time is up
PYTEST_MARGIN_S = 20


def environment(dry: bool, limit: float | None = None) -> dict[str, Any]:
    """What the machine offers (each reading in a ``try``: a broken driver is a finding)."""
    out: dict[str, Any] = {
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "fastpath": os.environ.get("SMALLINIT_FASTPATH", "1") != "0",
        "nvcc": shutil.which("nvcc"),
    }
    readings: dict[str, Callable[[], Any]] = {
        "device": lambda: torch.cuda.get_device_name(0),
        "device_count": torch.cuda.device_count,
        "gpu_memory": lambda: dict(
            zip(("free_bytes", "total_bytes"), torch.cuda.mem_get_info(0), strict=True)
        ),
        "bf16_supported": torch.cuda.is_bf16_supported,
    }
    for key, read in readings.items():
        if not out["cuda_available"]:
            out[key] = None
            continue
        try:
            out[key] = read()
        except Exception as err:
            out[key] = f"unreadable: {type(err).__name__}: {err}"
    out["kernels"] = cupy_status()
    try:
        import jax  # lazy: only the environment part reads JAX's devices

        out["jax"] = {"devices": [str(d) for d in jax.devices()]}  # its version: host
    except Exception as err:
        out["jax"] = f"unreadable: {type(err).__name__}: {err}"
    out["host"] = host.record()  # last: it records the libraries loaded above (JAX, CuPy)
    return out


def pytest_timeout(limit: float | None) -> float | None:
    """pytest's time within a part's ``limit``: :data:`PYTEST_MARGIN_S` less (half the limit
    when that is shorter); None (no limit) when the part has none."""
    return None if limit is None else max(limit - PYTEST_MARGIN_S, limit / 2)


def gpu_tests(dry: bool, limit: float | None = None) -> dict[str, Any]:
    return gpu_kernels.gpu_tests(dry, timeout=pytest_timeout(limit))


def kernels(dry: bool, limit: float | None = None) -> dict[str, Any]:
    return gpu_kernels.benchmarks(dry)


def loss_chunk() -> int:
    """``train.loss_chunk`` of the throughput model: the check's ``--loss-chunk``
    (:data:`~smallinit.tools.gpu_check.LOSS_CHUNK_ENV`), 0 where it gave none."""
    return int(os.environ.get(LOSS_CHUNK_ENV) or 0)


def run_config(dry: bool) -> RunConfig:
    """The throughput model: :data:`BIG` in bf16 on the GPU, :data:`DRY` in bf16 on the CPU,
    with the check's loss chunk (:func:`loss_chunk`)."""
    model = ModelConfig(**(DRY if dry else BIG))
    cfg = TrainConfig(
        batch_size=DRY_BATCH if dry else BIG_BATCH,
        lr=6e-4,
        device="cpu" if dry else "cuda",
        precision="bf16",
        loss_chunk=loss_chunk(),
    )
    return RunConfig(init="gamma:0.5", model=model, train=cfg)


def head_loss_share(
    cfg: RunConfig, step_s: float, *, steps: int = 20, warmup: int = 5, compile: bool = False
) -> dict[str, Any]:
    """Seconds of the output layer and loss alone — forward and backward of
    :meth:`~smallinit.llm.model.layers.Head.logits_and_loss` on random final hidden
    states at ``cfg``'s batch, context, width, vocabulary and precision, compiled or not —
    and their share of a training step of ``step_s`` seconds (what the tokens × vocabulary
    logits cost; eager under bf16 autocast they are also upcast to an fp32 copy)."""
    device = tp.run_device(cfg)
    model = Transformer(override(cfg.model, {"n_layers": 1}), cfg.init, seed=cfg.seed)
    model = model.to(device)
    model.head.loss_chunk = cfg.train.loss_chunk
    gen = torch.Generator().manual_seed(cfg.seed)
    m = cfg.model
    h = torch.randn(cfg.train.batch_size, m.context, m.d_model, generator=gen).to(device)
    h.requires_grad_(True)
    y = torch.randint(0, m.vocab_size, (cfg.train.batch_size, m.context), generator=gen)
    y = y.to(device)
    loss_fn = torch.compile(model.head.logits_and_loss) if compile else model.head.logits_and_loss
    ctx = train.autocast(cfg, device)

    def once() -> None:
        with ctx:
            _, loss = loss_fn(h, y)
        loss.backward()

    seconds = tp.timed(once, device, steps, warmup)[1] / steps
    return {
        "head_loss_s": seconds,
        "share_of_step": seconds / step_s,
        "logits": cfg.train.batch_size * m.context * m.vocab_size,
    }


def _throughput(dry: bool, compile: bool) -> dict[str, Any]:
    cfg = run_config(dry)
    steps, warmup = (2, 1) if dry else (30, 10)
    out = tp.measure(cfg, steps=steps, warmup=warmup, compile=compile)
    out["head_loss"] = head_loss_share(
        cfg, out["step_s"], steps=steps, warmup=warmup, compile=compile
    )
    out["loss_chunk"] = cfg.train.loss_chunk
    return out


def throughput(dry: bool, limit: float | None = None) -> dict[str, Any]:
    return _throughput(dry, compile=False)


def compiled(dry: bool, limit: float | None = None) -> dict[str, Any]:
    return _throughput(dry, compile=True)


def step_profile(dry: bool, limit: float | None = None) -> dict[str, Any]:
    cfg = run_config(dry)
    steps, warmup = (2, 1) if dry else (5, 5)
    return {
        c: tp.breakdown(cfg, steps=steps, warmup=warmup, compile=c == "compiled")
        for c in ("eager", "compiled")
    }


def full_run_config(dry: bool, steps: int, items: int, cache: str):
    """The full profile's first run (fig 7's), shortened: ``steps`` steps, ``items``
    training items drawn by the same rules, no checkpoints; dry: cut to a toy width
    (:func:`smallinit.llm.training.train.cut_config`), bf16 autocast on the CPU."""
    spec = experiments.specs("gamma-sweep", "full")[0]
    cfg = spec.config
    if dry:
        cfg = train.cut_config(cfg, width=32, layers=2, context=32, batch=4, items=8)
        cfg = override(cfg, {"train.device": "cpu", "train.precision": "bf16"})
    changes = {
        "train.steps": steps,
        "train.warmup": min(cfg.train.warmup, steps // 2),
        "train.checkpoint_every": 0,
        "train.eval_every": 0,
        "train.log_every": min(cfg.train.log_every, steps),
        "data.synthetic_items": min(cfg.data.synthetic_items, items),
        "data.cache_dir": cache,
    }
    return spec, override(cfg, changes)


def full_run(dry: bool, limit: float | None = None) -> dict[str, Any]:
    steps, items = FULL_STEPS[dry], FULL_ITEMS[dry]
    with tempfile.TemporaryDirectory(prefix="smallinit-gpu-check-") as tmp:
        spec, cfg = full_run_config(dry, steps, items, str(Path(tmp) / "cache"))
        t0 = time.perf_counter()
        run = train.train(cfg, runs_dir=Path(tmp) / "runs", callbacks=[])
        wall = time.perf_counter() - t0
        summary, state = run.summary, run.state
        rates = [r["tok_per_s"] for r in run.metrics() if "tok_per_s" in r]
    return {
        "profile": "full",
        "tags": spec.tags,
        "key_of_the_full_run": spec.key,
        "steps": steps,
        "synthetic_items": cfg.data.synthetic_items,
        "profile_synthetic_items": spec.config.data.synthetic_items,
        "d_model": cfg.model.d_model,
        "n_layers": cfg.model.n_layers,
        "batch_size": cfg.train.batch_size,
        "compile": cfg.train.compile,
        "precision": cfg.train.precision,
        "device": cfg.train.device,
        "wall_s": wall,
        "last_tok_per_s": rates[-1] if rates else None,
        "state": state,
        "val_loss": summary.get("val_loss"),
        "train_loss": summary.get("train_loss"),
    }


#: each part: (dry, its time limit in seconds or None) -> its result
PARTS: dict[str, Callable[[bool, float | None], dict[str, Any]]] = {
    "environment": environment,
    "kernels": kernels,
    "throughput": throughput,
    "compiled": compiled,
    "step_profile": step_profile,
    "gpu_tests": gpu_tests,
    "full_run": full_run,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m smallinit.tools.gpu_parts",
        description="one part of the GPU check (module doc)",
    )
    parser.add_argument("part", choices=sorted(PARTS))
    parser.add_argument("out", help="file for the part's JSON result")
    parser.add_argument(
        "--limit", type=float, default=None, help="the part's time limit in seconds (the check's)"
    )
    parser.add_argument("--dry", action="store_true")
    args = parser.parse_args(argv)
    try:
        result, code = {"ok": True, "result": PARTS[args.part](args.dry, args.limit)}, 0
    except Exception:
        result, code = {"ok": False, "error": traceback.format_exc()[-4000:]}, 1
    Path(args.out).write_text(json.dumps(result, indent=1, default=str) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
