"""``train.compile``: a compiled training step computes the eager step's numbers to float
rounding (Inductor fuses and reorders the elementwise work, so not bit for bit)."""

from __future__ import annotations

import pytest
import torch

from smallinit.llm.model.transformer import Transformer
from smallinit.llm.run_config import ModelConfig, RunConfig
from smallinit.llm.training.train import make_optimizer, train_step


def train(cfg: ModelConfig, compile: bool, steps: int = 4):
    torch.manual_seed(0)
    model = Transformer(cfg, "nanogpt")
    opt = make_optimizer(model, RunConfig(), torch.device("cpu"))
    objective = torch.compile(model) if compile else model
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randint(0, cfg.vocab_size, (4, cfg.context), generator=g) for _ in range(2))
    losses = [train_step(objective, opt, x, y, lr=1e-3, clip=1.0) for _ in range(steps)]
    return torch.stack(losses), torch.nn.utils.parameters_to_vector(model.parameters())


@pytest.mark.slow  # a cold Inductor build of the step takes 20-40 s on CPU
def test_compiled_steps_agree_with_eager_to_rounding():
    torch._dynamo.reset()
    cfg = ModelConfig(vocab_size=64, context=16, d_model=32, n_layers=2, n_heads=4)
    eager_losses, eager_params = train(cfg, compile=False)
    compiled_losses, compiled_params = train(cfg, compile=True)
    torch.testing.assert_close(compiled_losses, eager_losses, rtol=1e-5, atol=0)
    # AdamW moves a parameter by about lr = 1e-3 per step whatever its gradient's size (a
    # rounding-sized gradient too), so parameters agree to a tenth of one step's update
    torch.testing.assert_close(compiled_params, eager_params, rtol=0, atol=1e-4)
    assert eager_losses[-1] < eager_losses[0]  # the run learns, so the check has content
    print(
        "max |Δloss|",
        (compiled_losses - eager_losses).abs().max().item(),
        "max |Δθ|",
        (compiled_params - eager_params).abs().max().item(),
    )
