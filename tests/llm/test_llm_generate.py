"""Transformer.generate and its KV cache: the cache reproduces the full causal
forward (logits and greedy tokens) for every position/gating variant, left padding makes a
batched row continue as it would alone, the context slides, sampling follows
softmax(ℓ/T) over the top k and is reproducible from its seed; and `llm sample`."""

from __future__ import annotations

import json
import math

import pytest
import torch

from smallinit.core.errors import ConfigError
from smallinit.llm.model.generate import KVCache, pick_token
from smallinit.llm.model.transformer import Transformer
from smallinit.llm.run_config import ModelConfig

# greedy tokens compared exactly across the cached and the full forward: they agree on any
# kernels only while every argmax margin (≥ 1.6e-3 here) exceeds float32 rounding (~1e-6)
pytestmark = pytest.mark.kernel_sensitive

VARIANTS = {
    "rope": {},
    "learned": {"positions": "learned"},
    "rope gated": {"gated_attention": True},
    "learned gated headwise": {
        "positions": "learned",
        "gated_attention": True,
        "gate_kind": "headwise",
        "mlp": "gelu",
        "norm": "layernorm",
        "tie_embeddings": True,
        "bias": True,
    },
}


def model_of(extra, *, context=24, vocab=97, seed=0):
    torch.manual_seed(seed)
    cfg = ModelConfig(d_model=32, n_heads=4, n_layers=2, vocab_size=vocab, context=context, **extra)
    return Transformer(cfg).eval()


@pytest.mark.parametrize("variant", VARIANTS)
def test_cached_logits_equal_the_full_forward(variant):
    model = model_of(VARIANTS[variant])
    seq = torch.randint(0, 97, (3, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(seq)
        cache = KVCache(model.cfg, 3, 24)
        h, _ = model.hidden(seq[:, :9], cache=cache)  # prefill 9, then one token a step
        parts = [model.head(h)]
        for t in range(9, 24):
            h, _ = model.hidden(seq[:, t : t + 1], cache=cache)
            parts.append(model.head(h))
    assert cache.length == 24
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=1e-5, atol=1e-5)
    with torch.no_grad():  # in float64 the two agree to rounding of that precision
        model64 = model.double()
        cache = KVCache(model64.cfg, 3, 24)
        first = model64.head(model64.hidden(seq[:, :9], cache=cache)[0])
        rest = [
            model64.head(model64.hidden(seq[:, t : t + 1], cache=cache)[0]) for t in range(9, 24)
        ]
        torch.testing.assert_close(
            torch.cat([first, *rest], dim=1), model64(seq), rtol=1e-12, atol=1e-12
        )


@pytest.mark.parametrize("variant", VARIANTS)
def test_greedy_with_cache_equals_recomputing_each_step(variant):
    model = model_of(VARIANTS[variant])
    idx = torch.randint(0, 97, (3, 8), generator=torch.Generator().manual_seed(2))
    cached = model.generate(idx, 12, temperature=0)
    plain = model.generate(idx, 12, temperature=0, use_cache=False)
    assert cached.shape == (3, 20) and torch.equal(cached[:, :8], idx)
    assert torch.equal(cached, plain)
    # nanoGPT's loop, written out: argmax of the last position of the full forward
    seq = idx
    with torch.no_grad():
        for _ in range(12):
            nxt = model(seq[:, -model.cfg.context :])[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], dim=1)
    assert torch.equal(cached, seq)


@pytest.mark.parametrize("variant", ["rope", "learned"])
def test_past_the_context_the_window_slides(variant):
    model = model_of(VARIANTS[variant], context=16)
    idx = torch.randint(0, 97, (2, 20), generator=torch.Generator().manual_seed(3))
    out = model.generate(idx, 10, temperature=0)  # the prompt alone exceeds the context
    assert torch.equal(out, model.generate(idx, 10, temperature=0, use_cache=False))
    # the continuation depends only on the last `context` tokens of the prompt
    tail = model.generate(idx[:, -16:], 10, temperature=0)
    assert torch.equal(out[:, 20:], tail[:, 16:])
    short = torch.randint(0, 97, (2, 5), generator=torch.Generator().manual_seed(4))
    long = model.generate(short, 30, temperature=0)  # slides part way through
    assert torch.equal(long, model.generate(short, 30, temperature=0, use_cache=False))


