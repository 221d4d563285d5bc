"""Graded reasoning: answer spaces and chance, difficulty tags, the per-cell evaluator (an
oracle scores 1, a prompt-blind uniform guesser scores chance) and the one parser."""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter

import numpy as np
import pytest
import torch
from scipy import stats

from smallinit.llm.analysis.reasoning import Cell, cell_key, cells
from smallinit.llm.data import corpus, synthetic
from smallinit.llm.data.tokenizer import encode_many
from smallinit.llm.run_config import DataConfig
from smallinit.llm.training.evaluate import answer_accuracy

MIX = (0.25, 0.2, 0.2, 0.35)
SHIFT = {1: 5, 2: 1, 3: -2, 4: -8}


def all_cells() -> list[tuple[str, int]]:
    """Every (task, difficulty) the synthetic corpus has, in :func:`cells`' order."""
    return sorted((t, k) for t in synthetic.REASONING for k in synthetic.LEVELS)


def _solve(item: synthetic.Item) -> tuple[str, int]:
    """An independent solver: (answer, difficulty) read off the prompt alone."""
    words = item.prompt.split()
    if item.category == "arith":
        value, ops = int(words[1]), words[2:-1:2]
        for op, x in zip(ops, words[3:-1:2], strict=True):
            value = value + int(x) if op == "+" else value - int(x)
        return str(value), len(ops)
    if item.category == "anchor":
        maps = [int(a) for a in words[2:-1]]
        return str(int(words[1]) + sum(SHIFT[a] for a in maps)), len(maps)
    rules = dict(re.findall(r"(\w) > (\w)", item.prompt))
    path = [words[1]]
    while path[-1] in rules:
        path.append(rules[path[-1]])
    return path[-1], len(path) - 1


def _brute_space(task: str, level: int) -> set[str]:
    """The answer space enumerated from the rules as stated in the module docstring (not
    through the generator's tables): answers reachable in both the training and the
    held-out part."""
    if task == "logic":
        return set("abcdefghijklmnopqrstuvwxyz")
    parts: dict[bool, set[int]] = {False: set(), True: set()}
    if task == "arith":
        for ops in ["+"] if level == 1 else itertools.product("+-", repeat=level):
            for xs in itertools.product(range(10), repeat=level + 1):
                v = xs[0] + sum(x if o == "+" else -x for o, x in zip(ops, xs[1:], strict=True))
                if level > 1 and not 0 <= v <= 19:
                    continue
                if level == 1:
                    held = xs[0] < xs[1] and (xs[0] + 2 * xs[1]) % 3 != 0
                else:
                    code = sum((2 * i + 1) * x for i, x in enumerate(xs)) + 3 * list(ops).count("-")
                    held = code % 7 == 0
                parts[held].add(v)
    else:
        for maps in itertools.product(range(1, 5), repeat=level):
            for x in range(20, 100):
                y = x + sum(SHIFT[a] for a in maps)
                if 20 <= y <= 99:
                    held = (x + sum((2 * i + 3) * a for i, a in enumerate(maps))) % 8 == 0
                    parts[held].add(y)
    return {str(v) for v in parts[False] & parts[True]}


@pytest.mark.parametrize("task, level", all_cells())
def test_chance_is_one_over_the_answer_space_and_answers_are_uniform(task, level):
    space = synthetic.answer_space(task, level)
    assert set(space) == _brute_space(task, level)
    assert synthetic.chance(task, level) == pytest.approx(1 / len(space), abs=0)
    rng = np.random.default_rng(0)
    for held_out in (False, True):
        n = 60 * len(space)
        answers = Counter(
            synthetic.reasoning_item(task, level, rng, held_out).answer.strip() for _ in range(n)
        )
        assert set(answers) == set(space)  # the whole space is used, nothing outside it
        # uniform over the space: a chi-square test that a biased generator would fail
        observed = [answers[a] for a in space]
        assert stats.chisquare(observed).pvalue > 1e-4, (task, level, held_out)


def test_hand_derived_answer_spaces():
    assert synthetic.answer_space("arith", 1) == tuple(str(v) for v in range(1, 18))
    assert synthetic.chance("arith", 1) == 1 / 17
    assert synthetic.chance("arith", 2) == synthetic.chance("arith", 3) == 1 / 20
    assert synthetic.chance("logic", 3) == 1 / 26
    with pytest.raises(ValueError, match="level 4 is not allowed"):
        synthetic.chance("arith", 4)
    with pytest.raises(ValueError, match="'fact' is not a reasoning task"):
        synthetic.answer_space("fact", 1)


