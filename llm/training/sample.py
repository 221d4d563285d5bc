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
"""

from __future__ import annotations

from typing import Any

import torch

from smallinit.llm.config import ModelConfig
from smallinit.llm.training.memory import ACT_PER_D, ACT_PER_FF, FLOAT
from smallinit.memory import check_memory


def generation_bytes(cfg: ModelConfig, batch: int, prompt: int, new: int) -> int:
    """Bytes :func:`sample_texts` allocates at most, beyond the weights (module docstring)."""
    slots = min(cfg.context, prompt + new)
    cache = 2 * cfg.n_layers * batch * slots * cfg.d_model * FLOAT
    tokens = 2 * batch * (prompt + new) * 8
    window = batch * slots * (ACT_PER_D * cfg.d_model + ACT_PER_FF[cfg.mlp] * cfg.ffn_dim) * FLOAT
    return cache + tokens + window + batch * cfg.vocab_size * FLOAT


def sample_texts(model, tok, prompt: str, *, max_new_tokens: int = 64,
                 temperature: float = 0.8, top_k: int | None = 200, num_samples: int = 1,
                 seed: int = 0, eot_id: int | None = None,
                 device: str | torch.device = "cpu") -> dict[str, Any]:
    """``num_samples`` continuations of ``prompt`` by ``model`` (module docstring):
    ``{"prompt_tokens", "samples": [{"text", "tokens", "stopped"}]}`` with ``stopped``
    true when the end-of-text token ended the sample."""
    ids = tok.encode(prompt, add_special_tokens=False).ids
    if not ids:
        ids = [eot_id if eot_id is not None else 0]
    check_memory(generation_bytes(model.cfg, num_samples, len(ids), max_new_tokens),
                 f"sampling num_samples={num_samples} x max_new_tokens={max_new_tokens} "
                 "(KV cache and token rows)")
    device = torch.device(device)
    x = torch.tensor([ids] * num_samples, dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(int(seed))
    out = model.generate(x, max_new_tokens, temperature=temperature, top_k=top_k,
                         stop_tokens=() if eot_id is None else (eot_id,), pad_id=-1,
                         generator=generator)
    samples = []
    for row in out[:, len(ids):].tolist():
        new = [t for t in row if t != -1]
        stopped = eot_id is not None and eot_id in new
        if stopped:
            new = new[:new.index(eot_id)]
        samples.append({"text": tok.decode(new), "tokens": len(new), "stopped": stopped})
    return {"prompt_tokens": len(ids), "samples": samples}


__all__ = ["sample_texts", "generation_bytes"]
