"""The ``synthetic`` corpus: graded reasoning items and memorization items, generated
deterministically.

Each item is one line ``PROMPT ANSWER\\n``: the answer starts with a space, so a byte-level
BPE never merges it with the prompt and the prompt's tokens are a prefix of the item's.
Categories (``CATEGORIES``; token tags in the corpus arrays) — the three reasoning tasks
(``REASONING``) come in difficulty levels k ∈ ``LEVELS`` = 1, 2, 3, drawn uniformly, so the
training mix covers every level:

* ``arith`` — arithmetic on digits 0–9, answer the result only.
  k = 1: one addition (``calc 3 + 4 :`` → ``7``); k = 2, 3: k additions or subtractions
  evaluated left to right (``calc 9 - 4 + 7 :`` → ``12``), results 0–19.
* ``anchor`` — anchor functions in the style of docs/science.md §6 (Zhang et al., arXiv
  2405.05409): anchors 1–4 act as x ↦ x+5, x+1, x−2, x−8 (``ANCHOR_MAPS``) and
  ``anchor 37 3 4 :`` asks for g₃(g₄(37)) = 27. k = number of maps composed (1: a single
  map, 2: the composite pair, 3: three maps); x and the answer lie in 20–99.
* ``logic`` — implication chains: ``given k . rules m > q , k > m , a > b ?`` → ``q``,
  the letter the chain from the given letter ends at. k = chain length: k = 1 is one rule
  and nothing else (one-step modus ponens: the answer is the rule's conclusion, the
  letter just before the question mark); k = 2, 3 add one and two distractor rules
  (disjoint from the chain) and shuffle the rules, the chain's last rule never standing
  last, so copying the letter before the question mark never answers them and the chain
  has to be followed. Letters are written with spaces around them, so a letter is one
  token wherever it stands.
* ``fact`` — memorization: a fixed table of random entity → attribute facts
  (``fact zorbik color : teal``); the answer cannot be inferred, only remembered.

**Answers are uniform over each task-level's answer space** (:func:`answer_space`): the
generator draws the answer first, uniformly, and then a prompt with that answer uniformly
among the admissible ones. So a guess that ignores the prompt is right with probability
1/|answer space| whatever it guesses — that is :func:`chance` (docs/science.md §8).

**Held-out split.** Arithmetic and anchor items are split by a fixed rule on the prompt
(:func:`held_out`), so no held-out prompt is ever trained on: arith k = 1 holds out
a + b with a < b and (a + 2b) mod 3 ≠ 0 (its mirror b + a is a training item: the level
asks for addition on unseen ordered pairs), k ≥ 2 holds out one operand tuple in about
seven; anchor holds out (x + Σᵢ (2i+1)·aᵢ) mod 8 = 0 (i = 1…k; for k = 2 the published
x + 3a₁ + 5a₂ rule). The answer space of a level is the set of answers reachable in both
parts. Logic items are novel by their letters; held-out items of any reasoning task never
repeat a training item (checked by exact text). Held-out fact items are the same facts by
design (they probe recall of what was memorized).

**Logic level 1 under a large training split** (the scheme :data:`HELD_OUT`; a run's
``data.synthetic_held_out``). Its
650 prompts (25 given letters × 26 answers) are all drawn by a few hundred thousand
training items, so held out by exclusion (the scheme ``"exclusion"``, the default, with
which every stored corpus was drawn) it has nothing left to hold out. The scheme
``"partition"`` gives it a held-out part as arith and anchor have: the (given, answer)
letter pairs with (i(given) + 3·i(answer)) mod 8 = 0 (letters indexed a = 0 … z = 25; 72
of the 650 prompts, 2 to 4 per answer), never drawn for training; every other task-level
draws as under ``"exclusion"``.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np

from smallinit.core.errors import ConfigError

CATEGORIES = ("text", "arith", "anchor", "logic", "fact")  # tag 0 is plain text
REASONING = ("arith", "anchor", "logic")
LEVELS = (1, 2, 3)
ANCHOR_MAPS = {1: 5, 2: 1, 3: -2, 4: -8}
ARITH_RESULTS = range(0, 20)  # admissible results of arith levels >= 2
ANCHOR_VALUES = range(20, 100)  # x and the answer of anchor items
_LETTERS = tuple("abcdefghijklmnopqrstuvwxyz")
#: how logic level 1 is held out (module docstring): by exclusion of the prompts training
#: drew (the default, every stored corpus), or by a fixed partition of its prompts
HELD_OUT = ("exclusion", "partition")
_SYLLABLES = (
    "ka",
    "zo",
    "ri",
    "mu",
    "te",
    "lo",
    "ba",
    "ne",
    "shi",
    "vu",
    "po",
    "da",
    "gi",
    "fe",
    "xo",
    "qua",
    "ly",
    "tor",
    "ben",
    "sa",
)
_ATTRIBUTES = {
    "color": ("red", "teal", "amber", "violet", "green", "black", "white", "gold"),
    "city": ("oslo", "lima", "kyoto", "cairo", "perth", "quito", "riga", "sofia"),
    "food": ("rice", "figs", "bread", "soup", "plums", "fish", "beans", "cheese"),
}


@dataclass(frozen=True)
class Item:
    prompt: str
    answer: str  # starts with a space and ends with "\n"
    category: str
    level: int = 0  # difficulty 1..3 of a reasoning item; 0 for facts

    @property
    def text(self) -> str:
        return self.prompt + self.answer


def _check_level(task: str, level: int) -> None:
    if task not in REASONING:
        raise ValueError(f"task {task!r} is not a reasoning task; use one of {REASONING}")
    if level not in LEVELS:
        raise ValueError(f"level {level!r} is not allowed; use one of {LEVELS}")


# ----------------------------------------------------------------------------- facts
def make_facts(n: int, seed: int) -> list[tuple[str, str, str]]:
    """``n`` distinct (entity, attribute, value) triples, fixed by ``seed``."""
    rng = np.random.default_rng([seed, 7])
    names: set[str] = set()
    facts = []
    kinds = sorted(_ATTRIBUTES)
    while len(facts) < n:
        name = "".join(rng.choice(_SYLLABLES, size=int(rng.integers(2, 4))))
        if name in names:
            continue
        names.add(name)
        kind = kinds[int(rng.integers(len(kinds)))]
        values = _ATTRIBUTES[kind]
        facts.append((name, kind, values[int(rng.integers(len(values)))]))
    return facts


def fact_item(fact: tuple[str, str, str]) -> Item:
    name, kind, value = fact
    return Item(f"fact {name} {kind} :", f" {value}\n", "fact")


# ----------------------------------------------------------------------------- arith, anchor
def arith_value(operands: tuple[int, ...], ops: tuple[str, ...]) -> int:
    value = operands[0]
    for op, x in zip(ops, operands[1:], strict=True):
        value = value + x if op == "+" else value - x
    return value


def arith_held_out(operands: tuple[int, ...], ops: tuple[str, ...]) -> bool:
    """The held-out rule of arith items (module docstring)."""
    if len(ops) == 1:
        a, b = operands
        return a < b and (a + 2 * b) % 3 != 0
    code = sum((2 * i + 1) * x for i, x in enumerate(operands)) + 3 * ops.count("-")
    return code % 7 == 0


def anchor_held_out(x: int, *maps: int) -> bool:
    """The held-out rule of anchor items: (x + Σᵢ (2i+1)·aᵢ) mod 8 = 0, i = 1…k."""
    return (x + sum((2 * i + 3) * a for i, a in enumerate(maps))) % 8 == 0


def anchor_value(x: int, maps: tuple[int, ...]) -> int:
    """g_{a1}(g_{a2}(…g_{ak}(x))); the maps are shifts, so the order does not matter."""
    return x + sum(ANCHOR_MAPS[a] for a in maps)


def _arith_prompts(level: int):
    """Every (operands, ops) of the level with its result and split."""
    op_sets = [("+",)] if level == 1 else itertools.product("+-", repeat=level)
    for ops in op_sets:
        for operands in itertools.product(range(10), repeat=level + 1):
            value = arith_value(operands, ops)
            if level == 1 or value in ARITH_RESULTS:
                yield (operands, tuple(ops)), value, arith_held_out(operands, tuple(ops))


def _anchor_prompts(level: int):
    for maps in itertools.product(ANCHOR_MAPS, repeat=level):
        for x in ANCHOR_VALUES:
            y = anchor_value(x, maps)
            if y in ANCHOR_VALUES:
                yield (x, maps), y, anchor_held_out(x, *maps)


@functools.cache
def _tables(task: str, level: int) -> tuple[tuple[int, ...], dict]:
    """The level's answer space (answers reachable in both splits, sorted) and, per
    (split, answer), every admissible prompt — enumerated once."""
    prompts = _arith_prompts(level) if task == "arith" else _anchor_prompts(level)
    table: dict[tuple[bool, int], list] = {}
    for params, answer, held in prompts:
        table.setdefault((held, answer), []).append(params)
    space = tuple(sorted(a for held, a in table if not held and (True, a) in table))
    return space, table


def answer_space(task: str, level: int) -> tuple[str, ...]:
    """Every answer (as written, without the leading space and newline) a held-out or
    training item of ``task`` at ``level`` can have; each is equally likely."""
    _check_level(task, level)
    if task == "logic":
        return _LETTERS
    return tuple(str(a) for a in _tables(task, level)[0])


def chance(task: str, level: int) -> float:
    """Accuracy of a guess that ignores the prompt: 1/|answer space| (answers are drawn
    uniformly from it, so every prompt-blind guess scores this)."""
    return 1.0 / len(answer_space(task, level))


def _numeric_item(
    task: str, level: int, rng: np.random.Generator, held_out: bool, answer: str | None
) -> Item:
    space, table = _tables(task, level)
    answer = space[int(rng.integers(len(space)))] if answer is None else int(answer)
    options = table[(held_out, answer)]
    params = options[int(rng.integers(len(options)))]
    if task == "arith":
        operands, ops = params
        text = " ".join(
            [f"calc {operands[0]}"] + [f"{op} {x}" for op, x in zip(ops, operands[1:], strict=True)]
        )
    else:
        x, maps = params
        text = " ".join(["anchor", str(x), *map(str, maps)])
    return Item(text + " :", f" {answer}\n", task, level)


# ----------------------------------------------------------------------------- logic
def _check_scheme(scheme: str) -> None:
    if scheme not in HELD_OUT:
        raise ValueError(f"held-out scheme {scheme!r} is not allowed; use one of {HELD_OUT}")


def logic_held_out(given: str, end: str) -> bool:
    """The held-out rule of logic level-1 items under the ``"partition"`` scheme:
    (i(given) + 3·i(end)) mod 8 = 0, letters indexed a = 0 … z = 25."""
    return (_LETTERS.index(given) + 3 * _LETTERS.index(end)) % 8 == 0


def logic_item(
    rng: np.random.Generator,
    level: int,
    answer: str | None = None,
    *,
    held_out: bool = False,
    scheme: str = "exclusion",
) -> Item:
    """A chain of ``level`` rules from the given letter to the answer letter, plus
    distractor rules (none at level 1, one at level 2, two at level 3), in random order;
    the answer uniform over the 26 letters unless given (module docstring). Under the
    ``"partition"`` scheme a level-1 item's given letter comes from the training or the
    held-out part (``held_out``; :func:`logic_held_out`)."""
    _check_level("logic", level)
    _check_scheme(scheme)
    end = _LETTERS[int(rng.integers(26))] if answer is None else answer
    if level == 1 and scheme == "partition":
        options = [c for c in _LETTERS if c != end and logic_held_out(c, end) == held_out]
        given = options[int(rng.integers(len(options)))]
        return Item(f"given {given} . rules {given} > {end} ?", f" {end}\n", "logic", 1)
    n_dist = level - 1
    others = [c for c in _LETTERS if c != end]
    chosen = [str(c) for c in rng.choice(others, size=level + 2 * n_dist, replace=False)]
    chain = chosen[:level] + [end]
    rules = [(chain[i], chain[i + 1]) for i in range(level)]
    rules += [(chosen[level + 2 * j], chosen[level + 2 * j + 1]) for j in range(n_dist)]
    order = rng.permutation(len(rules))
    if level > 1 and order[-1] == level - 1:  # the chain's last rule never stands last
        order[-1], order[0] = order[0], order[-1]
    text = " ,".join(f" {rules[i][0]} > {rules[i][1]}" for i in order)
    return Item(f"given {chain[0]} . rules{text} ?", f" {end}\n", "logic", level)


def reasoning_item(
    task: str,
    level: int,
    rng: np.random.Generator,
    held_out: bool = False,
    answer: str | None = None,
    *,
    scheme: str = "exclusion",
) -> Item:
    """One item of ``task`` at ``level`` (held-out part for arith and anchor when asked,
    and for logic level 1 under the ``"partition"`` scheme), its answer drawn uniformly
    from the answer space unless ``answer`` is given."""
    _check_level(task, level)
    if answer is not None and answer not in answer_space(task, level):
        raise ValueError(f"answer {answer!r} is not in the answer space of {task} level {level}")
    if task == "logic":
        return logic_item(rng, level, answer, held_out=held_out, scheme=scheme)
    return _numeric_item(task, level, rng, held_out, answer)


# ----------------------------------------------------------------------------- capacity
def held_out_prompts(task: str, level: int, scheme: str = "exclusion") -> tuple[int, ...] | None:
    """The held-out prompts of each answer of a partitioned task-level (arith, anchor, and
    logic level 1 under the ``"partition"`` scheme); None for the levels held out by
    exclusion (the other logic levels)."""
    _check_level(task, level)
    _check_scheme(scheme)
    if task == "logic":
        if level == 1 and scheme == "partition":
            return tuple(sum(g != e and logic_held_out(g, e) for g in _LETTERS) for e in _LETTERS)
        return None
    space, table = _tables(task, level)
    return tuple(len(table[(True, a)]) for a in space)


def logic_prompts(level: int) -> int:
    """A lower bound on the distinct logic prompts of one answer at ``level`` (exact at
    level 1: its 25 given letters): the chain's other letters in order, times the
    distractor rules as a set (rule orders not counted)."""
    chain, dist = math.perm(25, level), math.perm(25 - level, 2 * (level - 1))
    return chain * dist // math.factorial(level - 1)


def held_out_capacity(n_train: int, n_val: int, mix, scheme: str = "exclusion") -> list[dict]:
    """For every reasoning task-level the mix draws: the held-out items asked for and the
    draws they are expected to take. A partitioned level never redraws (training never
    holds its held-out prompts); a level held out by exclusion redraws every prompt the
    training split drew, a fraction 1 − exp(−t/N) of its N prompts per answer after t
    training items of that answer (uniform answers), so it needs 1/exp(−t/N) draws an item."""
    weights = np.asarray(mix, dtype=float) / float(sum(mix))
    rows = []
    for kind, task in enumerate(REASONING):
        if weights[kind] == 0:
            continue
        for level in LEVELS:
            cell = weights[kind] / len(LEVELS)
            asked = float(n_val * cell)
            n_answers = len(answer_space(task, level))
            part = held_out_prompts(task, level, scheme)
            if part is not None:
                rows.append(
                    {
                        "task": task,
                        "level": level,
                        "held_out_items": asked,
                        "held_out_prompts": sum(part),
                        "fewest_per_answer": min(part),
                        "expected_draws": asked,
                    }
                )
                continue
            per_answer = logic_prompts(level)
            seen = n_train * cell / n_answers / per_answer  # t/N
            rows.append(
                {
                    "task": task,
                    "level": level,
                    "held_out_items": asked,
                    "prompts": per_answer * n_answers,
                    "training_items": float(n_train * cell),
                    "expected_draws": float(asked * math.exp(min(seen, 700.0))),
                }
            )
    return rows


def check_held_out_capacity(n_train: int, n_val: int, mix, scheme: str = "exclusion") -> None:
    """Refuse, before drawing anything, a split whose held-out items cannot be drawn: a
    partitioned level without held-out prompts for some answer, or expected draws past
    :func:`generate`'s limit of 50·n_val + 1000."""
    rows = held_out_capacity(n_train, n_val, mix, scheme)
    limit = 50 * n_val + 1000
    for r in rows:
        if r.get("fewest_per_answer", 1) < 1:
            raise ConfigError(
                f"synthetic {r['task']} level {r['level']} has an answer with no "
                "held-out prompt; its held-out items cannot be drawn"
            )
    total = sum(r["expected_draws"] for r in rows)
    if total > limit:
        worst = max(rows, key=lambda r: r["expected_draws"])
        raise ConfigError(
            f"data.synthetic_items={n_train:,} with data.synthetic_val_items={n_val:,}: the "
            f"held-out items are expected to take {total:.3g} draws, past the limit of "
            f"{limit:,}; {worst['task']} level {worst['level']} alone asks for "
            f"{worst['held_out_items']:.0f} held-out items among its "
            f"{worst.get('prompts', 0):,} prompts, of which the "
            f"{worst.get('training_items', 0):,.0f} training items are expected to leave too "
            "few; use fewer training items"
            + (" or data.synthetic_held_out='partition'" if scheme == "exclusion" else "")
        )


