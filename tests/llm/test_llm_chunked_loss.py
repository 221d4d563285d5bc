"""The chunked output layer + cross-entropy equals the plain path: loss and the gradients of
the hidden states, weights and bias, in float64 to 1e-12, in float32 to 2e-6 relative and
under bf16 autocast to 2e-2 relative (the matmuls in bf16 both ways; the plain path rounds
the weight gradient to bf16 once, the chunked one each block); through the model, the
trainer and ``torch.compile``; and a dropped block or a softmax over one logit too few is
caught by the same comparison."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from smallinit.core.config import load_config
from smallinit.core.errors import ConfigError
from smallinit.llm.model import chunked_loss
from smallinit.llm.model.chunked_loss import chunked_cross_entropy
from smallinit.llm.model.transformer import Transformer
from smallinit.llm.run_config import ModelConfig, RunConfig, TrainConfig

N, D, V = 37, 12, 50  # 37 rows: no chunk size below divides them evenly


def inputs(dtype, bias=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(N, D, generator=gen, dtype=torch.float64).to(dtype).requires_grad_()
    w = (torch.randn(V, D, generator=gen, dtype=torch.float64) / D**0.5).to(dtype)
    w.requires_grad_()
    b = (
        (0.1 * torch.randn(V, generator=gen, dtype=torch.float64)).to(dtype).requires_grad_()
        if bias
        else None
    )
    y = torch.randint(0, V, (N,), generator=gen)
    y[[3, 20]] = -100  # ignored targets count in neither the sum nor the mean
    return h, w, b, y


def loss_and_grads(fn, h, w, b, y):
    leaves = [t for t in (h, w, b) if t is not None]
    loss = fn(h, w, b, y)
    return [loss.detach(), *torch.autograd.grad(loss, leaves)]


def plain(h, w, b, y):
    return F.cross_entropy(
        F.linear(h, w, b).float() if h.dtype != torch.float64 else F.linear(h, w, b), y
    )


def chunked(chunk):
    return lambda h, w, b, y: chunked_cross_entropy(h, w, b, y, chunk)


def max_rel_error(chunk, dtype, bias=True):
    """The largest relative error of the chunked loss and gradients against the plain path."""
    args = inputs(dtype, bias)
    want, got = loss_and_grads(plain, *args), loss_and_grads(chunked(chunk), *args)
    return max(float((g - p).abs().max() / p.abs().max()) for g, p in zip(got, want, strict=True))


@pytest.mark.parametrize("chunk", [1, 5, 8, 36, 37, 1000])
@pytest.mark.parametrize("bias", [True, False])
def test_chunked_equals_plain_in_float64(chunk, bias):
    assert max_rel_error(chunk, torch.float64, bias) < 1e-12


@pytest.mark.parametrize("chunk", [4, 16])
def test_chunked_equals_plain_in_float32(chunk):
    assert max_rel_error(chunk, torch.float32) < 2e-6


def test_chunked_equals_plain_under_bf16_autocast():
    h, w, b, y = inputs(torch.float32, bias=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = loss_and_grads(plain, h, w, b, y)
        got = loss_and_grads(chunked(8), h, w, b, y)
    for g, p in zip(got, want, strict=True):
        assert g.dtype == p.dtype
        assert float((g - p).abs().max() / p.abs().max()) < 2e-2


def test_a_dropped_block_is_caught(monkeypatch):
    blocks = chunked_loss._blocks
    monkeypatch.setattr(chunked_loss, "_blocks", lambda n, c: blocks(n, c)[:-1])
    assert max_rel_error(8, torch.float64) > 1e-3


def test_a_softmax_over_one_logit_too_few_is_caught(monkeypatch):
    lse = torch.logsumexp
    monkeypatch.setattr(torch, "logsumexp", lambda z, dim: lse(z[:, :-1], dim))
    assert max_rel_error(8, torch.float64) > 1e-3


def test_a_chunk_below_one_is_refused():
    h, w, b, y = inputs(torch.float64)
    with pytest.raises(ValueError, match="chunk=0 is not allowed; it must be >= 1"):
        chunked_cross_entropy(h, w, b, y, 0)
    with pytest.raises(ConfigError, match=r"train.loss_chunk=-1 is not allowed; it must be >= 0"):
        load_config(RunConfig, None, ["train.loss_chunk=-1"])


SMALL = ModelConfig(vocab_size=96, context=16, d_model=24, n_layers=2, n_heads=2)


def model_loss_and_grads(chunk: int, compile: bool = False):
    torch.manual_seed(0)
    model = Transformer(SMALL, "gamma:0.5", seed=0).double()
    model.head.loss_chunk = chunk
    x = torch.randint(0, SMALL.vocab_size, (3, SMALL.context))
    y = torch.randint(0, SMALL.vocab_size, (3, SMALL.context))
    logits, loss = (torch.compile(model) if compile else model)(x, y)
    loss.backward()
    return logits, loss.detach(), [p.grad for p in model.parameters()]


@pytest.mark.parametrize("compile", [False, True])
def test_the_models_loss_and_every_gradient_match_through_the_chunked_head(compile):
    logits, loss, grads = model_loss_and_grads(0)
    none, chunked_loss_value, chunked_grads = model_loss_and_grads(10, compile)
    assert logits is not None and none is None  # the chunked path builds no logits
    assert float(abs(chunked_loss_value - loss)) < 1e-12
    for g, p in zip(chunked_grads, grads, strict=True):
        assert float((g - p).abs().max()) <= 1e-12 * max(float(p.abs().max()), 1.0)


def test_the_trainer_takes_the_chunk_from_the_config(monkeypatch, tmp_path):
    """``train.loss_chunk`` reaches the trainer's head, and the run's losses match the plain
    run's (float32: to 1e-5 relative after 6 AdamW steps)."""
    from smallinit.llm.training import train as train_mod

    seen = []
    original = train_mod.train_step

    def spy(objective, *args, **kwargs):
        seen.append(getattr(objective, "head", objective).loss_chunk)
        return original(objective, *args, **kwargs)

    monkeypatch.setattr(train_mod, "train_step", spy)
    base = [
        "model.vocab_size=96",
        "model.context=16",
        "model.d_model=24",
        "model.n_layers=2",
        "model.n_heads=2",
        "data.synthetic_items=300",
        "data.synthetic_val_items=60",
        "train.batch_size=4",
        "train.steps=6",
        "train.log_every=1",
        "train.eval_every=0",
        "train.eval_batches=1",
        "train.checkpoint_every=0",
        "train.threads=1",
        "train.device=cpu",
        "eval.answer_items=2",
        "eval.token_windows=1",
        "data.tokenizer=char",
        f"data.cache_dir={tmp_path / 'cache'}",
    ]
    runs = {}
    for chunk in (0, 7):
        cfg = load_config(RunConfig, None, [*base, f"train.loss_chunk={chunk}"])
        run = train_mod.train(cfg, runs_dir=tmp_path / f"runs{chunk}", callbacks=[])
        runs[chunk] = [r["loss"] for r in run.metrics() if "loss" in r]
    assert set(seen) == {0, 7}
    assert runs[7] == pytest.approx(runs[0], rel=1e-5)
    assert TrainConfig().loss_chunk == 0  # the plain path unless asked


def test_a_run_with_the_chunked_loss_trains_alone_never_in_a_population():
    from smallinit.core.config import override
    from smallinit.llm.training import population

    cfg = override(RunConfig(), {"train.loss_chunk": 512})
    assert population.population_key(cfg, "on") is None
    assert population.population_key(RunConfig(), "on") is not None
    with pytest.raises(ConfigError, match=r"train.loss_chunk=512 is not allowed in a population"):
        population.check_population([cfg, override(cfg, {"seed": 1})])
