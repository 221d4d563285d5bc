"""Per-task, per-difficulty reasoning scores of a run: the one parser of its flat keys.

The evaluator (:func:`smallinit.llm.training.evaluate.answer_accuracy`) stores, for every
reasoning task T (``synthetic.REASONING``) and difficulty k (``synthetic.LEVELS``) it
scored, the flat summary keys

* ``acc_T_dK`` — greedy exact-match accuracy on the held-out items of that cell;
* ``chance_T_dK`` — the accuracy of a prompt-blind guess, 1/|answer space of T at k|
  (``synthetic.chance``; docs/science.md §8);
* ``majority_T_dK`` — the accuracy of the best *constant* answer on exactly the scored
  items (the largest share of one answer among them): ≥ chance on a finite sample, and
  the same for every training seed, because the held-out items depend on the data seed
  only;
* ``n_T_dK`` — how many items were scored;
* ``answer_loss_T_dK`` — mean next-token loss over those items' answer tokens
  (teacher-forced, the same pass as the accuracy);

and per task the pooled ``acc_T`` and ``chance_T`` (the n-weighted mean of the levels'
chances: the chance of the pooled items). :func:`cells` reads them back; every consumer of
per-cell scores (figures, ``smallinit claims``) goes through it.

Testing "above chance" over training seeds: the seeds share the held-out items, so a
prompt-blind model scores the same ``majority``-or-less on every seed, possibly a little
above ``chance``, with zero spread — a t-test against ``chance`` alone would call that
significant. Compare with :attr:`Cell.baseline` = max(chance, majority) instead.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_CELL = re.compile(r"^acc_([a-z]+)_d(\d+)$")


def cell_key(metric: str, task: str, level: int) -> str:
    """The summary key of ``metric`` (acc, chance, majority, n, answer_loss) for one cell."""
    return f"{metric}_{task}_d{level}"


@dataclass(frozen=True)
class Cell:
    """One reasoning task at one difficulty, as a run scored it."""

    task: str
    difficulty: int
    acc: float
    chance: float
    n: int
    answer_loss: float
    majority: float = float("nan")

    @property
    def name(self) -> str:
        return f"{self.task} d{self.difficulty}"

    @property
    def baseline(self) -> float:
        """What a prompt-blind model can score on these items: max(chance, majority)
        (chance alone where the run stored no majority)."""
        return self.chance if math.isnan(self.majority) else max(self.chance, self.majority)

    def summary_items(self) -> dict[str, float | int]:
        """The flat keys this cell is stored under (the inverse of :func:`cells`)."""
        return {
            cell_key("acc", self.task, self.difficulty): self.acc,
            cell_key("chance", self.task, self.difficulty): self.chance,
            cell_key("n", self.task, self.difficulty): self.n,
            cell_key("answer_loss", self.task, self.difficulty): self.answer_loss,
            cell_key("majority", self.task, self.difficulty): self.majority,
        }


def cells(summary: dict) -> list[Cell]:
    """Every scored (task, difficulty) cell of a run's summary, sorted by task, difficulty
    (an empty list for runs that scored none, e.g. text corpora or ``answer_items = 0``)."""
    nan = float("nan")
    out = []
    for key in summary:
        match = _CELL.match(key)
        if not match:
            continue
        task, level = match.group(1), int(match.group(2))
        out.append(
            Cell(
                task,
                level,
                float(summary[key]),
                float(summary[cell_key("chance", task, level)]),
                int(summary[cell_key("n", task, level)]),
                float(summary.get(cell_key("answer_loss", task, level), nan)),
                float(summary.get(cell_key("majority", task, level), nan)),
            )
        )
    return sorted(out, key=lambda c: (c.task, c.difficulty))
