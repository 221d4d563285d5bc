"""Training-step throughput of smallinit.llm against a nanoGPT-style reference (``make bench``).

Config: n_layers 4, n_heads 4, d_model 256, context 128, batch 16, vocab 4096,
2 CPU threads. A step is forward + backward + global-norm clipping + AdamW update. The
reference is a minimal model written here in the manner of nanoGPT's model.py (LayerNorm
with bias, learned positions, GELU MLP of width 4d, tied head, std 0.02, default AdamW);
each of our variants reports tokens/s and its ratio to the reference in ``extra_info``.

``test_compile_break_even`` measures from how many steps ``torch.compile`` pays back
(:func:`smallinit.llm.training.throughput.compile_break_even`), on this shape at 2 threads
and on a quick-profile sweep run's shape (d_model 64, 2 layers, context 64, vocab 512,
batch 16) at 1 thread, with Inductor's on-disk cache cold (a fresh directory) and warm.
"""

from __future__ import annotations

import contextlib
import math
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from smallinit.llm.model.transformer import Transformer
from smallinit.llm.run_config import ModelConfig, RunConfig, TrainConfig
from smallinit.llm.training.throughput import compile_break_even
from smallinit.llm.training.train import make_optimizer, train_step

pytestmark = [pytest.mark.bench, pytest.mark.usefixtures("bench_torch_threads")]

LAYERS, HEADS, D, CTX, BATCH, VOCAB, THREADS = 4, 4, 256, 128, 16, 4096, 2
TOKENS = BATCH * CTX


# ----------------------------------------------------------------------------- reference
class RefAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(D, 3 * D)
        self.c_proj = nn.Linear(D, D)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(D, dim=2)
        q, k, v = (t.view(B, T, HEADS, C // HEADS).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class RefBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(D), RefAttention()
        self.ln_2 = nn.LayerNorm(D)
        self.c_fc, self.c_proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x))))


class RefGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, D), nn.Embedding(CTX, D)
        self.h = nn.ModuleList(RefBlock() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, VOCAB, bias=False)
        self.wte.weight = self.lm_head.weight
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * LAYERS))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1])
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return logits, F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def ref_optimizer(model):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
        lr=1e-4,
        betas=(0.9, 0.95),
    )


# ----------------------------------------------------------------------------- harness
VARIANTS = {
    "gpt2-style (all options off)": dict(
        norm="layernorm", positions="learned", mlp="gelu", tie_embeddings=True, bias=True
    ),
    "llama default": {},
    "llama + gated attention": dict(gated_attention=True),
    "llama + attention-weights path": {},
}


