"""The anchor-function composite task (docs/science.md §6; Zhang et al., NeurIPS 2024, arXiv
2405.05409): data generator and solution classifier.

Tokens: pad 0, anchors 1–4, values 20–99 (``value_lo``..``value_hi``). Each anchor is a map

    g_1(x) = x + 5,   g_2(x) = x + 1,   g_3(x) = x − 2,   g_4(x) = x − 8,

and a sample is ``seq_len`` = 9 random values in which the triple (x, a1, a2) occupies
positions p, p+1, p+2 with p ∈ [0, seq_len − 3] = [0, 6]. Its label, predicted at the last
position only, is the composite y = g_{a1}(g_{a2}(x)) = x + s_{a1} + s_{a2}, except for the
pair (3, 4), whose label is x − 6 instead of x − 10. Of the 16 ordered pairs, the 14 ordinary
ones and (3, 4) are seen in training; (4, 3) is never seen. On (4, 3) a model that composes
the single maps answers x − 10 (*inferential*); one that treats the pair as the unordered
{3, 4} it memorized answers x − 6 (*symmetric*, deviation +4).

Splits of the seen pairs (disjoint by construction): a sample with x ≡ p (mod ``residue_mod``,
9) is an *in-distribution test* sample — its pair, its x and its position all occur in
training, only the combination (x at position p) does not; every other (x, p) is a training
sample. The held-out pair (4, 3) is tested on all x and positions.

Classifier: for each held-out (4, 3) prediction ŷ, the deviation δ = ŷ − (x − 10) is 0
(inferential), +4 (symmetric) or anything else (other). Seen-pair accuracy is reported on
the training samples and on the in-distribution test samples separately, so that a model
that never fitted the seen pairs is not read as one that memorized.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from smallinit.core.config import check_fields
from smallinit.core.errors import require

PAD = 0
ANCHORS = (1, 2, 3, 4)
SHIFTS = {1: 5, 2: 1, 3: -2, 4: -8}  # g_a(x) = x + SHIFTS[a]
EXCEPTION = (3, 4)  # the seen pair with a non-compositional label
EXCEPTION_SHIFT = -6  # (3, 4): x − 6 instead of x − 10
HELD_OUT = (4, 3)  # the unseen pair
INFERENTIAL_SHIFT = SHIFTS[4] + SHIFTS[3]  # −10: compose the single maps
SYMMETRIC_DEVIATION = EXCEPTION_SHIFT - INFERENTIAL_SHIFT  # +4: copy (3, 4)
ALL_PAIRS = tuple((a1, a2) for a1 in ANCHORS for a2 in ANCHORS)
SEEN_PAIRS = tuple(pair for pair in ALL_PAIRS if pair != HELD_OUT)  # 14 ordinary + (3, 4)
SOLUTIONS = ("inferential", "symmetric", "other")


@dataclass
class AnchorTaskConfig:
    """Sizes and ranges of the task. ``n_train`` training samples are drawn (with
    replacement) from the training (x, p) combinations of the 15 seen pairs;
    ``n_test`` samples each for the in-distribution test and for the held-out pair."""

    seed: int = 0  # data seed (not the training seed)
    n_train: int = 4000
    n_test: int = 800
    seq_len: int = 9
    value_lo: int = 20
    value_hi: int = 99  # inclusive
    residue_mod: int = 9

    def __post_init__(self) -> None:
        check_fields(self, "task")
        require(
            self.n_train >= 1 and self.n_test >= 1,
            f"task.n_train={self.n_train} and task.n_test={self.n_test} must be >= 1",
        )
        require(
            self.seq_len >= 3,
            f"task.seq_len={self.seq_len} is not allowed; it must be >= 3 (x, a1, a2)",
        )
        require(
            self.value_lo > max(ANCHORS) and self.value_hi > self.value_lo,
            f"task.value_lo={self.value_lo}, task.value_hi={self.value_hi} are not "
            f"allowed; values must lie above the anchors ({max(ANCHORS)}) with "
            "value_hi > value_lo",
        )
        require(
            self.value_lo + min_shift() >= 0,
            f"task.value_lo={self.value_lo} is too small: labels down to "
            f"value_lo{min_shift():+d} must be >= 0",
        )
        require(
            self.residue_mod >= 2,
            f"task.residue_mod={self.residue_mod} is not allowed; it must be >= 2",
        )
        require(
            self.n_positions <= self.residue_mod,
            f"task.seq_len={self.seq_len} gives {self.n_positions} positions, more than "
            f"task.residue_mod={self.residue_mod}; every position must keep training x "
            "values",
        )

    @property
    def n_positions(self) -> int:
        """Positions p of the triple: 0 .. seq_len − 3."""
        return self.seq_len - 2

    @property
    def max_label(self) -> int:
        return self.value_hi + max_shift()


def pair_shift(a1: int, a2: int) -> int:
    """y − x for the pair (a1, a2): s_{a1} + s_{a2}, or −6 for the exception (3, 4)."""
    if (a1, a2) == EXCEPTION:
        return EXCEPTION_SHIFT
    return SHIFTS[a1] + SHIFTS[a2]


def min_shift() -> int:
    return min(pair_shift(*p) for p in ALL_PAIRS)


def max_shift() -> int:
    return max(pair_shift(*p) for p in ALL_PAIRS)


def label(x, a1, a2):
    """Vectorized y = g_{a1}(g_{a2}(x)) with the (3, 4) exception."""
    x, a1, a2 = np.asarray(x), np.asarray(a1), np.asarray(a2)
    table = np.zeros((max(ANCHORS) + 1, max(ANCHORS) + 1), dtype=np.int64)
    for p in ALL_PAIRS:
        table[p] = pair_shift(*p)
    return x + table[a1, a2]


def is_test_position(x, p, residue_mod: int = 9):
    """True where (x, p) belongs to the in-distribution test split: x ≡ p (mod m)."""
    return np.asarray(x) % residue_mod == np.asarray(p)


@dataclass
class AnchorSplit:
    """One split: token sequences (N, seq_len), labels (N,) and what built each sample."""

    tokens: np.ndarray
    labels: np.ndarray
    x: np.ndarray
    a1: np.ndarray
    a2: np.ndarray
    pos: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class AnchorData:
    train: AnchorSplit
    test_seen: AnchorSplit  # seen pairs, (x, p) combinations held out by residue
    test_held_out: AnchorSplit  # the unseen pair (4, 3), all (x, p)


def _draw(
    rng: np.random.Generator, n: int, cfg: AnchorTaskConfig, pairs, want_test: bool | None
) -> AnchorSplit:
    """``n`` samples with pairs uniform over ``pairs``; (x, p) uniform over the training
    combinations (``want_test`` False), the test combinations (True) or all (None)."""
    values = np.arange(cfg.value_lo, cfg.value_hi + 1)
    combos = np.array([(x, p) for x in values for p in range(cfg.n_positions)])
    if want_test is not None:
        test = is_test_position(combos[:, 0], combos[:, 1], cfg.residue_mod)
        combos = combos[test if want_test else ~test]
    pairs = np.asarray(pairs)
    which = rng.integers(len(pairs), size=n)
    a1, a2 = pairs[which, 0], pairs[which, 1]
    pick = rng.integers(len(combos), size=n)
    x, pos = combos[pick, 0], combos[pick, 1]
    tokens = rng.integers(cfg.value_lo, cfg.value_hi + 1, size=(n, cfg.seq_len))
    rows = np.arange(n)
    tokens[rows, pos] = x
    tokens[rows, pos + 1] = a1
    tokens[rows, pos + 2] = a2
    return AnchorSplit(
        tokens.astype(np.int64),
        label(x, a1, a2).astype(np.int64),
        x.astype(np.int64),
        a1.astype(np.int64),
        a2.astype(np.int64),
        pos.astype(np.int64),
    )


def subset(data: AnchorData, n_train: int) -> AnchorData:
    """The same data with only the first ``n_train`` training samples."""
    t = data.train
    head = AnchorSplit(
        *(getattr(t, k)[:n_train] for k in ("tokens", "labels", "x", "a1", "a2", "pos"))
    )
    return AnchorData(head, data.test_seen, data.test_held_out)


def generate(cfg: AnchorTaskConfig) -> AnchorData:
    """The three splits, deterministic in ``cfg`` (each from its own seeded stream)."""
    return AnchorData(
        train=_draw(np.random.default_rng([cfg.seed, 0]), cfg.n_train, cfg, SEEN_PAIRS, False),
        test_seen=_draw(np.random.default_rng([cfg.seed, 1]), cfg.n_test, cfg, SEEN_PAIRS, True),
        test_held_out=_draw(
            np.random.default_rng([cfg.seed, 2]), cfg.n_test, cfg, (HELD_OUT,), None
        ),
    )


# ----------------------------------------------------------------------------- classifier
def deviation(pred, x) -> np.ndarray:
    """δ = ŷ − (x − 10): the prediction's distance from the inferential answer."""
    return np.asarray(pred, dtype=np.int64) - (np.asarray(x, dtype=np.int64) + INFERENTIAL_SHIFT)


