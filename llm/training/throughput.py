"""Training throughput and model FLOPs utilization (MFU) of the one training step.

FLOPs per token are the planning formula of :mod:`smallinit.llm.training.cost`
(C = 6·(N + V·d) + 12·L·d·T per token: Kaplan et al. 2020; Chinchilla App. F; PaLM App. B),
so a measured MFU and the full profile's planned hours use one count. MFU is tokens/s · F
divided by the device's dense bf16 peak; only the peaks listed in :data:`PEAK_FLOPS` are
known, anywhere else MFU is None.

The step timed is :func:`smallinit.llm.training.train.train_step` (forward, backward, clip,
AdamW), on random tokens, after warm-up steps (which also absorb ``torch.compile``), with
the device synchronized around the timed block.

:func:`compile_break_even` says from how many steps ``torch.compile`` pays back: n steps
cost n·e eager and C + n·c compiled (C the compile time, e and c the steady per-step
times), so compiling saves time from n* = C / (e − c) steps on.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
from torch._inductor.utils import clear_inductor_caches

from smallinit.llm.model.transformer import Transformer
from smallinit.llm.run_config import ModelConfig, RunConfig
from smallinit.llm.training.cost import H200_PEAK_BF16_DENSE, training_flops
from smallinit.llm.training.train import autocast, make_optimizer, train_step

#: dense bf16 tensor-core peak in FLOP/s, by a substring of the device name (NVIDIA data
#: sheets: H200 and H100 SXM 989 TFLOP/s dense, half the "with sparsity" figure; A100 312)
PEAK_FLOPS = {"H200": H200_PEAK_BF16_DENSE, "H100": 989e12, "A100": 312e12}


def flops_per_token(cfg: ModelConfig) -> float:
    """Training FLOPs of one token (:func:`smallinit.llm.training.cost.training_flops`)."""
    return training_flops(cfg, 1)


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_FLOPS.items() if k in name), None)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_device(cfg: RunConfig) -> torch.device:
    """The device a run of ``cfg`` trains on here: CUDA where it asks for it (or auto) and
    one is present, else the CPU."""
    want = cfg.train.device
    return torch.device("cuda" if want in ("cuda", "auto") and torch.cuda.is_available() else "cpu")


def _stepper(cfg: RunConfig, device: torch.device, compile: bool):
    """A fresh model of ``cfg`` and a function running one training step on fixed random
    tokens (the same tokens for every model of ``cfg``); returns (model, step)."""
    gen = torch.Generator().manual_seed(cfg.seed)
    model = Transformer(cfg.model, cfg.init, seed=cfg.seed).to(device)
    model.head.loss_chunk = cfg.train.loss_chunk
    opt = make_optimizer(model, cfg, device)
    objective = torch.compile(model) if compile else model
    shape = (cfg.train.batch_size, cfg.model.context)
    x = torch.randint(0, cfg.model.vocab_size, shape, generator=gen).to(device)
    y = torch.randint(0, cfg.model.vocab_size, shape, generator=gen).to(device)
    ctx = autocast(cfg, device)

    def step() -> None:
        train_step(objective, opt, x, y, lr=cfg.train.lr, clip=cfg.train.grad_clip, ctx=ctx)

    return model, step


def compile_break_even(cfg: RunConfig, *, rounds: int = 7) -> dict[str, Any]:
    """Compile time and per-step times of ``cfg``'s training step, eager against
    ``torch.compile``, and the number of steps from which compiling is faster.

    The first compiled step (after ``torch._dynamo.reset()`` and clearing Inductor's
    in-memory caches) includes the compilation;
    then ``rounds`` eager and compiled steps alternate (so a load that drifts affects both
    alike) and their medians are e and c. The compile time is C = first step − c and the
    break-even n* = C / (e − c) (None when compiled steps are not faster). C depends on
    Inductor's on-disk cache (``TORCHINDUCTOR_CACHE_DIR``): cold, every kernel is built."""
    if rounds < 1:
        raise ValueError(f"rounds={rounds}: need rounds >= 1")
    device = run_device(cfg)
    torch._dynamo.reset()  # compile from scratch: no graphs or kernels kept in memory
    clear_inductor_caches()
    _, eager = _stepper(cfg, device, compile=False)
    _, compiled = _stepper(cfg, device, compile=True)
    eager()  # allocator and thread-pool warm-up, as the compiled model gets below
    _sync(device)
    t0 = time.perf_counter()
    compiled()
    _sync(device)
    first = time.perf_counter() - t0
    times: dict[str, list[float]] = {"eager": [], "compiled": []}
    for _ in range(rounds):
        for name, step in (("eager", eager), ("compiled", compiled)):
            t0 = time.perf_counter()
            step()
            _sync(device)
            times[name].append(time.perf_counter() - t0)
    e, c = statistics.median(times["eager"]), statistics.median(times["compiled"])
    compile_s = max(first - c, 0.0)
    return {
        "compile_s": compile_s,
        "eager_step_s": e,
        "compiled_step_s": c,
        "step_speedup": e / c,
        "break_even_steps": compile_s / (e - c) if e > c else None,
        "threads": torch.get_num_threads(),
        "device": str(device),
    }


def timed(step, device: torch.device, steps: int, warmup: int) -> tuple[float, float]:
    """Seconds of ``warmup`` untimed calls of ``step``, then of ``steps`` timed ones (the
    device synchronized after each block)."""
    t0 = time.perf_counter()
    for _ in range(warmup):
        step()
    _sync(device)
    t1 = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return t1 - t0, time.perf_counter() - t1


