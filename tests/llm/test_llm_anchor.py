"""Anchor-function task: generator, splits and the solution
classifier.

Every label is recomputed here from the tokens alone, with the maps written out again, so a
slip in the generator's table or in the placement of the triple cannot pass.
"""

import numpy as np
import pytest

from smallinit.core.errors import ConfigError
from smallinit.llm.data import anchor
from smallinit.llm.data.anchor import AnchorTaskConfig, generate

MAPS = {1: lambda x: x + 5, 2: lambda x: x + 1, 3: lambda x: x - 2, 4: lambda x: x - 8}


def composite(x, a1, a2):
    if (a1, a2) == (3, 4):
        return x - 6
    return MAPS[a1](MAPS[a2](x))


def parse(row):
    """(x, a1, a2, p) read off a token row: the anchors are the only tokens in 1..4."""
    where = [i for i, t in enumerate(row) if 1 <= t <= 4]
    assert len(where) == 2 and where[1] == where[0] + 1, row
    p = where[0] - 1
    assert p >= 0, row
    return int(row[p]), int(row[where[0]]), int(row[where[1]]), p


@pytest.fixture(scope="module")
def data():
    return generate(AnchorTaskConfig(seed=3, n_train=3000, n_test=600))


def test_single_maps_and_the_exception():
    for x in (20, 57, 99):
        for a1 in (1, 2, 3, 4):
            for a2 in (1, 2, 3, 4):
                assert anchor.label(x, a1, a2) == composite(x, a1, a2)
    assert anchor.label(50, 3, 4) == 44  # the exception: x − 6
    assert anchor.label(50, 4, 3) == 40  # the held-out pair by composition: x − 10
    assert anchor.SYMMETRIC_DEVIATION == 4 and anchor.INFERENTIAL_SHIFT == -10


@pytest.mark.parametrize("split", ["train", "test_seen", "test_held_out"])
def test_every_label_recomputed_from_the_tokens(data, split):
    s = getattr(data, split)
    assert s.tokens.shape == (len(s), 9)
    for row, y, x, a1, a2, p in zip(s.tokens, s.labels, s.x, s.a1, s.a2, s.pos, strict=True):
        px, pa1, pa2, pp = parse(row)
        assert (px, pa1, pa2, pp) == (x, a1, a2, p)
        assert 0 <= pp <= 6
        assert y == composite(px, pa1, pa2)
        noise = np.delete(row, [pp, pp + 1, pp + 2])
        assert noise.min() >= 20 and noise.max() <= 99
        assert 20 <= px <= 99


def test_pairs_seen_and_held_out(data):
    train_pairs = set(zip(data.train.a1.tolist(), data.train.a2.tolist(), strict=True))
    assert (4, 3) not in train_pairs
    assert train_pairs == set(anchor.ALL_PAIRS) - {(4, 3)}  # 14 ordinary pairs + (3, 4)
    assert len(train_pairs) == 15 and (3, 4) in train_pairs
    assert (4, 3) not in set(
        zip(data.test_seen.a1.tolist(), data.test_seen.a2.tolist(), strict=True)
    )
    held = data.test_held_out
    assert np.all(held.a1 == 4) and np.all(held.a2 == 3)
    assert np.array_equal(held.labels, held.x - 10)
    ex = (data.train.a1 == 3) & (data.train.a2 == 4)
    assert ex.sum() > 100 and np.array_equal(data.train.labels[ex], data.train.x[ex] - 6)


def test_residue_split_is_disjoint_and_in_distribution(data):
    tr, te = data.train, data.test_seen
    assert np.all(tr.x % 9 != tr.pos)
    assert np.all(te.x % 9 == te.pos)
    train_keys = set(zip(tr.x.tolist(), tr.pos.tolist(), strict=True))
    test_keys = set(zip(te.x.tolist(), te.pos.tolist(), strict=True))
    assert not train_keys & test_keys
    # in distribution: each test x and each test position also occur in training
    assert set(te.x.tolist()) <= set(tr.x.tolist())
    assert set(te.pos.tolist()) <= set(tr.pos.tolist())
    # the held-out pair is tested across all x and positions
    held = data.test_held_out
    assert len(set(held.x.tolist())) > 70 and set(held.pos.tolist()) == set(range(7))


def test_generator_is_deterministic_in_its_seed():
    a = generate(AnchorTaskConfig(seed=1, n_train=200, n_test=50))
    b = generate(AnchorTaskConfig(seed=1, n_train=200, n_test=50))
    c = generate(AnchorTaskConfig(seed=2, n_train=200, n_test=50))
    assert np.array_equal(a.train.tokens, b.train.tokens)
    assert np.array_equal(a.test_held_out.tokens, b.test_held_out.tokens)
    assert not np.array_equal(a.train.tokens, c.train.tokens)


def test_sizes_are_configurable():
    d = generate(AnchorTaskConfig(n_train=123, n_test=45))
    assert (len(d.train), len(d.test_seen), len(d.test_held_out)) == (123, 45, 45)


@pytest.mark.parametrize(
    "bad", [{"seq_len": 2}, {"value_lo": 3}, {"value_hi": 10}, {"residue_mod": 5}, {"n_train": 0}]
)
def test_bad_task_configs_are_rejected(bad):
    with pytest.raises(ConfigError):
        AnchorTaskConfig(**bad)


# ----------------------------------------------------------------------------- classifier
def test_classifier_on_constructed_predictions():
    x = np.arange(20, 100)
    assert np.all(anchor.classify(x - 10, x) == 0)
    assert np.all(anchor.classify(x - 6, x) == 1)
    for wrong in (x - 9, x - 14, x + 3, np.zeros_like(x)):
        assert np.all(anchor.classify(wrong, x) == 2)
    # a mixture: half inferential, a quarter symmetric, a quarter other
    pred = np.concatenate([x[:40] - 10, x[40:60] - 6, x[60:] - 2])
    shares = anchor.solution_shares(pred, x)
    assert shares == {"inferential": 0.5, "symmetric": 0.25, "other": 0.25}


def test_summary_separates_unfit_from_memorized(data):
    held, seen = data.test_held_out, data.test_seen
    # a model that fitted the seen pairs and copies (3, 4) on (4, 3): symmetric
    memorized = anchor.summarize(data.train.labels, seen.labels, held.x - 6, data)
    assert memorized["share_symmetric"] == 1.0 and memorized["acc_seen_test"] == 1.0
    # a model that fitted nothing and answers x − 6 everywhere: same held-out share, but
    # its seen-pair accuracy shows it never fitted
    unfit = anchor.summarize(data.train.x - 6, seen.x - 6, held.x - 6, data)
    assert unfit["share_symmetric"] == 1.0
    assert unfit["acc_seen_train"] < 0.1 and unfit["acc_seen_test"] < 0.1


def test_pair_accuracy_locates_errors(data):
    s = data.test_seen
    pred = s.labels.copy()
    wrong = (s.a1 == 2) & (s.a2 == 1)
    pred[wrong] += 1
    acc = anchor.pair_accuracy(pred, s)
    assert acc[1, 0] == 0.0
    assert np.isnan(acc[3, 2])  # (4, 3) never in the seen test split
    others = np.delete(acc.ravel(), [1 * 4 + 0, 3 * 4 + 2])
    assert np.all(others == 1.0)
