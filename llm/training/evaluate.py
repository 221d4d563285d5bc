"""Held-out evaluation: loss per category, greedy answer accuracy, per-token losses.

* Loss per category: mean next-token cross-entropy over held-out tokens carrying each
  category tag (all tokens, and answer tokens only), on non-overlapping context windows.
* Greedy answer accuracy: an item counts as correct when greedy decoding from its prompt
  reproduces its answer, terminating newline included. With teacher forcing this is
  exactly "argmax is right at every answer position" (each greedy step then sees the true
  prefix), so it is computed in one batched forward pass. Answers are compared in the
  tokenizer's canonical tokenization. Reasoning tasks are scored per difficulty level,
  with the level's chance, the best constant answer's share and the answer-token loss
  (docs/science.md §8; keys in :mod:`smallinit.llm.analysis.reasoning`).
* Per-token losses (with token ids, targets, tags, answer flags) for the token-level
  analysis of docs/science.md §5.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch

from smallinit.llm.analysis.reasoning import cell_key
from smallinit.llm.data import synthetic
from smallinit.llm.data.synthetic import CATEGORIES, LEVELS, REASONING


@torch.no_grad()
def token_losses(model, corpus, device, n_windows: int, context: int) -> dict[str, np.ndarray]:
    """Per-token losses on the first ``n_windows`` non-overlapping held-out windows."""
    n_avail = (len(corpus.val) - 1) // context
    n = min(n_windows, n_avail)
    if n < 1:
        raise ValueError(
            f"held-out split has {len(corpus.val)} tokens, fewer than one "
            f"context window of {context}"
        )
    span = n * context
    ids = np.asarray(corpus.val[: span + 1], dtype=np.int64)
    x = torch.from_numpy(ids[:-1].reshape(n, context)).to(device)
    y = torch.from_numpy(ids[1:].reshape(n, context)).to(device)
    losses = (
        torch.cat([model.token_losses(x[i : i + 16], y[i : i + 16]) for i in range(0, n, 16)])
        .float()
        .cpu()
        .numpy()
    )
    return {
        "inputs": ids[:-1].reshape(n, context).astype(np.int32),
        "targets": ids[1:].reshape(n, context).astype(np.int32),
        "losses": losses.astype(np.float32),
        "tags": np.asarray(corpus.val_tags[1 : span + 1]).reshape(n, context),
        "answer": np.asarray(corpus.val_answer[1 : span + 1]).reshape(n, context),
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
    """Greedy answer accuracy on held-out items (those that fit in ``context``).

    Reasoning tasks are scored per difficulty level, up to ``n_items`` items per (task,
    level) cell, with the cell's chance, item count and answer-token loss (the keys of
    :mod:`smallinit.llm.analysis.reasoning`), pooled per task (``acc_T``, ``chance_T``)
    and over all reasoning items (``acc_reasoning``, kept for old readers). Other
    categories (facts) get ``acc_<name>`` over up to ``n_items`` items."""
    items = corpus.val_items
    if n_items == 0 or len(items["start"]) == 0:
        return {}
    category, fits = items["category"], items["length"] <= context
    level = items.get("level", np.zeros_like(category))
    out: dict[str, float] = {}
    pooled_right = pooled_n = 0
    for cat_index, name in enumerate(CATEGORIES):
        if name not in REASONING:
            chosen = np.flatnonzero((category == cat_index) & fits)[:n_items]
            if len(chosen):
                out[f"acc_{name}"] = float(_score(model, corpus, device, chosen)[0].mean())
            continue
        right_t = n_t = 0
        chance_sum = 0.0
        for k in LEVELS:
            chosen = np.flatnonzero((category == cat_index) & (level == k) & fits)[:n_items]
            if len(chosen) == 0:
                continue
            right, loss_sum, n_tokens = _score(model, corpus, device, chosen)
            p_chance = synthetic.chance(name, k)
            out.update(
                {
                    cell_key("acc", name, k): float(right.mean()),
                    cell_key("chance", name, k): p_chance,
                    cell_key("majority", name, k): majority_share(corpus, chosen),
                    cell_key("n", name, k): len(chosen),
                    cell_key("answer_loss", name, k): loss_sum / n_tokens,
                }
            )
            right_t += int(right.sum())
            n_t += len(chosen)
            chance_sum += p_chance * len(chosen)
        if n_t:
            out[f"acc_{name}"] = right_t / n_t
            out[f"chance_{name}"] = chance_sum / n_t
            pooled_right += right_t
            pooled_n += n_t
    if pooled_n:
        out["acc_reasoning"] = pooled_right / pooled_n
    return out


def majority_share(corpus, chosen: np.ndarray) -> float:
    """Accuracy of the best prompt-blind *constant* answer on exactly these items: the
    largest share of one answer among them. Its expectation is the chance 1/|answer space|,
    but on a fixed finite set it lies above it (shared by every seed, since the held-out
    items do not depend on the training seed), so an above-chance test over seeds compares
    with the larger of the two (:attr:`smallinit.llm.analysis.reasoning.Cell.baseline`)."""
    items = corpus.val_items
    answers = Counter(
        tuple(
            corpus.val[
                items["start"][i] + items["prompt_len"][i] : items["start"][i] + items["length"][i]
            ].tolist()
        )
        for i in chosen
    )
    return max(answers.values()) / len(chosen)


def _score(model, corpus, device, chosen: np.ndarray, batch: int = 64):
    """Per item whether greedy decoding reproduces its answer, and the summed loss and
    count of the answer tokens (one teacher-forced pass per batch of items)."""
    right, loss_sum, n_tokens = [], 0.0, 0
    for lo in range(0, len(chosen), batch):
        r, s, n = _score_batch(model, corpus, device, chosen[lo : lo + batch])
        right.append(r)
        loss_sum += s
        n_tokens += n
    return np.concatenate(right), loss_sum, n_tokens


def _score_batch(model, corpus, device, chosen: np.ndarray):
    items = corpus.val_items
    starts, plens, lens = (items[k][chosen] for k in ("start", "prompt_len", "length"))
    width = int(lens.max())
    batch = np.zeros((len(chosen), width), dtype=np.int64)  # right padding: causal, harmless
    for r, (s, n) in enumerate(zip(starts, lens, strict=True)):
        batch[r, :n] = corpus.val[s : s + n]
    x = torch.from_numpy(batch).to(device)
    logits = model(x).float()  # [:, j] predicts token j + 1
    pred = logits.argmax(dim=-1).cpu().numpy()
    nll = (
        -torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, x[:, 1:, None])[..., 0].cpu().numpy()
    )  # nll[:, j]: loss of token j + 1
    right = np.zeros(len(chosen), dtype=bool)
    loss_sum, n_tokens = 0.0, 0
    for r, (p, n) in enumerate(zip(plens, lens, strict=True)):
        right[r] = np.array_equal(pred[r, p - 1 : n - 1], batch[r, p:n])
        loss_sum += float(nll[r, p - 1 : n - 1].sum())
        n_tokens += n - p
    return right, loss_sum, n_tokens


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