def classify(pred, x) -> np.ndarray:
    """Per sample: 0 inferential (δ = 0), 1 symmetric (δ = +4), 2 other."""
    d = deviation(pred, x)
    return np.where(d == 0, 0, np.where(d == SYMMETRIC_DEVIATION, 1, 2))


def solution_shares(pred, x) -> dict[str, float]:
    """Shares of inferential, symmetric and other answers among held-out predictions."""
    kinds = classify(pred, x)
    if kinds.size == 0:
        raise ValueError("no held-out predictions to classify")
    return {name: float(np.mean(kinds == i)) for i, name in enumerate(SOLUTIONS)}


def accuracy(pred, labels) -> float:
    pred, labels = np.asarray(pred), np.asarray(labels)
    if pred.shape != labels.shape or pred.size == 0:
        raise ValueError(
            f"predictions {pred.shape} and labels {labels.shape} must match and be non-empty"
        )
    return float(np.mean(pred == labels))


def pair_accuracy(pred, split: AnchorSplit) -> np.ndarray:
    """(4, 4) accuracy per pair (a1, a2) (NaN where the split has no sample of that pair)."""
    out = np.full((len(ANCHORS), len(ANCHORS)), np.nan)
    ok = np.asarray(pred) == split.labels
    for a1, a2 in ALL_PAIRS:
        sel = (split.a1 == a1) & (split.a2 == a2)
        if sel.any():
            out[a1 - 1, a2 - 1] = ok[sel].mean()
    return out


def summarize(pred_train, pred_seen, pred_held, data: AnchorData) -> dict[str, float]:
    """Everything the phase diagram needs from one trained model's predictions."""
    shares = solution_shares(pred_held, data.test_held_out.x)
    return {
        "acc_seen_train": accuracy(pred_train, data.train.labels),
        "acc_seen_test": accuracy(pred_seen, data.test_seen.labels),
        **{f"share_{k}": v for k, v in shares.items()},
    }
