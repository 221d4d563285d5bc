"""Greedy generation with and without the KV cache (``make bench``).

Config: the quick profile's model (n_layers 4, n_heads 4, d_model 128, vocab 1024) with
context 256, a batch of 8 prompts of 100 tokens, 32 new tokens, 2 CPU threads. The
uncached path recomputes the whole window for every new token (what the benchmarks did
before the cache); it is timed in each round's setup, alternating with the cached one, so
the ratio in ``extra_info`` is robust to load drifting on a shared machine.
"""

from __future__ import annotations

import time

import pytest
import torch

from smallinit.llm.model.transformer import Transformer
from smallinit.llm.run_config import ModelConfig

pytestmark = [pytest.mark.bench, pytest.mark.usefixtures("bench_torch_threads")]

BATCH, PROMPT, NEW, THREADS = 8, 100, 32, 2
ROUNDS, WARMUP = 3, 1


def test_generate_kv_cache_against_recompute(benchmark):
    torch.manual_seed(0)
    model = Transformer(
        ModelConfig(vocab_size=1024, context=256, d_model=128, n_layers=4, n_heads=4)
    ).eval()
    idx = torch.randint(0, 1024, (BATCH, PROMPT), generator=torch.Generator().manual_seed(0))
    plain_times: list[float] = []

    def plain():
        t0 = time.perf_counter()
        model.generate(idx, NEW, temperature=0, use_cache=False)
        plain_times.append(time.perf_counter() - t0)

    out = benchmark.pedantic(
        lambda: model.generate(idx, NEW, temperature=0),
        setup=plain,
        rounds=ROUNDS,
        warmup_rounds=WARMUP,
    )
    assert torch.equal(out, model.generate(idx, NEW, temperature=0, use_cache=False))
    cached = benchmark.stats.stats.median
    times = sorted(plain_times[WARMUP:])
    recompute = times[len(times) // 2]
    tokens = BATCH * NEW
    benchmark.extra_info.update(
        tokens_per_s=tokens / cached,
        recompute_tokens_per_s=tokens / recompute,
        speedup=recompute / cached,
    )
    print(
        f"\nKV cache: {tokens / cached:,.0f} new tokens/s, recompute "
        f"{tokens / recompute:,.0f}, speed-up {recompute / cached:.1f}x"
    )
