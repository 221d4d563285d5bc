"""The ``synthetic`` corpus: reasoning and memorization items, generated deterministically.

Each item is one line ``PROMPT ANSWER\\n``: the answer starts with a space, so a byte-level
BPE never merges it with the prompt and the prompt's tokens are a prefix of the item's.
Categories (``CATEGORIES``; token tags in the corpus arrays):

* ``arith`` — multi-step arithmetic written out with intermediate steps:
  ``calc 7 + 12 - 5 : 7 + 12 = 19 ; 19 - 5 = 14`` (prompt up to ``:``). The answer follows
  from the context by applying each operation in turn.
* ``anchor`` — anchor-function composites in the style of docs/science.md §6 (Zhang et al., arXiv
  2405.05409): anchors 1–4 act as x ↦ x+5, x+1, x−2, x−8 and ``anchor 37 3 4 :`` asks for
  g₃(g₄(37)) = 27. One (x, a1, a2) in eight is reserved for held-out items.
* ``logic`` — short implication chains: ``rules k>m m>q q>z a>b . given k . z ?`` →
  ``yes`` when the query is reachable from the given letter through the rules, else ``no``.
* ``fact`` — memorization: a fixed table of random entity → attribute facts
  (``fact zorbik color : teal``); the answer cannot be inferred, only remembered.

Held-out reasoning items never repeat a training item (checked by exact text); held-out
fact items are the same facts by design (they probe recall of what was memorized).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CATEGORIES = ("text", "arith", "anchor", "logic", "fact")  # tag 0 is plain text
REASONING = ("arith", "anchor", "logic")
ANCHOR_MAPS = {1: 5, 2: 1, 3: -2, 4: -8}
_SYLLABLES = ("ka", "zo", "ri", "mu", "te", "lo", "ba", "ne", "shi", "vu", "po", "da", "gi",
              "fe", "xo", "qua", "ly", "tor", "ben", "sa")
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

    @property
    def text(self) -> str:
        return self.prompt + self.answer


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


def arith_item(rng: np.random.Generator) -> Item:
    n_ops = int(rng.integers(2, 4))
    value = int(rng.integers(0, 21))
    prompt, steps = [f"calc {value}"], []
    for _ in range(n_ops):
        operand = int(rng.integers(0, 21))
        op = "+" if rng.random() < 0.5 else "-"
        new = value + operand if op == "+" else value - operand
        prompt.append(f"{op} {operand}")
        steps.append(f"{value} {op} {operand} = {new}")
        value = new
    return Item(" ".join(prompt) + " :", " " + " ; ".join(steps) + "\n", "arith")


def anchor_held_out(x: int, a1: int, a2: int) -> bool:
    """One (x, a1, a2) in eight is reserved for held-out items (the space is small)."""
    return (x + 3 * a1 + 5 * a2) % 8 == 0


def anchor_item(rng: np.random.Generator, held_out: bool = False) -> Item:
    while True:
        x = int(rng.integers(20, 100))
        a1, a2 = (int(a) for a in rng.integers(1, 5, size=2))
        if anchor_held_out(x, a1, a2) == held_out:
            break
    y = x + ANCHOR_MAPS[a2] + ANCHOR_MAPS[a1]  # g_{a1}(g_{a2}(x))
    return Item(f"anchor {x} {a1} {a2} :", f" {y}\n", "anchor")


def logic_item(rng: np.random.Generator) -> Item:
    letters = list("abcdefghijklmnopqrstuvwxyz")
    chosen = [str(c) for c in rng.choice(letters, size=8, replace=False)]
    chain_len = int(rng.integers(2, 5))
    chain = chosen[:chain_len + 1]
    rules = [(chain[i], chain[i + 1]) for i in range(chain_len)]
    others = chosen[chain_len + 1:]
    rules.append((others[0], others[1]))  # a distractor rule
    order = rng.permutation(len(rules))
    text = " ".join(f"{rules[i][0]}>{rules[i][1]}" for i in order)
    reachable = rng.random() < 0.5
    query = chain[-1] if reachable else others[int(rng.integers(0, 2))]
    answer = "yes" if reachable else "no"
    return Item(f"rules {text} . given {chain[0]} . {query} ?", f" {answer}\n", "logic")


def fact_item(fact: tuple[str, str, str]) -> Item:
    name, kind, value = fact
    return Item(f"fact {name} {kind} :", f" {value}\n", "fact")


def generate(n_items: int, *, seed: int, n_facts: int, mix, exclude: set[str] = frozenset(),
             stream: int = 0) -> list[Item]:
    """``n_items`` items, categories drawn with weights ``mix`` (arith, anchor, logic, fact).

    Reasoning items whose text is in ``exclude`` are redrawn (used to keep held-out items
    out of training)."""
    rng = np.random.default_rng([seed, stream])
    facts = make_facts(n_facts, seed)
    weights = np.asarray(mix, dtype=float) / float(sum(mix))
    makers = (arith_item, anchor_item, logic_item)
    items = []
    tries = 0
    while len(items) < n_items:
        tries += 1
        if tries > 50 * n_items + 1000:
            raise ValueError("could not draw enough distinct held-out synthetic items")
        kind = int(rng.choice(4, p=weights))
        if kind == 3:
            items.append(fact_item(facts[int(rng.integers(len(facts)))]))
            continue
        item = anchor_item(rng, held_out=stream == 1) if kind == 1 else makers[kind](rng)
        if item.text in exclude:
            continue
        items.append(item)
    return items


def splits(n_train: int, n_val: int, *, seed: int, n_facts: int, mix):
    """Training and held-out items; no held-out reasoning item appears in training."""
    train = generate(n_train, seed=seed, n_facts=n_facts, mix=mix, stream=0)
    seen = {it.text for it in train if it.category in REASONING}
    val = generate(n_val, seed=seed, n_facts=n_facts, mix=mix, exclude=seen, stream=1)
    return train, val