def measure(
    cfg: RunConfig, *, steps: int = 20, warmup: int = 5, compile: bool = False
) -> dict[str, Any]:
    """Time ``steps`` training steps of ``cfg``'s model after ``warmup`` untimed ones.

    Returns tokens/s, seconds per step, parameters, FLOPs per token, achieved FLOP/s and
    MFU (None off the listed GPUs), the warm-up time (compile included) and the device."""
    if steps < 1 or warmup < 0:
        raise ValueError(f"steps={steps}, warmup={warmup}: need steps >= 1, warmup >= 0")
    device = run_device(cfg)
    model, step = _stepper(cfg, device, compile)
    m = cfg.model
    shape = (cfg.train.batch_size, m.context)
    warmup_s, elapsed = timed(step, device, steps, warmup)
    tokens = steps * shape[0] * shape[1]
    tok_s = tokens / elapsed
    fpt = flops_per_token(m)
    peak = peak_flops(device)
    return {
        "device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
        "compile": compile,
        "precision": "bf16" if device.type == "cuda" or cfg.train.precision == "bf16" else "fp32",
        "params": sum(p.numel() for p in model.parameters()),
        "flops_per_token": fpt,
        "tokens_per_step": shape[0] * shape[1],
        "steps": steps,
        "step_s": elapsed / steps,
        "tokens_per_s": tok_s,
        "flops_per_s": tok_s * fpt,
        "peak_flops": peak,
        "mfu": None if peak is None else tok_s * fpt / peak,
        "warmup_s": warmup_s,
    }


#: kernel families of a training step, by a pattern of the kernel's (or CPU op's) name; the
#: first that matches names it, and what matches none is "other" (elementwise, copies)
FAMILIES = (
    ("attention", ("flash", "fmha", "attention", "sdpa", "efficient_attention")),
    (
        "matmul",
        ("gemm", "cutlass", "xmma", "nvjet", "matmul", "addmm", "aten::mm", "aten::bmm", "cublas"),
    ),
    ("loss", ("cross_entropy", "log_softmax", "nll_loss", "softmax", "logsumexp")),
    ("optimizer", ("adam", "multi_tensor", "foreach")),
    ("norm", ("norm", "rsqrt")),
)


def family(name: str) -> str:
    """The family (:data:`FAMILIES`) of a kernel or op called ``name``."""
    low = name.lower()
    return next((fam for fam, parts in FAMILIES if any(p in low for p in parts)), "other")


#: the backends of ``F.scaled_dot_product_attention``, by a pattern of the aten op it
#: dispatches to (``aten::_scaled_dot_product_flash_attention`` and its backward, …)
SDPA_BACKENDS = (
    ("flash", "flash"),
    ("efficient", "efficient"),
    ("cudnn", "cudnn"),
    ("math", "math"),
)


def sdpa_backend(name: str) -> str | None:
    """The backend (:data:`SDPA_BACKENDS`, else ``other``) of an aten op that
    ``scaled_dot_product_attention`` dispatched to; None for any other op."""
    low = name.lower()
    if not low.startswith("aten::_scaled_dot_product"):
        return None
    return next((b for b, pattern in SDPA_BACKENDS if pattern in low), "other")


def sdpa_picks(events) -> dict[str, int]:
    """Calls of each attention backend among the profiler's ``events`` (key averages)."""
    picks: dict[str, int] = {}
    for e in events:
        backend = sdpa_backend(e.key)
        if backend is not None:
            picks[backend] = picks.get(backend, 0) + e.count
    return picks


def breakdown(
    cfg: RunConfig, *, steps: int = 5, warmup: int = 3, compile: bool = False, top: int = 15
) -> dict[str, Any]:
    """Where a training step's time goes: ``steps`` steps of ``cfg`` under
    ``torch.profiler`` after ``warmup`` untimed ones. On CUDA the device time of each kernel
    (self CUDA time), on the CPU the self time of each op; returns the ``top`` kernels with
    their share, the shares of each family (:func:`family`) of the total, the calls of each
    attention backend ``scaled_dot_product_attention`` picked (:func:`sdpa_picks`: flash,
    efficient, cudnn or math) and the loss chunk (``train.loss_chunk``) of the step."""
    from torch.profiler import ProfilerActivity, profile  # lazy: only this measurement

    device = run_device(cfg)
    _, step = _stepper(cfg, device, compile)
    for _ in range(warmup):
        step()
    _sync(device)
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        _sync(device)
    attr = "self_device_time_total" if cuda else "self_cpu_time_total"
    events = prof.key_averages()
    rows = [(e.key, getattr(e, attr)) for e in events]
    if cuda:  # device kernels only: a CPU op's own device time is 0 or repeats its kernels
        rows = [(k, t) for k, t in rows if t > 0 and not k.startswith("aten::")]
    total = sum(t for _, t in rows) or 1.0
    rows.sort(key=lambda kt: -kt[1])
    shares: dict[str, float] = {}
    for k, t in rows:
        shares[family(k)] = shares.get(family(k), 0.0) + t / total
    return {
        "device": str(device),
        "compile": compile,
        "steps": steps,
        "time_per_step_ms": total / 1e3 / steps,
        "clock": attr,
        "families": dict(sorted(shares.items(), key=lambda kv: -kv[1])),
        "sdpa_backends": sdpa_picks(events),
        "loss_chunk": cfg.train.loss_chunk,
        "top": [{"name": k[:120], "family": family(k), "share": t / total} for k, t in rows[:top]],
    }
