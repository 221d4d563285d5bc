"""The GPU-only code paths checked on the CPU with fakes: a CUDA run's memory is compared
with the GPU's memory (not host RAM), each torchrun rank binds its GPU before the process
group is made, and bf16 autocast keeps q and k in bf16 through RoPE."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as tdist

from smallinit.core import memory as core_memory
from smallinit.core.errors import ConfigError
from smallinit.core.store import RunStore
from smallinit.llm.run_config import ModelConfig, RunConfig, TrainConfig
from smallinit.llm.training import memory, train

GIB = 1024**3
#: a full-profile-sized step: ~38 GiB by the estimate (the plan's largest is 38.5 GiB)
BIG = RunConfig(
    model=ModelConfig(vocab_size=4096, context=256, d_model=1024, n_layers=6, n_heads=8),
    train=TrainConfig(batch_size=256, device="cuda"),
)


@pytest.fixture
def fake_gpu(monkeypatch):
    """A CUDA device of ``free`` bytes (set the attribute), and host memory of 8 GiB."""
    state = {"free": 139 * GIB}
    monkeypatch.delenv(core_memory.ENV, raising=False)
    monkeypatch.setattr(core_memory, "available_bytes", lambda: 8 * GIB)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i=0: (state["free"], 141 * GIB))
    return state


def test_a_cuda_run_is_checked_against_the_gpus_memory_not_host_ram(fake_gpu):
    estimate = memory.training_bytes(BIG.model, BIG.train.batch_size)
    assert 30 * GIB < estimate < 0.8 * 139 * GIB
    memory.check_training_memory(BIG, device="cuda:0")  # fits the GPU; host RAM is 8 GiB
    with pytest.raises(ConfigError, match=r"80% of the host memory available"):
        memory.check_training_memory(BIG, device="cpu")
    fake_gpu["free"] = 20 * GIB  # another process holds most of the GPU
    with pytest.raises(ConfigError, match=r"16\.0 GiB \(80% of the GPU memory \(NVIDIA H200\)"):
        memory.check_training_memory(BIG, device=torch.device("cuda", 0))


def test_the_memory_limit_variable_still_decides_for_a_gpu(fake_gpu, monkeypatch):
    monkeypatch.setenv(core_memory.ENV, "10G")
    with pytest.raises(ConfigError, match="limit of 10.0 GiB;"):
        memory.check_training_memory(BIG, device="cuda:0")


def test_each_torchrun_rank_binds_its_gpu_before_the_process_group(monkeypatch, tmp_path):
    """Rank 1 of 2 on one machine: set_device(1) comes first, then the NCCL group."""
    calls = []

    class Stop(Exception):
        pass

    def init_group(backend, *args, **kwargs):
        calls.append(("init_process_group", backend))
        raise Stop

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(train, "preflight", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: calls.append(("set_device", i)))
    monkeypatch.setattr(tdist, "is_initialized", lambda: False)
    monkeypatch.setattr(tdist, "init_process_group", init_group)
    cfg = RunConfig(train=TrainConfig(device="auto", batch_size=4))
    with pytest.raises(Stop):
        train.fit_run(RunStore(tmp_path), train.KIND, train.VERSION, cfg, lambda d: None)
    assert calls == [("set_device", 1), ("init_process_group", "nccl")]
    calls.clear()
    cpu = RunConfig(train=TrainConfig(device="cpu", batch_size=4))
    with pytest.raises(Stop):
        train.fit_run(RunStore(tmp_path), train.KIND, train.VERSION, cpu, lambda d: None)
    assert calls == [("init_process_group", "gloo")]  # a CPU run binds no GPU


def test_bf16_autocast_keeps_q_and_k_in_bf16_through_rope(monkeypatch):
    """Under bf16 autocast (CPU here, the same rule as CUDA's) attention receives q, k and v
    in bf16: RoPE's fp32 tables do not promote q and k to fp32."""
    from smallinit.llm.model import transformer

    seen = []
    sdpa = transformer.F.scaled_dot_product_attention

    def record(q, k, v, **kwargs):
        seen.append((q.dtype, k.dtype, v.dtype))
        return sdpa(q, k, v, **kwargs)

    monkeypatch.setattr(transformer.F, "scaled_dot_product_attention", record)
    cfg = ModelConfig(vocab_size=64, context=16, d_model=32, n_layers=2, n_heads=2)
    model = transformer.Transformer(cfg, "gamma:0.5")
    x = torch.randint(0, 64, (2, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, loss = model(x, x)
    loss.backward()
    assert seen == [(torch.bfloat16,) * 3] * 2
    assert torch.isfinite(loss) and loss.dtype == torch.float32


def test_compiled_the_loss_keeps_no_float32_copy_of_the_logits():
    """Under bf16 autocast the eager loss upcasts the tokens × vocabulary logits to an fp32
    copy (what ``Head.logits_and_loss`` says); compiled (every full-profile run), Inductor fuses the
    upcast into the loss's reductions: no float32 buffer of that size is allocated, forward
    or backward (read from the generated code; Inductor's CPU and GPU backends schedule the
    same fusion)."""
    import re

    from torch._inductor.utils import run_and_get_code

    from smallinit.llm.model.transformer import Transformer

    B, T, V = 4, 64, 1000
    model = Transformer(
        ModelConfig(vocab_size=V, context=T, d_model=32, n_layers=1, n_heads=2), "gamma:0.5"
    )
    h = torch.randn(B, T, 32, requires_grad=True)
    y = torch.randint(0, V, (B, T))
    loss_fn = torch.compile(model.head.logits_and_loss)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            _, loss = loss_fn(h, y)
        loss.backward()
        return loss

    loss, code = run_and_get_code(step)
    buffers = re.findall(
        r"empty_strided_\w+\(\((\d+), (\d+)\), \([^)]*\), torch\.(\w+)\)", "\n".join(code)
    )
    logits = [b for b in buffers if (int(b[0]), int(b[1])) == (B * T, V)]
    assert logits and {b[2] for b in logits} == {"bfloat16"}
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        _, eager = model.head.logits_and_loss(h, y)
    # the same bf16 logits either way; only the order of the fp32 sums differs (~1e-6)
    assert torch.isfinite(loss) and float(loss.detach()) == pytest.approx(float(eager), rel=1e-4)


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_the_trainers_adamw_is_the_fused_one_on_cuda_and_cpu(device):
    """One fused kernel per step for every parameter (``fused=True``), not the per-tensor
    loop nor the foreach one."""
    model = torch.nn.Linear(4, 3)
    opt = train.make_optimizer(model, RunConfig(), torch.device(device))
    assert opt.defaults["fused"] is True and not opt.defaults["foreach"]
