"""Token-level gains of small init, bucketed by how much a token depends on context (fig 11).

docs/science.md §5: compare per-token held-out losses of two matched models (same data, seed, size,
steps; γ = 1 against γ = 0.5) and ask where the difference comes from. For held-out token
i with losses ℓ_i(γ) the *gain* is g_i = ℓ_i(0.5) − ℓ_i(1) (> 0: small init is better).
A bucket B's share of the total gain is

    S_B = Σ_{i∈B} g_i / Σ_i g_i,

compared with its share of tokens n_B/n (equal when the gain is spread evenly). Intervals
come from a bootstrap that resamples held-out *windows* (the evaluator's context windows)
with replacement — tokens of one window are not independent — and recomputes S_B.

Bucket families (:func:`bucket_families`):

* ``unigram``, ``bigram``: quartiles of the loss −ln p(target) of add-½ smoothed unigram and
  bigram models counted on the training split (low quartile: predictable without context);
* ``copyable``: whether (previous token, target) already occurred earlier in the window, so
  an induction/copy rule predicts it;
* ``category``: the synthetic corpus's tag of the target (text, arith, anchor, logic, fact),
  with answer tokens of an item split off as ``CAT:answer``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from smallinit.llm.data.synthetic import CATEGORIES

SMOOTH = 0.5


def ngram_losses(
    train: np.ndarray, inputs: np.ndarray, targets: np.ndarray, vocab: int
) -> tuple[np.ndarray, np.ndarray]:
    """−ln p(target) of add-½ unigram and bigram models counted on ``train`` tokens.

    p₁(b) = (c(b) + ½)/(N + ½V); p₂(b | a) = (c(a, b) + ½)/(c(a·) + ½V), with a the token
    before the target (``inputs`` at the same position)."""
    train = np.asarray(train, dtype=np.int64)
    uni = np.bincount(train, minlength=vocab).astype(float)
    p1 = (uni + SMOOTH) / (uni.sum() + SMOOTH * vocab)
    pair = train[:-1] * vocab + train[1:]
    keys, counts = np.unique(pair, return_counts=True)
    a = np.asarray(inputs, dtype=np.int64)
    b = np.asarray(targets, dtype=np.int64)
    q = a * vocab + b
    pos = np.searchsorted(keys, q)
    pos_c = np.minimum(pos, len(keys) - 1)
    c_ab = np.where(keys[pos_c] == q, counts[pos_c], 0).astype(float)
    c_a = np.bincount(train[:-1], minlength=vocab).astype(float)[a]
    p2 = (c_ab + SMOOTH) / (c_a + SMOOTH * vocab)
    return -np.log(p1[b]), -np.log(p2)


def copyable(inputs: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """(B, T) bool: the pair (inputs[t], targets[t]) occurred as (inputs[s], targets[s]) for
    some s < t in the same window (an induction head could copy the target)."""
    inputs = np.asarray(inputs)
    targets = np.asarray(targets)
    out = np.zeros(inputs.shape, dtype=bool)
    for r in range(inputs.shape[0]):
        seen: set[tuple[int, int]] = set()
        for t in range(inputs.shape[1]):
            key = (int(inputs[r, t]), int(targets[r, t]))
            out[r, t] = key in seen
            seen.add(key)
    return out


def quartile_labels(values: np.ndarray, name: str) -> tuple[np.ndarray, list[str]]:
    """Quartile index 0..3 of each value (edges from its own quantiles) and the labels."""
    edges = np.quantile(values, [0.25, 0.5, 0.75])
    idx = np.searchsorted(edges, values, side="right")
    labels = [f"{name} Q{i + 1}" for i in range(4)]
    return idx, labels


def bucket_families(
    tokens: dict[str, np.ndarray], train: np.ndarray, vocab: int
) -> dict[str, tuple[np.ndarray, list[str]]]:
    """For each family, (bucket index per held-out token (B, T), bucket labels)."""
    inputs, targets = tokens["inputs"], tokens["targets"]
    l1, l2 = ngram_losses(train, inputs, targets, vocab)
    fam = {"unigram": quartile_labels(l1, "unigram"), "bigram": quartile_labels(l2, "bigram")}
    fam["copyable"] = (copyable(inputs, targets).astype(int), ["new", "copyable"])
    tags = np.asarray(tokens["tags"], dtype=int)
    answer = np.asarray(tokens["answer"], dtype=int)
    labels = []
    idx = np.zeros(tags.shape, dtype=int)
    for i, name in enumerate(CATEGORIES):
        for j, suffix in enumerate(("", ":answer")):
            sel = (tags == i) & (answer == j)
            if sel.any():
                idx[sel] = len(labels)
                labels.append(name + suffix)
    fam["category"] = (idx, labels)
    return fam


@dataclass
class BucketGain:
    label: str
    n_tokens: int
    token_share: float
    mean_gain: float
    mean_gain_ci: tuple[float, float]
    share: float
    share_ci: tuple[float, float]


def gain_shares(
    gain: np.ndarray,
    buckets: np.ndarray,
    labels: list[str],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> list[BucketGain]:
    """S_B and the mean gain per bucket, with percentile bootstrap intervals over windows.

    ``gain`` and ``buckets`` are (windows, T); bucket indices index ``labels``."""
    gain = np.asarray(gain, dtype=float)
    buckets = np.asarray(buckets)
    if gain.shape != buckets.shape or gain.ndim != 2:
        raise ValueError(f"gain {gain.shape} and buckets {buckets.shape} must be equal (W, T)")
    k = len(labels)
    # per-window sums: (W, k) gain and counts; a bootstrap sample is a multiset of windows
    onehot = buckets[..., None] == np.arange(k)
    g_w = (gain[..., None] * onehot).sum(axis=1)
    n_w = onehot.sum(axis=1).astype(float)

    def stats(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        g = weights @ g_w
        n = weights @ n_w
        total = g.sum(axis=-1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            return g / total, g / n

    share, mean = stats(np.ones(len(gain)))
    rng = np.random.default_rng(seed)
    w = len(gain)
    draws = rng.integers(0, w, size=(n_boot, w))
    counts = np.zeros((n_boot, w))
    np.add.at(counts, (np.arange(n_boot)[:, None], draws), 1)
    b_share, b_mean = stats(counts)
    lo, hi = (1 - level) / 2, 1 - (1 - level) / 2
    s_lo, s_hi = np.nanquantile(b_share, [lo, hi], axis=0)
    m_lo, m_hi = np.nanquantile(b_mean, [lo, hi], axis=0)
    n_tot = n_w.sum()
    return [
        BucketGain(
            labels[i],
            int(n_w[:, i].sum()),
            float(n_w[:, i].sum() / n_tot),
            float(mean[i]),
            (float(m_lo[i]), float(m_hi[i])),
            float(share[i]),
            (float(s_lo[i]), float(s_hi[i])),
        )
        for i in range(k)
    ]


def total_gain_ci(
    gain: np.ndarray, *, n_boot: int = 1000, seed: int = 0, level: float = 0.95
) -> tuple[float, float, float]:
    """Mean gain per token and its window-bootstrap interval."""
    gain = np.asarray(gain, dtype=float)
    rng = np.random.default_rng(seed)
    per_w = gain.sum(axis=1)
    n = gain.shape[1]
    draws = rng.integers(0, len(gain), size=(n_boot, len(gain)))
    boots = per_w[draws].sum(axis=1) / (len(gain) * n)
    lo, hi = np.quantile(boots, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(gain.mean()), float(lo), float(hi)
