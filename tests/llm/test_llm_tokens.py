"""Token-level analysis: n-gram baselines, copyability, buckets and gain shares on tokens
whose answers are known by construction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from smallinit.llm.analysis.tokens import (
    bucket_families,
    copyable,
    gain_shares,
    ngram_losses,
    quartile_labels,
    total_gain_ci,
)
from smallinit.llm.data.synthetic import CATEGORIES


def test_ngram_losses_match_hand_counts():
    train = np.array([0, 1, 0, 1, 0, 1, 0, 2])  # N = 8, V = 3
    inputs = np.array([[0, 0, 1, 2]])
    targets = np.array([[1, 2, 0, 0]])
    l1, l2 = ngram_losses(train, inputs, targets, 3)
    # unigram counts 0:4, 1:3, 2:1 -> p = (c + 1/2)/(8 + 3/2)
    assert l1[0, 0] == pytest.approx(-math.log(3.5 / 9.5))
    assert l1[0, 1] == pytest.approx(-math.log(1.5 / 9.5))
    # bigrams: (0,1)x3, (1,0)x3, (0,2)x1; c(0.) = 4, c(1.) = 3, c(2.) = 0
    assert l2[0, 0] == pytest.approx(-math.log(3.5 / 5.5))
    assert l2[0, 1] == pytest.approx(-math.log(1.5 / 5.5))
    assert l2[0, 2] == pytest.approx(-math.log(3.5 / 4.5))
    assert l2[0, 3] == pytest.approx(-math.log(0.5 / 1.5))  # unseen context: uniform


def test_copyable_marks_repeated_pairs_only():
    inputs = np.array([[5, 6, 5, 6, 7, 5]])
    targets = np.array([[6, 5, 6, 7, 5, 6]])
    # pairs: (5,6) (6,5) (5,6)* (6,7) (7,5) (5,6)*
    assert copyable(inputs, targets).tolist() == [[False, False, True, False, False, True]]


def test_quartiles_of_known_values():
    idx, labels = quartile_labels(np.arange(8.0), "x")
    assert idx.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert labels == ["x Q1", "x Q2", "x Q3", "x Q4"]


def test_category_buckets_split_answers():
    arith, fact = CATEGORIES.index("arith"), CATEGORIES.index("fact")
    tokens = {
        "inputs": np.zeros((1, 4), int),
        "targets": np.zeros((1, 4), int),
        "tags": np.array([[0, arith, arith, fact]]),
        "answer": np.array([[0, 0, 1, 1]]),
    }
    idx, labels = bucket_families(tokens, np.array([0, 0, 1]), 2)["category"]
    assert [labels[i] for i in idx[0]] == ["text", "arith", "arith:answer", "fact:answer"]


def test_gain_shares_known_split():
    gain = np.zeros((6, 4))
    buckets = np.tile([0, 0, 1, 1], (6, 1))
    gain[:, 0] = 1.0  # bucket 0 carries all the gain, in every window
    out = gain_shares(gain, buckets, ["a", "b"], n_boot=200)
    assert out[0].share == 1.0 and out[0].share_ci == (1.0, 1.0)
    assert out[1].share == 0.0 and out[0].token_share == 0.5
    assert out[0].mean_gain == 0.5 and out[1].mean_gain == 0.0
    gain[:3, 2] = 1.0  # bucket 1 now gains in half the windows: share 1/3, uncertain
    out = gain_shares(gain, buckets, ["a", "b"], n_boot=500)
    assert out[1].share == pytest.approx(1 / 3)
    assert out[1].share_ci[0] < 1 / 3 < out[1].share_ci[1]
    assert out[0].share + out[1].share == pytest.approx(1.0)


def test_total_gain_interval_brackets_mean():
    rng = np.random.default_rng(0)
    gain = rng.normal(0.2, 1.0, size=(200, 16))
    mean, lo, hi = total_gain_ci(gain, n_boot=500)
    assert lo < mean < hi and lo < 0.2 < hi
    assert hi - lo == pytest.approx(2 * 1.96 / math.sqrt(200 * 16), rel=0.25)
