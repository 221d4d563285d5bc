"""What a transformer run costs before it runs: parameters, tokens, training FLOPs, peak
memory and hours on one H200 at a stated model FLOPs utilization (MFU).

Parameters are :func:`smallinit.llm.training.memory.param_count` (the modules the model
builds); *non-embedding* parameters leave out the token table, learned positions and an
untied output head (Kaplan et al. 2020, "Scaling Laws for Neural Language Models",
arXiv 2001.08361, §2.1: N counts non-embedding parameters).

Training FLOPs for T tokens (sequences of length n_ctx, L layers, width d, vocabulary V):

    C = 6·(N + V·d)·T + 12·L·n_ctx·d·T

The first term is Kaplan et al. 2020, Table 1 (forward 2N per token, backward twice the
forward, so 6N), with the output projection's V·d multiply-adds added back (N excludes
it, but the logits are computed; Hoffmann et al. 2022, "Chinchilla", arXiv 2203.15556,
Appendix F, counts them as 2·V·d forward per token). The second is attention's
score and value products, 2·2·n_ctx·d forward per token and layer, times 3 for training,
as in the MFU definition of Chowdhery et al. 2022, "PaLM", arXiv 2204.02311, Appendix B
(6N + 12·L·H·Q·T with T = n_ctx and H·Q = d, or ``attn_dim`` where it is set). Causal
masking is not discounted; norms, softmax and the optimizer are left out (each under 1%
at these shapes).

Hours: C / (MFU · peak) with peak the H200's dense BF16 tensor throughput, 989 TFLOP/s
(NVIDIA H200 Tensor Core GPU datasheet, 2024: "BF16 Tensor Core 1,979 TFLOPS" is quoted
with 2:4 sparsity; dense is half) and MFU = 40% (PaLM reached 46.2% at 540B on TPU v4,
Table 3; a small model reaches less, so read the hours as a lower bound at small widths).
The hours are also stated at :data:`SMALL_MODEL_MFU`, the MFU a small model is published
to reach: nanoGPT's reproduction of GPT-2 (124M) runs 600,000 iterations of 491,520 tokens
(``config/train_gpt2.py``) "on a single 8XA100 40GB node in about 4 days" (its README),
which by the formula above is 29% of the A100's 312 TFLOP/s dense BF16 (with
``torch.compile``). The study's transformers are smaller still (2–85M parameters), and an
H200 has 3.2× an A100's peak for 2.4× its memory bandwidth, so even that figure is more
likely high than low for them.
Peak memory is :func:`smallinit.llm.training.memory.training_bytes` (fp32 weights,
gradients, AdamW moments and activations: an upper-order figure; bf16 autocast holds less).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from smallinit.llm.run_config import ModelConfig
from smallinit.llm.training.memory import param_count, training_bytes

H200_PEAK_BF16_DENSE = 989e12  # FLOP/s, NVIDIA H200 datasheet (module docstring)
H200_MEMORY_GIB = 139  # what one H200 offers a process (141 GB HBM3e, ~139 GiB usable)
MFU = 0.40  # assumed model FLOPs utilization (module docstring)
#: GPT-2 small as nanoGPT trains it (Radford et al. 2019: d 768, 12 layers, 12 heads,
#: context 1024, vocabulary 50257, tied embeddings; LayerNorm, learned positions, GELU)
GPT2_SMALL = ModelConfig(
    vocab_size=50257,
    context=1024,
    d_model=768,
    n_layers=12,
    n_heads=12,
    norm="layernorm",
    positions="learned",
    mlp="gelu",
    tie_embeddings=True,
    bias=True,
)
#: nanoGPT's GPT-2 (124M) run (module docstring): tokens, wall seconds, GPUs, A100 peak
NANOGPT_RUN = {"tokens": 600_000 * 491_520, "seconds": 4 * 86_400, "gpus": 8, "peak": 312e12}
SMALL_MFU_SOURCE = (
    "nanoGPT (github.com/karpathy/nanoGPT) README: GPT-2 124M on 8xA100 40GB "
    "in about 4 days; config/train_gpt2.py: 600,000 iterations of 491,520 "
    "tokens; A100 312 TFLOP/s dense BF16"
)
FORMULA = "C = 6·(N_non-embedding + V·d)·T + 12·L·n_ctx·d·T"
SOURCES = (
    "Kaplan et al. 2020 (arXiv 2001.08361) Table 1; Hoffmann et al. 2022 (arXiv "
    "2203.15556) App. F (logits); Chowdhery et al. 2022 (arXiv 2204.02311) App. B "
    "(attention term, MFU)"
)
PEAK_SOURCE = "NVIDIA H200 datasheet: 1,979 TFLOP/s BF16 with sparsity, 989 dense"


def embedding_params(model) -> int:
    """Token table, learned positions and an untied head (counted once when tied)."""
    d = model.d_model
    table = model.vocab_size * d
    positions = model.context * d if model.positions == "learned" else 0
    head = 0 if model.tie_embeddings else model.vocab_size * d
    return table + positions + head


def non_embedding_params(model) -> int:
    """N of Kaplan et al. 2020: every parameter outside the embedding tables and head."""
    return param_count(model) - embedding_params(model)


def training_flops(model, tokens: int) -> float:
    """C of the module docstring for ``tokens`` training tokens of ``model``."""
    dense = 6 * (non_embedding_params(model) + model.vocab_size * model.d_model)
    attention = 12 * model.n_layers * model.context * model.attn_width
    return float((dense + attention) * tokens)


def gpu_hours(flops: float, *, mfu: float = MFU, peak: float = H200_PEAK_BF16_DENSE) -> float:
    """Hours on one GPU of ``peak`` FLOP/s at utilization ``mfu``."""
    return flops / (mfu * peak) / 3600.0


def published_mfu(model, *, tokens: float, seconds: float, gpus: int, peak: float) -> float:
    """The MFU of a published run: its training FLOPs (:func:`training_flops`) over what
    ``gpus`` devices of ``peak`` FLOP/s offer in ``seconds``."""
    return training_flops(model, int(tokens)) / (seconds * gpus * peak)


#: the MFU a small model is published to reach (module docstring): 0.29
SMALL_MODEL_MFU = round(published_mfu(GPT2_SMALL, **NANOGPT_RUN), 2)


@dataclasses.dataclass(frozen=True)
class RunCost:
    """One transformer run's size and cost (module docstring)."""

    params: int
    params_non_embedding: int
    tokens: int
    flops: float
    memory_bytes: int
    h200_hours: float  # at MFU
    h200_hours_small_mfu: float  # at SMALL_MODEL_MFU

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def sequence_length(config) -> int:
    """Tokens per training sequence: the task's length for fixed-length tasks (the anchor
    task's ``task.seq_len``), else the model's context."""
    task = getattr(config, "task", None)
    return int(getattr(task, "seq_len", None) or config.model.context)


def run_cost(config) -> RunCost | None:
    """The cost of a run config with ``model`` (a ModelConfig) and ``train`` (steps,
    batch_size); None for any other config (toy runs)."""
    model, train = getattr(config, "model", None), getattr(config, "train", None)
    if not (hasattr(model, "d_model") and hasattr(train, "steps")):
        return None
    tokens = train.steps * train.batch_size * sequence_length(config)
    flops = training_flops(model, tokens)
    return RunCost(
        params=param_count(model),
        params_non_embedding=non_embedding_params(model),
        tokens=tokens,
        flops=flops,
        memory_bytes=training_bytes(model, train.batch_size),
        h200_hours=gpu_hours(flops),
        h200_hours_small_mfu=gpu_hours(flops, mfu=SMALL_MODEL_MFU),
    )


def training_flops_of(config) -> float | None:
    """The training FLOPs C of a run config (:func:`run_cost`), None for a run without a
    cost (toy runs): what the job driver weighs a run by for its ETA
    (:class:`smallinit.core.progress.RunProgress`)."""
    the_cost = run_cost(config)
    return None if the_cost is None else the_cost.flops