# ----------------------------------------------------------------------------- corpus
def generate(
    n_items: int,
    *,
    seed: int,
    n_facts: int,
    mix,
    exclude: set[str] = frozenset(),
    stream: int = 0,
    scheme: str = "exclusion",
) -> list[Item]:
    """``n_items`` items, categories drawn with weights ``mix`` (arith, anchor, logic, fact),
    the level of a reasoning item uniformly from ``LEVELS``. ``stream`` 0 is training:
    answers drawn independently and uniformly. ``stream`` 1 is held out: the held-out part
    of arith and anchor, and *balanced* answers — each task-level deals its answers from a
    shuffled deck of its answer space, refilled when empty, so any first m·|space| items of
    a cell hold every answer m times and the best constant answer scores chance on the
    scored items too, not only in expectation. Reasoning items whose text is in
    ``exclude`` are redrawn with the same answer (used to keep held-out items out of
    training). ``scheme``: how logic level 1 is held out (:data:`HELD_OUT`)."""
    _check_scheme(scheme)
    rng = np.random.default_rng([seed, stream])
    facts = make_facts(n_facts, seed)
    weights = np.asarray(mix, dtype=float) / float(sum(mix))
    decks: dict[tuple[str, int], list[str]] = {}
    items = []
    tries = 0
    while len(items) < n_items:
        kind = int(rng.choice(4, p=weights))
        if kind == 3:
            items.append(fact_item(facts[int(rng.integers(len(facts)))]))
            continue
        task, level = REASONING[kind], LEVELS[int(rng.integers(len(LEVELS)))]
        answer = None
        if stream == 1:
            deck = decks.setdefault((task, level), [])
            if not deck:
                deck.extend(str(a) for a in rng.permutation(answer_space(task, level)))
            answer = deck.pop()
        while True:
            tries += 1
            if tries > 50 * n_items + 1000:
                raise ValueError("could not draw enough distinct held-out synthetic items")
            item = reasoning_item(
                task, level, rng, held_out=stream == 1, answer=answer, scheme=scheme
            )
            if item.text not in exclude:
                break
        items.append(item)
    return items


def splits(n_train: int, n_val: int, *, seed: int, n_facts: int, mix, scheme: str = "exclusion"):
    """Training and held-out items; no held-out reasoning item appears in training (the
    split is refused first when its held-out items cannot be drawn). ``scheme``: how
    logic level 1 is held out (:data:`HELD_OUT`, module docstring)."""
    check_held_out_capacity(n_train, n_val, mix, scheme)
    train = generate(n_train, seed=seed, n_facts=n_facts, mix=mix, stream=0, scheme=scheme)
    seen = {it.text for it in train if it.category in REASONING}
    val = generate(
        n_val, seed=seed, n_facts=n_facts, mix=mix, exclude=seen, stream=1, scheme=scheme
    )
    return train, val
