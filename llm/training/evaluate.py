"""Held-out evaluation: loss per category, greedy answer accuracy, per-token losses.

* Loss per category: mean next-token cross-entropy over held-out tokens carrying each
  category tag (all tokens, and answer tokens only), on non-overlapping context windows.
* Greedy answer accuracy: an item counts as correct when greedy decoding from its prompt
  reproduces its answer, terminating newline included. With teacher forcing this is
  exactly "argmax is right at every answer position" (each greedy step then sees the true
  prefix), so it is computed in one batched forward pass. Answers are compared in the
  tokenizer's canonical tokenization.
* Per-token losses (with token ids, targets, tags, answer flags) for the token-level
  analysis of docs/science.md §5.
"""

from __future__ import annotations

import numpy as np
import torch

from smallinit.llm.data.synthetic import CATEGORIES, REASONING


@torch.no_grad()
def token_losses(model, corpus, device, n_windows: int, context: int) -> dict[str, np.ndarray]:
    """Per-token losses on the first ``n_windows`` non-overlapping held-out windows."""
    n_avail = (len(corpus.val) - 1) // context
    n = min(n_windows, n_avail)
    if n < 1:
        raise ValueError(f"held-out split has {len(corpus.val)} tokens, fewer than one "
                         f"context window of {context}")
    span = n * context
    ids = np.asarray(corpus.val[: span + 1], dtype=np.int64)
    x = torch.from_numpy(ids[:-1].reshape(n, context)).to(device)
    y = torch.from_numpy(ids[1:].reshape(n, context)).to(device)
    losses = torch.cat([model.token_losses(x[i:i + 16], y[i:i + 16])
                        for i in range(0, n, 16)]).float().cpu().numpy()
    return {
        "inputs": ids[:-1].reshape(n, context).astype(np.int32),
        "targets": ids[1:].reshape(n, context).astype(np.int32),
        "losses": losses.astype(np.float32),
        "tags": np.asarray(corpus.val_tags[1: span + 1]).reshape(n, context),
        "answer": np.asarray(corpus.val_answer[1: span + 1]).reshape(n, context),
    }


def category_losses(tokens: dict[str, np.ndarray]) -> dict[str, float]:
    """Mean loss over all held-out tokens and per category (tag of the *target* token)."""
    losses, tags, answer = tokens["losses"], tokens["tags"], tokens["answer"]
    out = {"loss": float(losses.mean())}
    for i, name in enumerate(CATEGORIES):
        sel = tags == i
        if sel.any():
            out[f"loss_{name}"] = float(losses[sel].mean())
        sel_ans = sel & (answer == 1)
        if sel_ans.any():
            out[f"answer_loss_{name}"] = float(losses[sel_ans].mean())
    return out


@torch.no_grad()
def answer_accuracy(model, corpus, device, n_items: int, context: int) -> dict[str, float]:
    """Greedy answer accuracy per category over up to ``n_items`` held-out items each,
    plus ``acc_reasoning`` over all reasoning items."""
    items = corpus.val_items
    if n_items == 0 or len(items["start"]) == 0:
        return {}
    out: dict[str, float] = {}
    n_right_reasoning = n_reasoning = 0
    for cat_index, name in enumerate(CATEGORIES):
        chosen = np.flatnonzero((items["category"] == cat_index) & (items["length"] <= context))
        chosen = chosen[:n_items]
        if len(chosen) == 0:
            continue
        right = 0
        for lo in range(0, len(chosen), 64):
            right += _count_right(model, corpus, device, chosen[lo:lo + 64])
        out[f"acc_{name}"] = right / len(chosen)
        if name in REASONING:
            n_right_reasoning += right
            n_reasoning += len(chosen)
    if n_reasoning:
        out["acc_reasoning"] = n_right_reasoning / n_reasoning
    return out


def _count_right(model, corpus, device, chosen: np.ndarray) -> int:
    items = corpus.val_items
    starts, plens, lens = (items[k][chosen] for k in ("start", "prompt_len", "length"))
    width = int(lens.max())
    batch = np.zeros((len(chosen), width), dtype=np.int64)  # right padding: causal, harmless
    for r, (s, n) in enumerate(zip(starts, lens, strict=True)):
        batch[r, :n] = corpus.val[s:s + n]
    logits = model(torch.from_numpy(batch).to(device))
    pred = logits.argmax(dim=-1).cpu().numpy()  # pred[:, j] predicts token j + 1
    right = 0
    for r, (p, n) in enumerate(zip(plens, lens, strict=True)):
        if np.array_equal(pred[r, p - 1:n - 1], batch[r, p:n]):
            right += 1
    return right


def evaluate(model, corpus, device, *, n_windows: int, n_items: int, context: int):
    """Everything above: (scalar metrics, per-token arrays)."""
    was_training = model.training
    model.eval()
    try:
        tokens = token_losses(model, corpus, device, n_windows, context)
        metrics = category_losses(tokens)
        metrics.update(answer_accuracy(model, corpus, device, n_items, context))
    finally:
        model.train(was_training)
    return metrics, tokens
