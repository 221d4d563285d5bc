"""The CPU fast path (smallinit.llm.model.fastpath) gives PyTorch's composite numbers bit
for bit: each function alone, and whole training steps of the model with it on and off;
the model is built from its layers (smallinit.llm.model.fastlayers) once, and a model
moved off the CPU or out of float32 afterwards runs the plain layers' code."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time

import pytest
import torch
import torch.nn.functional as F

from smallinit.llm.model import fastpath
from smallinit.llm.model.fastlayers import FAST_PARTS, chosen_parts
from smallinit.llm.model.layers import PLAIN_PARTS, apply_rope, rope_tables
from smallinit.llm.model.transformer import Transformer
from smallinit.llm.run_config import ModelConfig, RunConfig
from smallinit.llm.training.train import make_optimizer, train_step

# bit-identical to the composites on every machine: checked again under other SIMD kernels
pytestmark = pytest.mark.kernel_sensitive


@pytest.fixture
def composite(monkeypatch):
    """A context in which the fast path is off (PyTorch's composites everywhere)."""

    @contextlib.contextmanager
    def off():
        with monkeypatch.context() as m:
            m.setattr(fastpath, "enabled", lambda x: False)
            yield

    return off


def grads(fn, inputs, seed=1):
    """Output and gradients of ``fn(*inputs)`` under a random upstream gradient; each
    input is used twice (once through ``fn``, once directly), as a residual stream is,
    so that the order in which gradient terms are summed is tested too."""
    leaves = [t.clone().requires_grad_() for t in inputs]
    mids = [leaf * 1.5 for leaf in leaves]
    out = fn(*mids)
    gen = torch.Generator().manual_seed(seed)
    g_out, g_direct = (
        torch.randn(out.shape, generator=gen),
        torch.randn(mids[0].shape, generator=gen),
    )
    ((out * g_out).sum() + (mids[0] * g_direct).sum()).backward()
    return [out.detach()] + [leaf.grad for leaf in leaves]


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_rms_norm_is_the_composite_bitwise():
    torch.manual_seed(0)
    x, w = torch.randn(4, 32, 48) * 3, torch.randn(48)
    fast = grads(lambda x, w: fastpath.rms_norm(x, w, 1e-5), [x, w])
    ref = grads(lambda x, w: F.rms_norm(x, [48], w, 1e-5), [x, w])
    assert same(fast, ref)
    # and it is RMSNorm: w ⊙ x / √(mean(x²) + ε) in float64 agrees to float rounding
    x64 = x.double()
    expect = w.double() * x64 / (x64.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt()
    torch.testing.assert_close(fastpath.rms_norm(x, w, 1e-5), expect.float())


def test_swiglu_is_the_composite_bitwise():
    torch.manual_seed(0)
    h = torch.randn(4, 32, 2 * 40)

    def composite(h):
        gate, up = h.chunk(2, dim=-1)
        return F.silu(gate) * up

    assert same(grads(fastpath.swiglu, [h]), grads(composite, [h]))


def test_gelu_is_the_composite_bitwise():
    torch.manual_seed(0)
    h = torch.randn(4, 32, 72)
    assert same(grads(fastpath.gelu, [h]), grads(F.gelu, [h]))


def test_rotary_qkv_is_rope_bitwise():
    torch.manual_seed(0)
    B, T, H, hd = 3, 16, 2, 8
    cos, sin = rope_tables(T, hd, 10000.0)
    qkv = torch.randn(B, T, 3 * H * hd)

    def fast(qkv):
        q, k, v = fastpath.rotary_qkv(qkv.view(B, T, 3, H, hd), cos, sin)
        return torch.cat([q, k, v], dim=-1)

    def composite(qkv):
        q, k, v = qkv.view(B, T, 3, H, hd).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return torch.cat([q, k, v], dim=-1)

    assert same(grads(fast, [qkv]), grads(composite, [qkv]))
    # RoPE is a rotation: it keeps each pair's norm, and position 0 is not rotated
    q = fast(qkv)[..., :hd]
    raw = qkv.view(B, T, 3, H, hd)[:, :, 0].transpose(1, 2)
    torch.testing.assert_close(q.norm(dim=-1), raw.norm(dim=-1))
    assert torch.equal(q[:, :, 0], raw[:, :, 0])


def test_cross_entropy_is_the_composite_bitwise():
    torch.manual_seed(0)
    for n, v in ((64, 50), (64, 50), (30, 7)):  # again (the buffer reused), then resized
        logits, t = torch.randn(n, v) * 4, torch.randint(0, v, (n,))
        t[3] = -100  # F.cross_entropy's ignore_index: no loss, no gradient
        out = grads(lambda x, t=t: fastpath.cross_entropy(x, t), [logits])
        assert same(out, grads(lambda x, t=t: F.cross_entropy(x, t), [logits]))
        # and it is the cross-entropy: mean over counted rows of −log softmax(x)[target]
        keep = t != -100
        expect = (
            -logits[keep].double().log_softmax(-1)[torch.arange(int(keep.sum())), t[keep]].mean()
        )
        torch.testing.assert_close(fastpath.cross_entropy(logits, t).double(), expect)


VARIANTS = {
    "llama": {},
    "gated, post-norm": dict(gated_attention=True, norm_position="post", bias=True),
    "gpt2-style": dict(
        norm="layernorm", positions="learned", mlp="gelu", tie_embeddings=True, bias=True
    ),
}


def train(cfg, steps=3, need_weights=False, parts=None):
    torch.manual_seed(0)
    model = Transformer(cfg, "nanogpt", parts=parts)
    opt = make_optimizer(model, RunConfig(), torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    losses = []

    def objective(x, y):
        out = model(x, y, need_weights=need_weights)
        return out[:2]

    x, y = (torch.randint(0, cfg.vocab_size, (4, cfg.context), generator=g) for _ in range(2))
    for _ in range(steps):  # one batch, learned a little more each step
        losses.append(train_step(objective, opt, x, y, lr=1e-3, clip=1.0))
    return torch.stack(losses), [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_training_steps_agree_bitwise_with_the_composites(variant, composite):
    cfg = ModelConfig(
        vocab_size=64, context=16, d_model=32, n_layers=2, n_heads=4, **VARIANTS[variant]
    )
    fast_losses, fast_params = train(cfg)
    with composite():
        ref_losses, ref_params = train(cfg)
    assert torch.equal(fast_losses, ref_losses)
    assert same(fast_params, ref_params)
    assert fast_losses[-1] < fast_losses[0]  # it trains


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_model_built_from_the_plain_layers_trains_to_the_same_bits(variant):
    cfg = ModelConfig(
        vocab_size=64, context=16, d_model=32, n_layers=2, n_heads=4, **VARIANTS[variant]
    )
    fast_losses, fast_params = train(cfg)
    plain_losses, plain_params = train(cfg, parts=PLAIN_PARTS)
    assert torch.equal(fast_losses, plain_losses)
    assert same(fast_params, plain_params)


def test_attention_weights_path_agrees_bitwise(composite):
    cfg = ModelConfig(vocab_size=64, context=16, d_model=32, n_layers=2, n_heads=4)
    fast = train(cfg, steps=2, need_weights=True)
    with composite():
        ref = train(cfg, steps=2, need_weights=True)
    assert torch.equal(fast[0], ref[0]) and same(fast[1], ref[1])


# ----------------------------------------------------------------------------- the layers
def pair(variant, **extra):
    """A model of the fast path's layers and one of the plain layers, same weights."""
    cfg = ModelConfig(
        vocab_size=64, context=16, d_model=32, n_layers=2, n_heads=4, **VARIANTS[variant], **extra
    )
    torch.manual_seed(0)
    fast = Transformer(cfg, "nanogpt", parts=FAST_PARTS)
    torch.manual_seed(0)
    return fast, Transformer(cfg, "nanogpt", parts=PLAIN_PARTS)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_both_builds_have_the_same_state_dict_and_matrix_table(variant):
    fast, plain = pair(variant)
    assert chosen_parts() is FAST_PARTS  # the default build, this process not opted out
    assert type(Transformer(fast.cfg).blocks[0].mlp) is FAST_PARTS.mlp
    assert type(plain.blocks[0].mlp) is PLAIN_PARTS.mlp
    assert list(fast.state_dict()) == list(plain.state_dict())
    assert same(fast.state_dict().values(), plain.state_dict().values())

    def table(model):  # what the init and the measurements read of each matrix
        return [
            (
                m.name,
                m.index,
                m.part,
                m.d_in,
                m.d_out,
                m.layer,
                m.residual_out,
                m.kind,
                m.bias is None,
                m.in_out,
            )
            for m in model.matrices()
        ]

    assert table(fast) == table(plain) and len(table(fast)) > 5


@pytest.fixture
def fast_functions_refused(monkeypatch):
    """Every function of the fast path raises: a model that reaches one fails."""

    def refused(*args, **kwargs):
        raise AssertionError("a fast-path function ran")

    for name in ("rms_norm", "swiglu", "gelu", "rotary_qkv", "head", "cross_entropy"):
        monkeypatch.setattr(fastpath, name, refused)


def loss_and_grads(model, x, y):
    model.zero_grad()
    logits, loss = model(x, y)
    loss.backward()
    return [logits.detach(), loss.detach()] + [p.grad for p in model.parameters()]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_model_cast_to_float64_after_building_runs_the_plain_layers(
    variant, fast_functions_refused
):
    fast, plain = pair(variant)
    x, y = (
        torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0)) for _ in range(2)
    )
    with pytest.raises(AssertionError, match="fast-path function ran"):
        fast(x, y)  # in float32 on the CPU the fast layers do take the fast path
    fast, plain = fast.double(), plain.double()
    assert same(loss_and_grads(fast, x, y), loss_and_grads(plain, x, y))


def test_a_model_moved_to_another_device_runs_the_plain_layers(fast_functions_refused):
    fast, _ = pair("llama")
    fast = fast.to("meta")  # storage-free, so it runs anywhere: shapes only
    x = torch.zeros(2, 16, dtype=torch.long, device="meta")
    logits, loss = fast(x, x)
    loss.backward()
    assert logits.shape == (2, 16, 64) and fast.head.weight.grad.device.type == "meta"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_model_moved_to_cuda_computes_what_the_plain_one_does(variant, fast_functions_refused):
    fast, plain = pair(variant)
    fast, plain = fast.to("cuda"), plain.to("cuda")
    x, y = (torch.randint(0, 64, (2, 16), device="cuda") for _ in range(2))
    with torch.no_grad():
        assert same(fast(x, y), plain(x, y))


def test_fastpath_off_builds_the_plain_layers():
    """``SMALLINIT_FASTPATH=0`` (read when the process imports the fast path) gives models
    of the plain layers, which never call a fast-path function."""
    code = (
        "import torch\n"
        "from smallinit.llm.run_config import ModelConfig\n"
        "from smallinit.llm.model import fastpath\n"
        "from smallinit.llm.model.layers import PLAIN_PARTS\n"
        "from smallinit.llm.model.transformer import Transformer\n"
        "m = Transformer(ModelConfig(vocab_size=64, context=16, d_model=32, n_layers=1,"
        " n_heads=4))\n"
        "kinds = {type(m.blocks[0].norm1), type(m.blocks[0].attn), type(m.blocks[0].mlp),"
        " type(m.head)}\n"
        "print(kinds == {PLAIN_PARTS.rmsnorm, PLAIN_PARTS.attention, PLAIN_PARTS.mlp,"
        " PLAIN_PARTS.head}, fastpath.enabled(torch.ones(2)))\n"
    )
    for value, expect in (("0", "True False"), ("1", "False True")):
        env = {**os.environ, "SMALLINIT_FASTPATH": value}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.split() == expect.split(), out.stderr


def test_enabled_only_for_eager_fp32_cpu():
    x = torch.ones(2)
    assert fastpath.enabled(x)
    assert not fastpath.enabled(x.double())
    assert not fastpath.enabled(torch.ones(2, device="meta"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not fastpath.enabled(x)


def test_recycled_logits_are_never_overwritten_while_held():
    cfg = ModelConfig(vocab_size=64, context=16, d_model=32, n_layers=1, n_heads=4)
    model = Transformer(cfg, "nanogpt")
    g = torch.Generator().manual_seed(0)
    batches = [[torch.randint(0, 64, (4, 16), generator=g) for _ in range(2)] for _ in range(3)]
    kept, copies = [], []
    for x, y in batches:  # each call's logits stay held while the next calls run
        logits, loss = model(x, y)
        loss.backward()
        kept.append(logits)
        copies.append(logits.detach().clone())
    assert all(torch.equal(a, b) for a, b in zip(kept, copies, strict=True))
    assert len({t.data_ptr() for t in kept}) == 3  # three live buffers, none shared
    with torch.no_grad():
        assert torch.equal(model(batches[0][0]), copies[0])  # logits alone: the plain head


def test_released_buffers_are_reused_by_the_next_step():
    cfg = ModelConfig(vocab_size=64, context=16, d_model=32, n_layers=1, n_heads=4)
    model = Transformer(cfg, "nanogpt")
    opt = make_optimizer(model, RunConfig(), torch.device("cpu"))
    x, y = (
        torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(0)) for _ in range(2)
    )
    homes = []

    def objective(x, y):
        logits, loss = model(x, y)
        bases = fastpath._POOL.pool[((64, 64), torch.float32, torch.device("cpu"))]
        homes.append(
            next((i for i, b in enumerate(bases) if b.data_ptr() == logits.data_ptr()), None)
        )
        return logits, loss

    for _ in range(6):
        train_step(objective, opt, x, y, lr=1e-3, clip=1.0)
    # every step's logits live in one of the three buffers a step needs (logits, log-probs,
    # the NLL gradient), none made afresh after the first step
    assert None not in homes and set(homes) <= {0, 1, 2}


def test_a_second_backward_through_the_fast_cross_entropy_is_refused():
    """Its backward writes the gradient over the saved log-probs, so a second backward
    would read garbage: it must stop with a clear error instead."""
    logits = torch.randn(6, 11, requires_grad=True)
    loss = fastpath.cross_entropy(logits, torch.randint(0, 11, (6,)))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="one backward per forward"):
        loss.backward()


def test_threads_never_share_a_recycled_buffer(monkeypatch):
    """Buffers are handed out under a lock, each as a view made before the lock is let go:
    two threads taking and holding buffers of one shape never get the same memory. The
    check "is this buffer free" is slowed down so that, without the lock, the other thread
    would find the same buffer free in between."""
    unshared = fastpath._unshared

    def slow_unshared(base):
        free = unshared(base)
        time.sleep(1e-4)  # let the other thread run between the check and the hand-out
        return free

    monkeypatch.setattr(fastpath, "_unshared", slow_unshared)
    pool = fastpath._Recycler(shapes=1, per_shape=1)  # one buffer, which both threads want
    like = torch.empty(0)
    guard, live, clashes = threading.Lock(), set(), []
    start = threading.Barrier(2)

    def take():
        start.wait()
        for _ in range(200):
            buf = pool.get((64, 64), like)
            with guard:
                if buf.data_ptr() in live:
                    clashes.append(buf.data_ptr())
                live.add(buf.data_ptr())
            time.sleep(0)  # hold it a moment
            with guard:
                live.discard(buf.data_ptr())
            del buf

    threads = [threading.Thread(target=take) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert clashes == []


def test_the_recycler_keeps_at_most_its_byte_budget():
    """Buffers beyond ``max_bytes`` are handed out but not kept: a long CPU run's recycled
    memory is bounded whatever the model's size."""
    pool = fastpath._Recycler(shapes=4, per_shape=16, max_bytes=3 * 64 * 64 * 4)
    like = torch.empty(0)
    held = [pool.get((64, 64), like) for _ in range(5)]  # five live at once
    assert len({t.data_ptr() for t in held}) == 5
    assert pool.kept_bytes() == 3 * 64 * 64 * 4
    del held
    again = [pool.get((64, 64), like) for _ in range(3)]  # the kept three come back
    assert {t.untyped_storage().data_ptr() for t in again} == {
        b.untyped_storage().data_ptr()
        for b in pool.pool[((64, 64), torch.float32, torch.device("cpu"))]
    }