@pytest.mark.parametrize("variant", ["rope", "learned gated headwise"])
def test_left_padded_rows_continue_as_they_would_alone(variant):
    model = model_of(VARIANTS[variant])
    g = torch.Generator().manual_seed(5)
    rows = [torch.randint(1, 97, (n,), generator=g) for n in (3, 9, 6)]
    x = torch.zeros(3, 9, dtype=torch.long)
    for r, row in enumerate(rows):
        x[r, 9 - len(row) :] = row
    out = model.generate(x, 10, temperature=0, prompt_lengths=[3, 9, 6])
    for r, row in enumerate(rows):
        alone = model.generate(row[None], 10, temperature=0)
        assert torch.equal(out[r, 9:], alone[0, len(row) :]), r
    assert torch.equal(
        out, model.generate(x, 10, temperature=0, prompt_lengths=[3, 9, 6], use_cache=False)
    )


def test_stop_tokens_and_until_end_rows_and_pad_the_rest():
    model = model_of({})
    idx = torch.randint(0, 97, (2, 6), generator=torch.Generator().manual_seed(6))
    free = model.generate(idx, 10, temperature=0)
    stop = int(free[0, 6 + 3])  # row 0 emits it at its 4th step
    first_in_row1 = [j for j in range(10) if int(free[1, 6 + j]) == stop]
    out = model.generate(idx, 10, temperature=0, stop_tokens=[stop], pad_id=-1)
    assert torch.equal(out[0, :10], free[0, :10]) and (out[0, 10:] == -1).all()
    end1 = 6 + (first_in_row1[0] + 1 if first_in_row1 else 10)
    assert torch.equal(out[1, :end1], free[1, :end1]) and (out[1, end1:] == -1).all()
    calls = []

    def until(row, new):
        calls.append((row, len(new)))
        return len(new) == 2 + row  # row 0 after 2 tokens, row 1 after 3

    out = model.generate(idx, 10, temperature=0, until=until, pad_id=-7)
    assert out.shape == (2, 9)  # decoding ended when both rows stopped
    assert torch.equal(out[0, :8], free[0, :8]) and int(out[0, 8]) == -7
    assert torch.equal(out[1], free[1, :9])
    assert calls == [(0, 1), (1, 1), (0, 2), (1, 2), (1, 3)]


def test_sampling_is_seeded_and_the_cache_draws_the_same_tokens():
    model = model_of({"gated_attention": True})
    idx = torch.randint(0, 97, (4, 5), generator=torch.Generator().manual_seed(7))

    def draw(seed, **kw):
        return model.generate(
            idx, 15, temperature=0.9, top_k=20, generator=torch.Generator().manual_seed(seed), **kw
        )

    assert torch.equal(draw(0), draw(0))
    assert torch.equal(draw(0), draw(0, use_cache=False))
    assert not torch.equal(draw(0), draw(1))
    greedy = model.generate(idx, 15, temperature=0)
    assert torch.equal(
        model.generate(
            idx, 15, temperature=2.0, top_k=1, generator=torch.Generator().manual_seed(3)
        ),
        greedy,
    )


def test_pick_token_follows_the_tempered_top_k_softmax():
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0]])
    n = 40_000
    g = torch.Generator().manual_seed(0)
    draws = pick_token(logits.expand(n, -1), 0.7, 4, g)
    counts = torch.bincount(draws, minlength=6).double()
    assert counts[4:].sum() == 0  # outside the top 4: never drawn
    p = torch.softmax(logits[0, :4].double() / 0.7, dim=0)
    se = torch.sqrt(p * (1 - p) / n)
    assert ((counts[:4] / n - p).abs() < 4 * se).all()  # each frequency within 4 s.e.
    assert torch.equal(pick_token(logits, 0.0, None), torch.tensor([0]))


