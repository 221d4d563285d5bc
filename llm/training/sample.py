"""Text from a trained model: encode a prompt, continue it with
:meth:`~smallinit.llm.model.transformer.Transformer.generate` (KV cache), decode.

Sampling follows nanoGPT's sample.py: softmax(ℓ / temperature) over the ``top_k`` largest
logits (defaults 0.8 and 200 there and on the command line; temperature 0 is greedy). The
draws come from a ``torch.Generator`` seeded with ``seed`` on the model's device, so the same
run, prompt and seed give the same text on CPU. An empty prompt starts from the
end-of-text token (GPT-2's document separator). A continuation ends at the end-of-text token
(not included) or after ``max_new_tokens``.

Memory (checked before generating, :func:`generation_bytes`): the KV cache holds
2·L·B·S·d floats (keys and values of L layers, B samples, S = min(context, prompt + new)
slots, width d), the token rows B·(prompt + new) int64s twice (the growing sequence and its
copy), and a window forward about B·S·(12·d + 4·d_ff) + B·V floats (as
:mod:`smallinit.llm.training.memory` counts activations per token).

Allowed (a ConfigError names the value otherwise): a prompt of UTF-8 text, 1 to
:data:`MAX_NEW_TOKENS` new tokens (a sample is text to read; past the model's context every
step recomputes the whole window, so a long sample takes as many full forwards), 1 to
:data:`MAX_SAMPLES` samples, and a temperature of 0 or in [1e-3, 1e3]
(:data:`~smallinit.llm.model.generate.MIN_TEMPERATURE`, ``MAX_TEMPERATURE``). Progress
shows as a tqdm bar on a terminal, else as a log line every
:data:`LOG_SECONDS` seconds of generation.
"""

from __future__ import annotations

import logging
import numbers
import time
from typing import Any

import torch

from smallinit.core.errors import ConfigError
from smallinit.core.memory import check_memory
from smallinit.core.progress import bars_shown, progress, step_line
from smallinit.llm.run_config import ModelConfig
from smallinit.llm.training.memory import ACT_PER_D, ACT_PER_FF, FLOAT

log = logging.getLogger(__name__)
MAX_NEW_TOKENS = 10_000  # about 7,500 words: pages of text to read, not a corpus
MAX_SAMPLES = 1_000  # samples of one call, printed one after another
LOG_SECONDS = 10.0  # without a progress bar: one log line per this much generation time


def generation_bytes(cfg: ModelConfig, batch: int, prompt: int, new: int) -> int:
    """Bytes :func:`sample_texts` allocates at most, beyond the weights (module docstring)."""
    slots = min(cfg.context, prompt + new)
    cache = 2 * cfg.n_layers * batch * slots * cfg.d_model * FLOAT
    tokens = 2 * batch * (prompt + new) * 8
    window = batch * slots * (ACT_PER_D * cfg.d_model + ACT_PER_FF[cfg.mlp] * cfg.ffn_dim) * FLOAT
    return cache + tokens + window + batch * cfg.vocab_size * FLOAT


def sample_texts(
    model,
    tok,
    prompt: str,
    *,
    max_new_tokens: int = 64,
    temperature: float = 0.8,
    top_k: int | None = 200,
    num_samples: int = 1,
    seed: int = 0,
    eot_id: int | None = None,
    device: str | torch.device = "cpu",
) -> dict[str, Any]:
    """``num_samples`` continuations of ``prompt`` by ``model`` (module docstring):
    ``{"prompt_tokens", "samples": [{"text", "tokens", "stopped"}]}`` with ``stopped``
    true when the end-of-text token ended the sample. Limits and progress: module
    docstring."""
    check_sample_args(prompt, max_new_tokens, num_samples)
    ids = tok.encode(prompt, add_special_tokens=False).ids
    if not ids:
        ids = [eot_id if eot_id is not None else 0]
    check_memory(
        generation_bytes(model.cfg, num_samples, len(ids), max_new_tokens),
        f"sampling num_samples={num_samples} x max_new_tokens={max_new_tokens} "
        "(KV cache and token rows)",
    )
    device = torch.device(device)
    x = torch.tensor([ids] * num_samples, dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(int(seed))
    with progress(total=max_new_tokens, desc="sample", unit="tok") as bar:
        out = model.generate(
            x,
            max_new_tokens,
            temperature=temperature,
            top_k=top_k,
            stop_tokens=() if eot_id is None else (eot_id,),
            pad_id=-1,
            generator=generator,
            on_step=_progress(bar, max_new_tokens, num_samples),
        )
    samples = []
    for row in out[:, len(ids) :].tolist():
        new = [t for t in row if t != -1]
        stopped = eot_id is not None and eot_id in new
        if stopped:
            new = new[: new.index(eot_id)]
        samples.append({"text": tok.decode(new), "tokens": len(new), "stopped": stopped})
    return {"prompt_tokens": len(ids), "samples": samples}


def check_sample_args(prompt: Any, max_new_tokens: Any, num_samples: Any) -> None:
    """Refuse a prompt that is not UTF-8 text and counts outside the module's limits
    (ConfigError naming the value and what is allowed; TypeError for a prompt that is not
    a str)."""
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a str, got {type(prompt).__name__} {prompt!r:.60}")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as err:  # a lone surrogate: a non-UTF-8 byte of argv
        raise ConfigError(
            f"the prompt is not UTF-8 text: character {err.start} "
            f"({prompt[err.start]!r}) stands for a byte that is not UTF-8; "
            "give UTF-8 text"
        ) from None
    for name, value, high in (
        ("max_new_tokens", max_new_tokens, MAX_NEW_TOKENS),
        ("num_samples", num_samples, MAX_SAMPLES),
    ):
        if (
            isinstance(value, bool)
            or not isinstance(value, numbers.Integral)
            or not 1 <= value <= high
        ):
            raise ConfigError(
                f"{name}={value!r} is not allowed; it must be an integer in 1..{high}"
            )


def _progress(bar, total: int, batch: int):
    """``on_step`` for :meth:`Transformer.generate`: the bar moves one token per step; where
    it is hidden, a log line every :data:`LOG_SECONDS` seconds."""
    start = last = time.perf_counter()
    lines = not bars_shown()

    def on_step(step: int) -> None:
        nonlocal last
        bar.update(1)
        now = time.perf_counter()
        if lines and now - last >= LOG_SECONDS:
            last = now
            log.info(
                "%s",
                step_line(
                    "sample", step, total, {"tok_per_s": step * batch / (now - start)}, now - start
                ),
            )

    return on_step


__all__ = ["sample_texts", "generation_bytes", "check_sample_args"]
