"""Scoring a language model on benchmark items: log-likelihood multiple choice and greedy
generation with exact-match judging.

Multiple choice (Brown et al. 2020; lm-evaluation-harness's ``multiple_choice`` output):
for a query q and choices c_1..c_k, each continuation is scored by
ℓ_i = Σ_t log p(c_i,t | q, c_i,<t) over its tokens; the prediction is

    acc:       argmax_i ℓ_i                     (raw log-likelihood)
    acc_norm:  argmax_i ℓ_i / |c_i|             (|c_i| = characters of the continuation,
                                                 leading space included)

and each metric is the fraction of items whose prediction is the gold index (ties go to the
lowest index). The names and the normalization are lm-evaluation-harness's
(``completion_len = len(choice)`` in its ``process_results``: characters of the Python
string, which equal UTF-8 bytes for ASCII text; its separate ``acc_bytes`` divides by
bytes). ``acc_norm`` is the headline metric of these tasks (OLMES' ``acc_per_char``, Gu et
al. 2024).

Generation (metric ``exact_match``): greedy decoding with the KV cache
(:meth:`smallinit.llm.model.transformer.Transformer.generate`) from the prompt until a stop
string, the end-of-text token or ``max_new_tokens``; the text before the first stop string
is judged:

* ``number`` (GSM8K; Cobbe et al. 2021, Wei et al. 2022): the number after "answer is" or
  "####", else the last number in the text; commas, ``$`` and a trailing period dropped;
  compared as exact decimals (``18.0`` equals ``18``).
* ``qa`` (TriviaQA, NQ-open): SQuAD normalization (Rajpurkar et al. 2016) — lowercase, drop
  punctuation and the articles a/an/the, collapse whitespace — of the first line, equal to
  the normalized form of any accepted answer.
* ``math`` (MATH, Minerva prompt; Lewkowycz et al. 2022): the text after "final answer is",
  else the last ``\\boxed{…}``; compared as strings after light LaTeX normalization (no
  symbolic equivalence, so this under-counts equal answers written differently).
* ``exact`` (BBH): first line, stripped, case-folded, trailing period dropped.

Sequences longer than the model's context are cut from the left and the item flagged
``truncated`` (the continuation is kept; one longer than the context alone is scored on the
tokens that fit). Generation conditions on the last ``context`` tokens (sliding window); an
item is ``truncated`` when a decoding step saw only part of its prompt. Standard error of
a metric over n items (``<metric>_stderr``, as lm-eval's ``mean_stderr``): s/√n with s the
sample standard deviation of the 0/1 outcomes (ddof = 1).
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np
import torch

from smallinit.core.progress import progress
from smallinit.llm.downstream.tasks import Item, TaskSpec

# ----------------------------------------------------------------------------- statistics


def mean_se(outcomes: Sequence[float]) -> tuple[float, float]:
    """Mean and its standard error s/√n (ddof 1; 0 for fewer than two outcomes)."""
    x = np.asarray(outcomes, dtype=np.float64)
    if x.size == 0:
        return float("nan"), float("nan")
    if x.size == 1:
        return float(x[0]), 0.0
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size))


# ----------------------------------------------------------------------------- choice rules
def pick(loglik: Sequence[float], lengths: Sequence[float] | None = None) -> int:
    """argmax_i ℓ_i (or ℓ_i / lengths_i); the lowest index wins a tie."""
    ll = np.asarray(loglik, dtype=np.float64)
    if lengths is not None:
        ll = ll / np.maximum(np.asarray(lengths, dtype=np.float64), 1.0)
    return int(np.argmax(ll))


def continuation_logprobs(logits, targets, n_scored) -> np.ndarray:
    """Σ of log-softmax(logits)[b, t, targets[b, t]] over each row's scored positions.

    ``logits`` (B, T, V) and ``targets`` (B, T) are aligned (position t predicts
    targets[b, t]); row b scores its positions [len_b − n_scored[b], len_b) where len_b is
    its unpadded length, passed as ``n_scored`` pairs ``(len_b, n_b)``."""
    logp = torch.log_softmax(torch.as_tensor(logits).float(), dim=-1)
    tgt = torch.as_tensor(targets, dtype=torch.long)
    picked = logp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)  # (B, T)
    out = np.empty(len(n_scored), dtype=np.float64)
    for b, (length, n) in enumerate(n_scored):
        out[b] = float(picked[b, length - n : length].double().sum())
    return out


# ----------------------------------------------------------------------------- answer judging
_NUMBER = r"-?\$?\s*\d[\d,]*(?:\.\d+)?|-?\.\d+"


def _canonical_number(text: str) -> str | None:
    cleaned = text.replace(",", "").replace("$", "").replace(" ", "").rstrip(".")
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def extract_number(text: str) -> str | None:
    """The final numeric answer of a GSM8K-style solution, canonical (``"1234"``, ``"-0.5"``),
    or None when the text has no number."""
    for pattern in (r"answer is[:\s]*(" + _NUMBER + ")", r"####\s*(" + _NUMBER + ")"):
        found = re.findall(pattern, text, flags=re.IGNORECASE)
        if found:
            return _canonical_number(found[-1])
    numbers = re.findall(_NUMBER, text)
    return _canonical_number(numbers[-1]) if numbers else None


def normalize_answer(text: str) -> str:
    """SQuAD normalization: lowercase, no punctuation, no articles, single spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed")
    if start < 0:
        return None
    brace = text.find("{", start)
    if brace < 0:
        return None
    depth = 0
    for i in range(brace, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[brace + 1 : i]
    return None


def extract_math(text: str) -> str | None:
    """The final answer of a MATH solution: after "final answer is", else the last
    ``\\boxed{…}``."""
    found = re.findall(r"final answer is\s*(.+?)(?:\.\s*I hope|\n|$)", text)
    if found:
        return found[-1].strip().strip("$").strip()
    return _last_boxed(text)


def normalize_math(text: str) -> str:
    """Light LaTeX normalization for string comparison of MATH answers."""
    s = text.strip().strip("$").strip().rstrip(".")
    if (inner := _last_boxed(s)) is not None:
        s = inner
    for old, new in (
        ("\\left", ""),
        ("\\right", ""),
        ("\\!", ""),
        ("\\,", ""),
        ("\\;", ""),
        ("dfrac", "frac"),
        ("tfrac", "frac"),
        ("^\\circ", ""),
        ("^{\\circ}", ""),
        ("\\%", ""),
        ("%", ""),
        ("\\$", ""),
        (" ", ""),
    ):
        s = s.replace(old, new)
    s = re.sub(r"\\text\{(.*?)\}", r"\1", s)
    return s


def first_line(text: str) -> str:
    stripped = text.strip()
    return stripped.split("\n", 1)[0].strip() if stripped else ""


def judge(spec: TaskSpec, generation: str, answers: Sequence[str]) -> tuple[str | None, bool]:
    """(extracted answer, correct?) for a generation under the task's answer rule."""
    if spec.answer == "number":
        got = extract_number(generation)
        golds = {_canonical_number(a) for a in answers} - {None}
        return got, got is not None and got in golds
    if spec.answer == "qa":
        got = first_line(generation)
        return got, bool(got) and normalize_answer(got) in {normalize_answer(a) for a in answers}
    if spec.answer == "math":
        got = extract_math(generation)
        return got, got is not None and normalize_math(got) in {normalize_math(a) for a in answers}
    if spec.answer == "exact":
        got = first_line(generation)

        def canon(s: str) -> str:
            return s.strip().rstrip(".").casefold()

        return got, bool(got) and canon(got) in {canon(a) for a in answers}
    raise ValueError(f"task {spec.name} has answer rule {spec.answer!r}, not a generative one")


def cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """Text before the earliest stop string, and whether one was found."""
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


# ----------------------------------------------------------------------------- the model side
class TorchLM:
    """A trained :class:`~smallinit.llm.model.transformer.Transformer` and its tokenizer, batched.

    Requests are sorted by length (longest first) so batches are dense; results are
    returned in request order and do not depend on ``batch_size`` beyond float rounding.
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        device: Any = "cpu",
        batch_size: int = 16,
        eot_id: int | None = None,
    ):
        self.model = model.eval()
        self.tok = tokenizer
        self.device = torch.device(device)
        self.batch_size = int(batch_size)
        self.context = int(model.cfg.context)
        self.eot_id = eot_id

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.tok.encode_batch(list(texts), add_special_tokens=False)]

    def loglikelihood(
        self, pairs: Sequence[tuple[str, str]], *, desc: str = "score"
    ) -> list[dict[str, Any]]:
        """For each (context, continuation): ``{"loglik", "tokens", "truncated"}``."""
        if not pairs:
            return []
        ctx_ids = self.encode([c for c, _ in pairs])
        cont_ids = self.encode([c for _, c in pairs])
        seqs, scored, results = [], [], [None] * len(pairs)
        for ctx, cont in zip(ctx_ids, cont_ids, strict=True):
            if not ctx:
                ctx = [self.eot_id if self.eot_id is not None else 0]
            full = ctx + cont
            kept = full[-(self.context + 1) :]
            seqs.append(kept)
            scored.append((min(len(cont), len(kept) - 1), len(full) > len(kept)))
        order = sorted(range(len(seqs)), key=lambda i: (-len(seqs[i]), i))
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        with torch.no_grad():
            for batch in progress(batches, desc=desc, unit="batch"):
                width = len(seqs[batch[0]]) - 1
                x = torch.zeros((len(batch), width), dtype=torch.long)
                y = torch.zeros((len(batch), width), dtype=torch.long)
                spans = []
                for r, i in enumerate(batch):
                    s = torch.tensor(seqs[i], dtype=torch.long)
                    x[r, : len(s) - 1], y[r, : len(s) - 1] = s[:-1], s[1:]
                    spans.append((len(s) - 1, scored[i][0]))
                logits = self.model(x.to(self.device)).float().cpu()
                sums = continuation_logprobs(logits, y, spans)
                for r, i in enumerate(batch):
                    results[i] = {
                        "loglik": float(sums[r]),
                        "tokens": scored[i][0],
                        "truncated": scored[i][1],
                    }
        return results  # type: ignore[return-value]

    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_new_tokens: int,
        stops: Sequence[str] = (),
        desc: str = "generate",
    ) -> list[dict[str, Any]]:
        """Greedy continuations of ``prompts`` (:meth:`Transformer.generate
        <smallinit.llm.model.transformer.Transformer.generate>`, KV cache, left-padded
        batches), cut before the first stop string; the end-of-text token ends a generation
        and is not part of it. For each prompt: ``{"text", "tokens", "truncated"}``, where
        ``truncated`` says a step saw only the last ``context`` tokens (prompt tokens fell
        out of the sliding window)."""
        ids = [i or [self.eot_id if self.eot_id is not None else 0] for i in self.encode(prompts)]
        out: list[dict[str, Any]] = [{}] * len(prompts)
        order = sorted(range(len(ids)), key=lambda i: (-len(ids[i]), i))
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        stop_ids = () if self.eot_id is None else (self.eot_id,)

        def stopped(_row: int, new: list[int]) -> bool:
            return cut_at_stop(self.tok.decode(new), stops)[1]

        for batch in progress(batches, desc=desc, unit="batch"):
            width = len(ids[batch[0]])
            x = torch.full((len(batch), width), stop_ids[0] if stop_ids else 0, dtype=torch.long)
            for r, i in enumerate(batch):  # left padding
                x[r, width - len(ids[i]) :] = torch.tensor(ids[i], dtype=torch.long)
            seqs = self.model.generate(
                x.to(self.device),
                max_new_tokens,
                temperature=0.0,
                stop_tokens=stop_ids,
                prompt_lengths=[len(ids[i]) for i in batch],
                until=stopped if stops else None,
                pad_id=-1,
            ).cpu()
            for r, i in enumerate(batch):
                new = [t for t in seqs[r, width:].tolist() if t != -1]
                steps = len(new)
                if self.eot_id in new:
                    new = new[: new.index(self.eot_id)]
                out[i] = {
                    "text": cut_at_stop(self.tok.decode(new), stops)[0],
                    "tokens": len(new),
                    "truncated": len(ids[i]) + max(steps - 1, 0) > self.context,
                }
        return out


# ----------------------------------------------------------------------------- tasks
def score_mc(lm, items: Sequence[Item], *, desc: str = "mc") -> list[dict[str, Any]]:
    """Per-item records for multiple-choice items (module docstring): the predictions of
    both rules and their 0/1 outcomes ``acc`` (raw) and ``acc_norm`` (per character)."""
    pairs = [(it.query, c) for it in items for c in it.choices]
    scores = lm.loglikelihood(pairs, desc=desc)
    records, k = [], 0
    for it in items:
        got = scores[k : k + len(it.choices)]
        k += len(it.choices)
        ll = [g["loglik"] for g in got]
        chars = [len(c) for c in it.choices]
        pred, pred_norm = pick(ll), pick(ll, chars)
        records.append(
            {
                "id": it.id,
                "gold": it.gold,
                "pred": pred,
                "pred_norm": pred_norm,
                "acc": int(pred == it.gold),
                "acc_norm": int(pred_norm == it.gold),
                "loglik": [round(v, 6) for v in ll],
                "chars": chars,
                "truncated": any(g["truncated"] for g in got),
            }
        )
    return records


def score_gen(
    lm, items: Sequence[Item], spec: TaskSpec, *, max_new_tokens: int, desc: str = "gen"
) -> list[dict[str, Any]]:
    """Per-item records for generative items (module docstring); ``exact_match`` is the
    0/1 outcome under the task's answer rule."""
    gens = lm.generate(
        [it.query for it in items], max_new_tokens=max_new_tokens, stops=spec.stop, desc=desc
    )
    records = []
    for it, gen in zip(items, gens, strict=True):
        got, ok = judge(spec, gen["text"], it.answers)
        records.append(
            {
                "id": it.id,
                "answers": list(it.answers)[:10],
                "generation": gen["text"],
                "extracted": got,
                "exact_match": int(ok),
                "truncated": bool(gen["truncated"]),
            }
        )
    return records


# Per-item 0/1 outcome of each metric, and the names records stored before llm-downstream
# VERSION 2 gave them (acc_norm was then "correct", raw accuracy "correct_raw").
OLD_RECORD_NAMES = {"acc": "correct_raw", "acc_norm": "correct", "exact_match": "correct"}


def outcome(record: Mapping[str, Any], metric: str) -> float:
    """A record's 0/1 outcome under ``metric`` (acc, acc_norm, exact_match), read under
    its current name or the name older stored runs used."""
    if metric in record:
        return float(record[metric])
    return float(record[OLD_RECORD_NAMES[metric]])


def primary_metric(records: Sequence[Mapping[str, Any]]) -> str:
    """The metric downstream-compare pairs: acc_norm for multiple choice (records with
    choices' lengths), exact_match for generation."""
    return "acc_norm" if records and "chars" in records[0] else "exact_match"


def summarize(records: Sequence[dict[str, Any]], spec: TaskSpec) -> dict[str, Any]:
    """lm-evaluation-harness's metrics with their standard errors: ``acc`` (raw
    log-likelihood choice) and ``acc_norm`` (per-character) for multiple choice,
    ``exact_match`` for generation; ``primary`` names the headline metric, ``truncated``
    counts items cut to the model's context."""
    metrics = ("acc", "acc_norm") if spec.is_mc else ("exact_match",)
    out: dict[str, Any] = {"task": spec.name, "n": len(records), "primary": metrics[-1]}
    for m in metrics:
        out[m], out[f"{m}_stderr"] = mean_se([outcome(r, m) for r in records])
    if spec.is_mc:
        out["normalization"] = "characters"
        out["chance"] = (
            float(np.mean([1.0 / len(r["chars"]) for r in records])) if records else float("nan")
        )
    else:
        out["answer_rule"] = spec.answer
    out["truncated"] = int(sum(bool(r.get("truncated")) for r in records))
    return out


def summary_metrics(summary: dict[str, Any]) -> dict[str, Any]:
    """A stored summary with lm-eval's metric names, also for results stored before
    llm-downstream VERSION 2 (where ``acc``/``se`` were the length-normalized accuracy and
    ``acc_raw``/``se_raw`` the raw one; generative tasks had ``acc``/``se``)."""
    if "primary" in summary:
        return dict(summary)
    out = {
        k: v for k, v in summary.items() if k not in ("acc", "se", "acc_raw", "se_raw", "metric")
    }
    if "acc_raw" in summary:
        out.update(
            acc=summary["acc_raw"],
            acc_stderr=summary["se_raw"],
            acc_norm=summary["acc"],
            acc_norm_stderr=summary["se"],
            primary="acc_norm",
        )
    else:
        out.update(
            exact_match=summary["acc"], exact_match_stderr=summary["se"], primary="exact_match"
        )
    return out


__all__ = [
    "TorchLM",
    "score_mc",
    "score_gen",
    "summarize",
    "summary_metrics",
    "outcome",
    "primary_metric",
    "judge",
    "pick",
    "mean_se",
    "continuation_logprobs",
    "extract_number",
    "extract_math",
    "normalize_answer",
    "normalize_math",
    "cut_at_stop",
]