def test_generate_refuses_meaningless_settings():
    model = model_of({})
    idx = torch.zeros(2, 4, dtype=torch.long)
    for kw, word in [
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": math.nan}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"prompt_lengths": [4, 0]}, "prompt_lengths"),
        ({"prompt_lengths": [5, 4]}, "prompt_lengths"),
        ({"prompt_lengths": [4]}, "prompt_lengths"),
    ]:
        with pytest.raises(ConfigError, match=word):
            model.generate(idx, 3, **kw)
    with pytest.raises(ConfigError, match="max_new_tokens"):
        model.generate(idx, -1)
    with pytest.raises(ConfigError, match="at least one token"):
        model.generate(idx[:, :0], 3)
    assert torch.equal(model.generate(idx, 0), idx)


def test_the_training_forward_is_untouched_by_the_decoding_path():
    """Without a cache or padding the forward is the plain causal one: equal to the
    explicit softmax path, and to the decoding path with zero padding."""
    model = model_of({"positions": "learned", "gated_attention": True})
    seq = torch.randint(0, 97, (2, 24), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        plain = model(seq)
        explicit, _, weights = model(seq, need_weights=True)
        padded = model.head(model.hidden(seq, pad=torch.zeros(2, dtype=torch.long))[0])
    torch.testing.assert_close(plain, explicit, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(plain, padded, rtol=1e-5, atol=1e-5)
    assert torch.allclose(weights[0].triu(1), torch.zeros(()))  # causal


# ----------------------------------------------------------------------------- llm sample
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from smallinit.core.config import load_config
    from smallinit.llm.run_config import RunConfig
    from smallinit.llm.training.train import train

    root = tmp_path_factory.mktemp("sample")
    cfg = load_config(
        RunConfig,
        None,
        [
            "model.d_model=32",
            "model.n_layers=1",
            "model.n_heads=2",
            "model.vocab_size=320",
            "model.context=32",
            "train.steps=8",
            "train.batch_size=4",
            "train.eval_every=0",
            "data.synthetic_items=100",
            "data.synthetic_val_items=20",
            "train.checkpoint_every=0",
            "eval.answer_items=4",
            "eval.token_windows=2",
            f"data.cache_dir={root / 'cache'}",
        ],
    )
    run = train(cfg, runs_dir=root / "runs")
    assert run.done
    return run, root / "runs"


def _sample(capsys, run, runs, *extra):
    from smallinit.cli import main

    capsys.readouterr()
    assert main(["llm", "sample", str(run.path), "--runs-dir", str(runs), *extra]) == 0
    return capsys.readouterr()


def test_llm_sample_is_seeded_greedy_at_temperature_zero_and_prints_json(tiny_run, capsys):
    from smallinit.llm.downstream.run import load_trained
    from smallinit.llm.training.trained import resolve_run

    run, runs = tiny_run
    prompt = "Question: what is 2 plus 3?\nAnswer:"
    args = ["--prompt", prompt, "--max-new-tokens", "12"]
    one = _sample(capsys, run, runs, *args, "--seed", "5").out
    assert one == _sample(capsys, run, runs, *args, "--seed", "5").out
    assert one != _sample(capsys, run, runs, *args, "--seed", "6").out
    three = [*args, "--seed", "5", "--json", "--num-samples", "3"]
    out = json.loads(_sample(capsys, run, runs, *three).out)
    assert out == json.loads(_sample(capsys, run, runs, *three).out)
    assert len(out["samples"]) == 3 and out["prompt_tokens"] > 1
    assert len({s["text"] for s in out["samples"]}) > 1  # independent draws
    greedy = json.loads(_sample(capsys, run, runs, *args, "--temperature", "0", "--json").out)[
        "samples"
    ][0]
    model, tok, _, eot = load_trained(resolve_run(str(run.path), runs))
    ids = tok.encode(prompt, add_special_tokens=False).ids
    ref = model.generate(torch.tensor([ids]), 12, temperature=0)[0, len(ids) :].tolist()
    if eot in ref:
        ref = ref[: ref.index(eot)]
    assert greedy["text"] == tok.decode(ref) and greedy["tokens"] == len(ref)
    assert greedy["stopped"] == (len(ref) < 12)
    long = _sample(capsys, run, runs, "--prompt", "word " * 40, "--max-new-tokens", "4")
    assert "sliding window" in long.err