class WeightsPath(nn.Module):
    """Our model forced through the explicit attention path (returns weights)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, idx, targets):
        logits, loss, _ = self.model(idx, targets, need_weights=True)
        return logits, loss


def data():
    g = torch.Generator().manual_seed(0)
    return (
        torch.randint(0, VOCAB, (BATCH, CTX), generator=g),
        torch.randint(0, VOCAB, (BATCH, CTX), generator=g),
    )


def ours(variant: str):
    cfg = ModelConfig(
        vocab_size=VOCAB,
        context=CTX,
        d_model=D,
        n_layers=LAYERS,
        n_heads=HEADS,
        **VARIANTS[variant],
    )
    model = Transformer(cfg, "nanogpt")
    opt = make_optimizer(model, RunConfig(), torch.device("cpu"))
    if variant.endswith("weights path"):
        model = WeightsPath(model)
    return model, opt


def step_fn(model, opt):
    x, y = data()
    return lambda: train_step(model, opt, x, y, lr=1e-4, clip=1.0, ctx=contextlib.nullcontext())


class Reference:
    """The reference step, timed in each round's (untimed) setup, so our step and the
    reference's alternate and the ratio is robust to load drifting on a shared machine."""

    def __init__(self):
        torch.manual_seed(0)
        model = RefGPT()
        self.step = step_fn(model, ref_optimizer(model))
        self.times: list[float] = []

    def setup(self) -> None:
        t0 = time.perf_counter()
        self.step()
        self.times.append(time.perf_counter() - t0)

    def tok_s(self, skip: int, fastest: bool = False) -> float:
        times = sorted(self.times[skip:])
        return TOKENS / (times[0] if fastest else times[len(times) // 2])


ROUNDS, WARMUP = 9, 2


def test_reference_nanogpt_step(benchmark):
    torch.manual_seed(0)
    model = RefGPT()
    step = step_fn(model, ref_optimizer(model))
    benchmark.pedantic(step, rounds=ROUNDS, warmup_rounds=WARMUP)
    tok_s = TOKENS / benchmark.stats.stats.median
    benchmark.extra_info.update(tokens_per_s=tok_s, ratio_to_reference=1.0)
    print(f"\nreference nanoGPT-style: {tok_s:,.0f} tokens/s")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_llm_train_step(benchmark, variant):
    ref = Reference()
    torch.manual_seed(0)
    model, opt = ours(variant)
    benchmark.pedantic(step_fn(model, opt), setup=ref.setup, rounds=ROUNDS, warmup_rounds=WARMUP)
    tok_s = TOKENS / benchmark.stats.stats.median
    ref_tok_s = ref.tok_s(skip=WARMUP)
    ratio = tok_s / ref_tok_s
    # fastest round against fastest round: what each step takes when nothing else runs,
    # the steadier estimate on a machine that other work shares
    ratio_fastest = TOKENS / benchmark.stats.stats.min / ref.tok_s(WARMUP, fastest=True)
    benchmark.extra_info.update(
        tokens_per_s=tok_s,
        reference_tokens_per_s=ref_tok_s,
        ratio_to_reference=ratio,
        ratio_of_fastest_rounds=ratio_fastest,
    )
    print(
        f"\n{variant}: {tok_s:,.0f} tokens/s, reference {ref_tok_s:,.0f}, "
        f"ratio {ratio:.3f} (fastest rounds: {ratio_fastest:.3f})"
    )


# ----------------------------------------------------------------------------- compile
COMPILE_SHAPES = {  # name: (model, threads)
    "bench shape, 2 threads": (
        dict(vocab_size=VOCAB, context=CTX, d_model=D, n_layers=LAYERS, n_heads=HEADS),
        THREADS,
    ),
    "quick shape (d_model 64), 1 thread": (
        dict(vocab_size=512, context=64, d_model=64, n_layers=2, n_heads=4),
        1,
    ),
}


@pytest.mark.parametrize("shape", list(COMPILE_SHAPES))
def test_compile_break_even(benchmark, shape, tmp_path, monkeypatch):
    model, threads = COMPILE_SHAPES[shape]
    torch.set_num_threads(threads)  # the fixture restores the previous count
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # cold: nothing built yet
    cfg = RunConfig(
        init="nanogpt",
        model=ModelConfig(**model),
        train=TrainConfig(batch_size=BATCH, device="cpu"),
    )
    cold = benchmark.pedantic(
        compile_break_even, args=(cfg,), kwargs={"rounds": 5}, rounds=1, iterations=1
    )
    warm = compile_break_even(cfg, rounds=5)  # the same cache directory, now filled
    info = {
        "eager_step_s": cold["eager_step_s"],
        "compiled_step_s": cold["compiled_step_s"],
        "step_speedup": cold["step_speedup"],
        "compile_s_cold": cold["compile_s"],
        "compile_s_warm": warm["compile_s"],
        "break_even_steps_cold": cold["break_even_steps"],
        "break_even_steps_warm": warm["break_even_steps"],
    }
    benchmark.extra_info.update(info)
    print(
        f"\n{shape}: "
        + ", ".join(f"{k} {v:.3g}" if v is not None else f"{k} never" for k, v in info.items())
    )
    assert cold["compile_s"] > 0 and cold["eager_step_s"] > 0 and cold["compiled_step_s"] > 0