def test_items_carry_their_difficulty_and_answers_follow_from_prompts():
    train, val = synthetic.splits(3000, 1500, seed=4, n_facts=30, mix=MIX)
    levels = Counter()
    for part, items in (("train", train), ("val", val)):
        for it in items:
            if it.category == "fact":
                assert it.level == 0
                continue
            answer, level = _solve(it)
            assert it.answer == f" {answer}\n" and it.level == level, it
            levels[(part, it.category, level)] += 1
            words = it.prompt.split()
            if it.category == "anchor":
                held = synthetic.anchor_held_out(*map(int, words[1:-1]))
                assert held == (part == "val")
            if it.category == "arith":
                xs = tuple(int(w) for w in words[1:-1:2])
                held = synthetic.arith_held_out(xs, tuple(words[2:-1:2]))
                assert held == (part == "val")
    # the training mix covers every level of every task, about equally
    for task in synthetic.REASONING:
        counts = [levels[("train", task, k)] for k in synthetic.LEVELS]
        assert min(counts) > 0.7 * max(counts), (task, counts)
        assert all(levels[("val", task, k)] > 50 for k in synthetic.LEVELS)
    train_text = {it.text for it in train}
    assert not any(it.text in train_text for it in val if it.category != "fact")


def test_held_out_answers_are_balanced_within_each_cell():
    """The held-out stream deals each cell's answers from a shuffled deck: the best
    constant answer on the first m·|space| items of a cell scores exactly chance."""
    val = synthetic.generate(4000, seed=2, n_facts=30, mix=MIX, stream=1)
    train = synthetic.generate(4000, seed=2, n_facts=30, mix=MIX, stream=0)
    for task, level in all_cells():
        space = synthetic.answer_space(task, level)
        answers = [it.answer.strip() for it in val if (it.category, it.level) == (task, level)]
        m = len(answers) // len(space)
        assert m >= 1
        counts = Counter(answers[: m * len(space)])
        assert set(counts.values()) == {m} and set(counts) == set(space)
        # any prefix is within one of balanced
        prefix = Counter(answers[: len(space) + len(space) // 2])
        assert max(prefix.values()) - min(prefix[a] for a in space) <= 1
        # training answers are drawn independently (not dealt): far from balanced
        tr = Counter(it.answer.strip() for it in train if (it.category, it.level) == (task, level))
        if len(space) > 2:
            assert max(tr.values()) - min(tr[a] for a in space) > 1


def test_logic_levels_add_distractors_to_the_chain():
    """Level 1 is one rule (its conclusion is the answer); level k adds k − 1 distractor
    rules on letters disjoint from the chain, in random order, the chain's last rule never
    last."""
    rng = np.random.default_rng(1)
    first_rule_is_chain = Counter()
    for level in synthetic.LEVELS:
        for _ in range(300):
            it = synthetic.logic_item(rng, level)
            rules = re.findall(r"(\w) > (\w)", it.prompt)
            answer, depth = _solve(it)
            assert len(rules) == 2 * level - 1 and depth == level
            letters = [c for r in rules for c in r]
            assert len(set(letters)) == len(letters) - (level - 1)  # only the chain links
            given = it.prompt.split()[1]
            first_rule_is_chain[level] += rules[0][0] == given
            # the letter before "?" is the answer at level 1 only (no copy shortcut)
            assert (it.prompt.split()[-2] == answer) == (level == 1)
    assert first_rule_is_chain[1] == 300
    assert 0.1 < first_rule_is_chain[3] / 300 < 0.35  # shuffled


# ----------------------------------------------------------------------------- evaluator
class TableModel:
    """A fake model: for a row starting with a known prompt it puts all its mass on the
    table's answer tokens (teacher-forced positions), elsewhere on token 0."""

    def __init__(self, table: dict[tuple, list[int]], vocab: int):
        self.table, self.vocab = table, vocab

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(*x.shape, self.vocab)
        for r, row in enumerate(x.tolist()):
            p = next(p for p in range(1, len(row) + 1) if tuple(row[:p]) in self.table)
            for i, tok in enumerate(self.table[tuple(row[:p])]):
                if p - 1 + i < len(row):
                    logits[r, p - 1 + i, tok] = 30.0
        return logits


@pytest.fixture(scope="module")
def graded_corpus(tmp_path_factory):
    cfg = DataConfig(
        cache_dir=str(tmp_path_factory.mktemp("cache")),
        synthetic_items=3000,
        synthetic_val_items=2500,
        synthetic_facts=40,
    )
    c = corpus.load(cfg, 512)
    _, val = synthetic.splits(3000, 2500, seed=0, n_facts=40, mix=cfg.synthetic_mix)
    return c, val


def _table(c, val, answer_of):
    items = c.val_items
    table = {}
    for i, it in enumerate(val):
        s, p = items["start"][i], items["prompt_len"][i]
        assert items["level"][i] == it.level
        table[tuple(int(t) for t in c.val[s : s + p])] = answer_of(it)
    return table


def test_an_oracle_scores_one_in_every_cell(graded_corpus):
    c, val = graded_corpus
    items = c.val_items
    table = {}
    for i in range(len(val)):
        s, p, n = items["start"][i], items["prompt_len"][i], items["length"][i]
        table[tuple(int(t) for t in c.val[s : s + p])] = [int(t) for t in c.val[s + p : s + n]]
    out = answer_accuracy(TableModel(table, c.vocab_size), c, "cpu", 100, 64)
    got = cells(out)
    assert [(x.task, x.difficulty) for x in got] == all_cells()
    for cell in got:
        assert cell.acc == 1.0 and cell.n == 100
        assert cell.chance == synthetic.chance(cell.task, cell.difficulty)
        assert cell.answer_loss < 1e-6  # all mass on the right tokens: loss ≈ 0
    assert out["acc_reasoning"] == 1.0 and out["acc_fact"] == 1.0
    for task in synthetic.REASONING:
        assert out[f"chance_{task}"] == pytest.approx(
            np.mean([synthetic.chance(task, k) for k in synthetic.LEVELS])
        )


def test_a_prompt_blind_uniform_guesser_scores_chance(graded_corpus):
    c, val = graded_corpus
    rng = np.random.default_rng(0)

    def guess(it):
        if it.category == "fact":
            return encode_many(c.tokenizer, [" teal\n"])[0]
        space = synthetic.answer_space(it.category, it.level)
        return encode_many(c.tokenizer, [f" {space[int(rng.integers(len(space)))]}\n"])[0]

    model = TableModel(_table(c, val, guess), c.vocab_size)
    out = answer_accuracy(model, c, "cpu", 10_000, 64)
    got = cells(out)
    z = []
    for cell in got:
        fits = (
            (c.val_items["category"] == synthetic.CATEGORIES.index(cell.task))
            & (c.val_items["level"] == cell.difficulty)
            & (c.val_items["length"] <= 64)
        ).sum()
        assert cell.n == fits  # every held-out item of the cell scored
        se = math.sqrt(cell.chance * (1 - cell.chance) / cell.n)
        z.append((cell.acc - cell.chance) / se)
        assert abs(z[-1]) < 4, cell
        # a wrong guess costs 30 nats on its first token: the loss tells right from wrong
        assert cell.answer_loss > 1.0
    assert abs(sum(z) / math.sqrt(len(z))) < 4  # pooled over the nine cells
    # the best constant answer of a cell scores exactly its stored majority share
    items = c.val_items
    for cell in got:
        chosen = np.flatnonzero(
            (items["category"] == synthetic.CATEGORIES.index(cell.task))
            & (items["level"] == cell.difficulty)
        )
        answers = Counter(val[i].answer for i in chosen)
        best = answers.most_common(1)[0][0]
        assert cell.majority == answers[best] / len(chosen) >= cell.chance
        constant = TableModel(
            _table(c, val, lambda it, best=best: encode_many(c.tokenizer, [best])[0]), c.vocab_size
        )
        scored = {x.name: x for x in cells(answer_accuracy(constant, c, "cpu", 10_000, 64))}
        assert scored[cell.name].acc == cell.majority
    pooled = sum(x.acc * x.n for x in got) / sum(x.n for x in got)
    assert out["acc_reasoning"] == pytest.approx(pooled)


def test_cells_round_trip_and_ignore_other_keys():
    made = [
        Cell("logic", 2, 0.61, 0.5, 180, 0.33, 0.53),
        Cell("arith", 1, 0.2, 1 / 17, 201, 1.4, 0.08),
        Cell("arith", 3, 0.05, 0.05, 150, 1.9, 0.04),
    ]
    summary = {
        "val_loss": 1.7,
        "acc_arith": 0.1,
        "chance_arith": 0.05,
        "acc_fact": 0.3,
        "answer_loss_arith": 1.5,
        "acc_reasoning": 0.2,
    }
    for c in made:
        summary.update(c.summary_items())
    assert cells(summary) == sorted(made, key=lambda c: (c.task, c.difficulty))
    assert [c.baseline for c in cells(summary)] == [0.08, 0.05, 0.53]
    assert cell_key("answer_loss", "anchor", 3) == "answer_loss_anchor_d3"
    old = {"acc_logic_d1": 0.5, "chance_logic_d1": 0.5, "n_logic_d1": 10}  # no majority
    assert cells(old)[0].baseline == 0.5 and math.isnan(cells(old)[0].answer_loss)
    assert cells({"val_loss": 1.0, "acc_reasoning": 0.2}) == []
