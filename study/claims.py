"""The study's twelve claims, judged from stored runs by the rules of docs/science.md §13.

Each claim has one per-seed quantity x_s computed from one experiment's runs
(:data:`CLAIMS`: id, claim, experiment, which of its jobs it needs, how x_s is computed) and
one verdict rule applied to those values (:func:`directional`, :func:`share_rule`,
:func:`chance_rule`, :func:`critical_rule`, :func:`condensation_rule`,
:func:`gain_condition`). The numbers come from :mod:`smallinit.core.stats` (Student-t over
seeds, 95% two-sided interval, one-sided p in the claimed direction).

Two ways in, one computation:

* :func:`judge` — a claim on the finished runs of an experiment's :class:`Results` (the
  figures call it on what ``ctx.results`` returned, so a figure's title and
  ``smallinit claims`` print the same numbers);
* :func:`evaluate` / :func:`table` — a claim at a profile looked up in the run store
  read-only (:func:`smallinit.study.experiments.existing`): it never trains; a needed run that
  is missing or unfinished makes the record ``not run`` and is listed in ``missing``.

Readings chosen where §13 leaves room (each also said at its code):

* the anchor claims take the scan cells at the scan's first depth and first weight decay;
  when the plan has no such cell (full: the λ panel sits at another depth) the depth
  panel's first depth at the base weight decay;
* ``anchor-small-init-inferential`` with several γ ≥ 0.8: ``holds`` when the share rule
  holds at every such γ, ``contradicted`` when it is contradicted at any, ``partial``
  when each is ``holds`` or ``partial``, else ``not at this scale``;
* ``critical-init``'s loss is the held-out loss (fig 7's rule, which the claim names);
* ``condense-then-expand``: a ``holds`` of the directional rule whose γ = 1 seeds do not
  all reach c ≥ 0.1 falls to ``partial`` if every x_s > 0, else ``not at this scale``;
* runs whose summaries lack per-task reasoning cells (made before the per-task
  evaluation) cannot feed the accuracy claims: those records are ``not run`` and say why;
* a verdict that rests on one seed is ``not at this scale`` under every rule (the
  directional rule's "one seed only"): one seed cannot decide a claim
  (:func:`one_seed_undecided`).

Each claim names the profiles where its design decides it (:attr:`Claim.decided_at`: fair
or fair-reasoning on the CPU, or the GPU profile full); at the others, quick above all (a
smoke test that cuts seeds and grid points to fit its time budget), a record says so
beside its verdict.

Each judgement also carries its per-seed series and the :class:`~smallinit.study.verdicts.Design`
that §13.2 decides them by (docs/science.md §13.2, 6 and 7); :func:`table` adjusts a
profile's claims together (Holm) and gives each record its §13.2 decision, which gives the
verdict under ``rules="13.2"`` and the record's added fields under either rules.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from smallinit.core import stats
from smallinit.core.jobs import Results, RunSpec
from smallinit.core.progress import bars_shown, progress
from smallinit.core.runs import Run
from smallinit.core.stats import Estimate
from smallinit.core.store import RunStore
from smallinit.llm.analysis import reasoning
from smallinit.llm.analysis.critical import best_gamma, reasoning_answer_loss
from smallinit.llm.analysis.tokens import bucket_families, gain_shares
from smallinit.llm.data import corpus as corpus_mod
from smallinit.llm.training.probes import trajectory
from smallinit.study import experiments
from smallinit.study.experiments.llm_plan import COMPARED, has_probe
from smallinit.study.rules import DEFAULT_RULES, RULES
from smallinit.study.verdicts import VERDICTS as DECISIVE_VERDICTS
from smallinit.study.verdicts import Condition, Decision, Design, decide_family

log = logging.getLogger(__name__)

VERDICTS = ("holds", "partial", "not at this scale", "contradicted", "not run")
ALPHA = 0.05  # one-sided level of every rule but the chance rule
CHANCE_ALPHA = (0.01, 0.05)  # chance rule: holds, partial (Bonferroni-corrected)
MAJORITY = 0.8  # share and critical rules: ⌈0.8 n⌉ seeds
SHARE_HOLDS = 0.8  # share rule: mean share needed
CONDENSED = 0.1  # condensation rule: c_s(γ = 1) needed in every seed
JSON_KEYS = (
    "id",
    "claim",
    "profile",
    "effect",
    "ci_low",
    "ci_high",
    "p_value",
    "n_seeds",
    "verdict",
    "detail",
    "arms",
    "runs",
    "decided_at",  # §13's record
    "rules",
    "values",
    "conditions",
    "effect_of_interest",
    "test",
    "p_raw",
    "p_holm",
    "p_opposite",
    "p_opposite_holm",
    "p_equivalence",
    "p_equivalence_holm",
    "p_permutation",
    "bound",
    "bound_holm",
)  # §13.2, 8
VERDICTS_OF = {"13.1": VERDICTS, "13.2": DECISIVE_VERDICTS}  # the verdicts each rules give
NAN = float("nan")
NO_ESTIMATE = Estimate(NAN, NAN, NAN, NAN, 0)


@dataclasses.dataclass
class Judgement:
    """A claim's statistics and verdict; ``values``: the per-seed x_s it rests on;
    ``series`` and ``design``: the per-seed series §13.2 decides the claim on and how
    (None: nothing to decide, a ``not run``)."""

    estimate: Estimate
    verdict: str
    values: dict[int, float] = dataclasses.field(default_factory=dict)
    detail: str = ""
    series: dict[str, dict[int, float]] = dataclasses.field(default_factory=dict)
    design: Design | None = None

    def label(self, name: str = "Δ", digits: int = 3) -> str:
        """The estimate's ``Δ = … [lo, hi], p = …, n = …`` and the verdict (figure titles)."""
        return f"{self.estimate.label(name, digits)}: {self.verdict}"


@dataclasses.dataclass
class Record:
    """One row of the claims table (``as_json``: exactly the keys of :data:`JSON_KEYS`):
    the verdict with its statistics, ``detail`` (what else the rule reports), ``arms``
    (statistics reported beside the verdict, §13.1), ``runs`` (kind/key of every run the
    record rests on, so that anyone can recompute one and compare) and ``decided_at`` (the
    profiles where the claim's design decides it, :attr:`Claim.decided_at`). ``decision``:
    the §13.2 decision within the profile's family (:func:`table`); ``rules``: which rules
    give ``verdict`` and ``p_value``."""

    id: str
    claim: str
    profile: str
    judgement: Judgement
    missing: list[str] = dataclasses.field(default_factory=list)
    arms: dict[str, Judgement] = dataclasses.field(default_factory=dict)
    runs: list[str] = dataclasses.field(default_factory=list)
    decided_at: tuple[str, ...] = ()
    decision: Decision | None = None
    rules: str = RULES[0]  # a claim judged alone has §13's verdict until :func:`decide`

    @property
    def verdict(self) -> str:
        if self.rules == "13.2" and self.decision is not None:
            return self.decision.verdict
        if self.rules == "13.2" and self.judgement.verdict != "not run":
            return "undecided"  # judged, but nothing to test (e.g. a grid of 2 γ)
        return self.judgement.verdict

    @property
    def p_value(self) -> float:
        if self.rules == "13.2" and self.decision is not None:
            return self.decision.p_raw
        return self.judgement.estimate.p_value

    @property
    def bound_side(self) -> str:
        """``≥`` where the claim's main condition says greater (its one-sided bound is a
        lower bound), else ``≤`` (§13.2, 4); empty for a claim without a design (not run)."""
        if self.judgement.design is None:
            return ""
        return "≥" if self.judgement.design.conditions[0].alternative == "greater" else "≤"

    @property
    def detail(self) -> str:
        extra = self.decision.detail if self.rules == "13.2" and self.decision else ""
        return "; ".join(t for t in (self.judgement.detail, extra) if t)

    def as_json(self) -> dict[str, Any]:
        e, j, d = self.judgement.estimate, self.judgement, self.decision
        numbers = (
            d.as_json()
            if d is not None
            else {k: None for k in JSON_KEYS[JSON_KEYS.index("test") :]}
        )
        return {
            "id": self.id,
            "claim": self.claim,
            "profile": self.profile,
            "effect": e.effect,
            "ci_low": e.ci_low,
            "ci_high": e.ci_high,
            "p_value": self.p_value,
            "n_seeds": e.n,
            "verdict": self.verdict,
            "detail": self.detail,
            "arms": {name: _estimate_json(a) for name, a in self.arms.items()},
            "runs": list(self.runs),
            "decided_at": list(self.decided_at),
            "rules": self.rules,
            "values": {
                name: {str(s): v for s, v in sorted(x.items())} for name, x in j.series.items()
            },
            "conditions": j.design.as_json() if j.design is not None else None,
            "effect_of_interest": j.design.margin if j.design is not None else None,
            **numbers,
        }


def _estimate_json(j: Judgement) -> dict[str, Any]:
    e = j.estimate
    return {
        "effect": e.effect,
        "ci_low": e.ci_low,
        "ci_high": e.ci_high,
        "p_value": e.p_value,
        "n_seeds": e.n,
        "verdict": j.verdict,
    }


def not_run(detail: str) -> Judgement:
    return Judgement(NO_ESTIMATE, "not run", {}, detail)


def one_seed_undecided(j: Judgement) -> Judgement:
    """``j`` with a verdict that rests on one seed made ``not at this scale`` (module
    docstring); any other judgement as it is."""
    if j.estimate.n == 1 and j.verdict in ("holds", "partial", "contradicted"):
        reason = f"one seed cannot decide it (the rule alone: {j.verdict})"
        return Judgement(
            j.estimate,
            "not at this scale",
            j.values,
            f"{j.detail}; {reason}" if j.detail else reason,
            j.series,
            j.design,
        )
    return j


def need(n: int) -> int:
    """⌈0.8 n⌉ (seeds), robust to the float product (0.8 · 5 = 4)."""
    return math.ceil(round(MAJORITY * n, 9))


# ----------------------------------------------------------------------------- rules
def directional(x: dict[int, float]) -> Judgement:
    """docs/science.md §13 directional rule on per-seed values that the claim says are
    positive: ``holds`` p(mean > 0) < 0.05 with ≥ 2 seeds, ``contradicted`` p(mean < 0)
    < 0.05, ``partial`` every seed > 0 (≥ 2 seeds), else ``not at this scale``; ``not run``
    where a seed's value is not finite (§13: nothing was measured to judge)."""
    if not x:  # only on a partial set of runs (a figure's); the table checks runs first
        return not_run("no seed has every run the rule needs")
    unmeasured = [s for s in sorted(x) if not math.isfinite(x[s])]
    if unmeasured:
        return Judgement(
            NO_ESTIMATE,
            "not run",
            dict(x),
            f"no finite value at seed(s) {', '.join(map(str, unmeasured))}",
        )
    vals = [x[s] for s in sorted(x)]
    up = stats.one_sample(vals, 0.0, alternative="greater")
    if len(vals) < 2:
        verdict = "not at this scale"
    elif up.p_value < ALPHA:
        verdict = "holds"
    elif stats.one_sample(vals, 0.0, alternative="less").p_value < ALPHA:
        verdict = "contradicted"
    elif all(v > 0 for v in vals):
        verdict = "partial"
    else:
        verdict = "not at this scale"
    return Judgement(up, verdict, dict(x), series={"x": dict(x)}, design=Design((Condition("x"),)))


def share_rule(claimed: dict[int, float], opposite: dict[int, float]) -> Judgement:
    """§13 share rule: ``claimed`` the claimed answer type's share per seed, ``opposite`` the
    other type's share of the same seeds. Effect = mean share with its CI (clipped to
    [0, 1]); p: one-sample, share > 0.5."""
    seeds = sorted(claimed)
    c = [claimed[s] for s in seeds]
    o = [opposite[s] for s in seeds]
    n = len(c)
    t = stats.one_sample(c, 0.5, alternative="greater")
    # a share lies in [0, 1]: its t interval is clipped there (NaN, below 2 seeds, stays)
    lo, hi = np.clip([t.ci_low + 0.5, t.ci_high + 0.5], 0.0, 1.0)
    est = Estimate(t.effect + 0.5, float(lo), float(hi), t.p_value, n)
    majorities = sum(v > 0.5 for v in c)
    mean_c, mean_o = float(np.mean(c)), float(np.mean(o))
    if majorities >= need(n) and mean_c >= SHARE_HOLDS:
        verdict = "holds"
    elif stats.paired(o, c, alternative="greater").p_value < ALPHA:
        verdict = "contradicted"
    elif mean_c > mean_o:
        verdict = "partial"
    else:
        verdict = "not at this scale"
    return Judgement(
        est,
        verdict,
        dict(claimed),
        f"majority in {majorities} of {n} seeds (need {need(n)}); mean share "
        f"{mean_c:.3f} against {mean_o:.3f}",
        {"share": dict(claimed)},
        Design((Condition("share", 0.5),), share=True),
    )


def chance_rule(by_gamma: dict[float, dict[int, Sequence[Any]]]) -> Judgement:
    """§13 chance rule. ``by_gamma[γ][seed]``: that run's reasoning cells (objects with
    ``task``, ``difficulty``, ``acc`` and ``baseline`` = max(chance, majority), §13's
    amendment). The best γ has the highest seed-mean of the cell-averaged acc − baseline;
    there every cell gets a one-sample test of acc above its baseline over seeds (on
    acc_s − baseline_s) and the smallest p is multiplied by the number of cells K
    (Bonferroni). The record's p is the corrected one; effect, CI and n are the best
    cell's (accuracy above the baseline)."""

    def mean_excess(cells) -> float:
        return float(np.mean([c.acc - c.baseline for c in cells]))

    scores = {
        g: float(np.mean([mean_excess(cells) for cells in seeds.values()]))
        for g, seeds in by_gamma.items()
        if seeds and all(seeds.values())
    }
    if not scores:
        return not_run("no run with reasoning cells")
    best = max(sorted(scores), key=lambda g: scores[g])  # ties: the smallest γ
    runs = by_gamma[best]
    keyed = {s: {(c.task, c.difficulty): c for c in cells} for s, cells in runs.items()}
    common = sorted(set.intersection(*(set(k) for k in keyed.values())), key=str)
    tests = {}
    for cell in common:
        diffs = [keyed[s][cell].acc - keyed[s][cell].baseline for s in sorted(keyed)]
        tests[cell] = stats.one_sample(diffs, 0.0, alternative="greater")
    finite = {k: t for k, t in tests.items() if math.isfinite(t.p_value)}
    if not finite:
        any_cell = next(iter(tests.values()), NO_ESTIMATE)
        return Judgement(
            any_cell, "not at this scale", {}, f"best γ {best:g}: fewer than 2 seeds, no test"
        )
    k = len(tests)
    top = min(finite, key=lambda c: finite[c].p_value)
    t = finite[top]
    corrected = min(1.0, k * t.p_value)
    verdict = (
        "holds"
        if corrected < CHANCE_ALPHA[0]
        else "partial"
        if corrected < CHANCE_ALPHA[1]
        else "not at this scale"
    )
    values = {s: keyed[s][top].acc - keyed[s][top].baseline for s in sorted(keyed)}
    series = _excess_series(by_gamma)
    return Judgement(
        Estimate(t.effect, t.ci_low, t.ci_high, corrected, t.n),
        verdict,
        values,
        f"best γ {best:g}; cell {top[0]} difficulty {top[1]}, "
        f"uncorrected p {t.p_value:.2g} × K = {k}",
        series,
        Design(tuple(Condition(name) for name in series), combine="any", opposite=False),
    )


def _excess_series(by_gamma: dict[float, dict[int, Sequence[Any]]]) -> dict[str, dict[int, float]]:
    """§13.2, 6: acc − baseline per seed for every (γ, cell) of the grid that every seed of
    that γ scored, named ``γ G task dK``."""
    out = {}
    for g in sorted(by_gamma):
        runs = by_gamma[g]
        if not runs or not all(runs.values()):
            continue
        keyed = {s: {(c.task, c.difficulty): c for c in cells} for s, cells in runs.items()}
        for cell in sorted(set.intersection(*(set(k) for k in keyed.values())), key=str):
            out[f"γ {g:g} {cell[0]} d{cell[1]}"] = {
                s: keyed[s][cell].acc - keyed[s][cell].baseline for s in sorted(keyed)
            }
    return out


def critical_rule(losses: dict[int, dict[float, float]]) -> Judgement:
    """§13 critical rule. ``losses[seed][γ]``: the loss of each grid γ. γ*_s: the parabola
    vertex of :func:`~smallinit.llm.analysis.critical.best_gamma`; effect = mean γ* (CI
    over seeds); p = the larger of the one-sided paired p-values that the loss at the
    grid's smallest and largest γ exceed the loss at the grid γ nearest mean γ*."""
    seeds = sorted(losses)
    grid = sorted(set.intersection(*(set(losses[s]) for s in seeds))) if seeds else []
    if len(grid) < 3:
        return Judgement(NO_ESTIMATE, "not at this scale", {}, f"grid {grid} too small")
    star = {s: best_gamma(grid, [losses[s][g] for g in grid]) for s in seeds}
    mean_star = float(np.mean(list(star.values())))
    near = min(grid, key=lambda g: (abs(g - mean_star), g))
    p_edges = [
        stats.paired(
            [losses[s][edge] for s in seeds],
            [losses[s][near] for s in seeds],
            alternative="greater",
        ).p_value
        for edge in (grid[0], grid[-1])
    ]
    p = max(p_edges) if all(math.isfinite(q) for q in p_edges) else NAN
    inside = sum(grid[0] < star[s] < grid[-1] for s in seeds)
    m = stats.mean_ci(list(star.values()))
    if inside >= need(len(seeds)) and all(q < ALPHA for q in p_edges):
        verdict = "holds"
    elif inside >= need(len(seeds)):
        verdict = "partial"
    else:
        verdict = "not at this scale"
    edges = {
        name: {s: losses[s][edge] - losses[s][near] for s in seeds}
        for name, edge in (("edge low", grid[0]), ("edge high", grid[-1]))
    }
    return Judgement(
        Estimate(m.effect, m.ci_low, m.ci_high, p, m.n),
        verdict,
        star,
        f"γ* inside ({grid[0]:g}, {grid[-1]:g}) in {inside} of {len(seeds)} "
        f"seeds; edges against γ = {near:g}: p {p_edges[0]:.2g}, {p_edges[1]:.2g}",
        {**edges, "γ*": star},
        Design(
            (Condition("edge low"), Condition("edge high")),
            opposite=False,
            note=f"reference γ {near:g} chosen on the same seeds (§13.2, 6)",
        ),
    )


def condensation(rank_by_matrix: dict[str, Sequence[float]]) -> float:
    """c = min(drop, rebound) of r(t), the mean over matrices of effective rank at probe t
    over its value at step 0 (§13): drop = 1 − min r, rebound = r(T) − min r; 0 when the
    minimum is at the first or the last probe."""
    r = np.mean([np.asarray(v, float) / float(v[0]) for v in rank_by_matrix.values()], axis=0)
    i = int(np.argmin(r))
    if i == 0 or i == len(r) - 1:
        return 0.0
    return float(min(1.0 - r[i], r[-1] - r[i]))


def condensation_rule(c_small: dict[int, float], c_large: dict[int, float]) -> Judgement:
    """§13 condensation rule: x_s = c_s(γ = 1) − c_s(γ = 0.5), directional, and ``holds``
    also needs c_s(γ = 1) ≥ 0.1 in every seed (otherwise ``partial`` when every x_s > 0,
    else ``not at this scale`` — the reading of a failed extra condition)."""
    x = {s: c_small[s] - c_large[s] for s in sorted(c_small)}
    j = directional(x)
    low = [s for s in c_small if c_small[s] < CONDENSED]
    if j.verdict == "holds" and low:
        j.verdict = "partial" if all(v > 0 for v in x.values()) else "not at this scale"
    j.detail = f"c(γ = 1) per seed {[round(c_small[s], 3) for s in sorted(c_small)]}" + (
        f", below {CONDENSED} in seeds {sorted(low)}" if low else ""
    )
    if j.design is not None:  # §13.2, 6: the threshold tested with its margin
        j.series = {"x": x, "c(γ 1)": dict(c_small)}
        j.design = Design((Condition("x"), Condition("c(γ 1)", CONDENSED)))
    return j


def gain_condition(total: dict[int, float], excess: dict[int, float]) -> Judgement:
    """§13 gain condition then the directional rule: seeds whose total gain Σ g_i ≤ 0 are
    dropped (S_B is undefined there); fewer than half the seeds left: ``not at this
    scale``."""
    kept = {s: excess[s] for s in sorted(excess) if total[s] > 0}
    dropped = sorted(set(excess) - set(kept))
    if 2 * len(kept) < len(excess):
        est = (
            stats.one_sample(list(kept.values()), 0.0, alternative="greater")
            if kept
            else NO_ESTIMATE
        )
        return Judgement(
            est,
            "not at this scale",
            kept,
            f"total gain ≤ 0 in seeds {dropped}: {len(kept)} of {len(excess)} left",
        )
    j = directional(kept)
    j.detail = f"seeds dropped (total gain ≤ 0): {dropped}" if dropped else ""
    return j


# ----------------------------------------------------------------------------- quantities
def reasoning_cells(summary: dict[str, Any]) -> list[Any] | None:
    """The run's reasoning task × difficulty cells (``smallinit.llm.analysis.reasoning``),
    or None when the summary has none (a run made before the per-task evaluation)."""
    cells = list(reasoning.cells(summary))
    return cells or None


def macro_accuracy(cells: Sequence[Any]) -> float:
    """Accuracy averaged over the reasoning task × difficulty cells (each cell weighs one)."""
    return float(np.mean([c.acc for c in cells]))


def _gap(by: dict, what: Callable[[Run], float], seeds) -> dict[int, float]:
    """g_s = what(γ = 0.5) − what(γ = 1) per seed; ``by[(seed, γ)]`` -> run."""
    return {s: what(by[(s, 0.5)]) - what(by[(s, 1.0)]) for s in seeds}


def _val(run: Run) -> float:
    return float(run.summary["val_loss"])


def _answer_loss(run: Run) -> float:
    return reasoning_answer_loss(run.arrays())[0]


def _pairs_by(pairs, *keys: str) -> dict[tuple, Run]:
    """Finished runs of (job, run) ``pairs`` by the tags ``keys``."""
    return {tuple(job.tags[k] for k in keys): run for job, run in pairs if run.done}


def _both_gammas(by: dict[tuple, Run]) -> list[int]:
    return sorted({k[0] for k in by if (k[0], 0.5) in by and (k[0], 1.0) in by})


def gains(pairs) -> dict[int, float]:
    """Held-out loss gain g_s = L(γ = 0.5) − L(γ = 1) per seed of (job, run) ``pairs``."""
    by = _pairs_by(pairs, "seed", "gamma")
    return _gap(by, _val, _both_gammas(by))


def setting_gains(pairs) -> dict[tuple[str, bool], dict[int, float]]:
    """Held-out loss gain per (ε setting, gated) and seed (fig 8's runs, fig 12's at one
    size)."""
    pairs = list(pairs)
    settings = {(j.tags["eps_setting"], j.tags["gated"]) for j, _ in pairs}
    return {
        key: gains([(j, r) for j, r in pairs if (j.tags["eps_setting"], j.tags["gated"]) == key])
        for key in sorted(settings)
    }


def _difference(a: dict[int, float], b: dict[int, float]) -> dict[int, float]:
    return {s: a[s] - b[s] for s in sorted(set(a) & set(b))}


def scaling_slopes(results: Results) -> dict[int, float]:
    """Per seed: least-squares slope of g (held-out loss) against ln d_model."""
    by = _pairs_by(results, "seed", "size", "gamma")
    out = {}
    for s in sorted({k[0] for k in by}):
        sizes = sorted(
            d for d in {k[1] for k in by if k[0] == s} if (s, d, 0.5) in by and (s, d, 1.0) in by
        )
        if len(sizes) >= 3:
            g = [_val(by[(s, d, 0.5)]) - _val(by[(s, d, 1.0)]) for d in sizes]
            out[s] = float(np.polyfit(np.log(sizes), g, 1)[0])
    return out


def token_excess(
    results: Results, bucket: int = 3
) -> tuple[dict[int, float], dict[int, float], dict[int, float]]:
    """Per seed of matched γ = 0.5 / 1 runs: the total gain Σ g_i, S_B − n_B/n for B
    the ``bucket``-th quartile of bigram loss (3: the top one), the shares of
    :func:`smallinit.llm.analysis.tokens.gain_shares` (fig 11's computation), and the mean
    gain per token on B minus the mean gain per token over all tokens (nats; §13.2, 6:
    defined for every seed)."""
    by = _pairs_by(results, "seed", "gamma")
    total, excess, concentration = {}, {}, {}
    for s in _both_gammas(by):
        cfg = by[(s, 0.5)].config
        a, b = by[(s, 0.5)].arrays(), by[(s, 1.0)].arrays()
        if not np.array_equal(a["targets"], b["targets"]):
            raise ValueError(f"seed {s}: the two runs scored different held-out tokens")
        g = a["losses"].astype(float) - b["losses"].astype(float)
        train = np.asarray(corpus_mod.load(cfg.data, cfg.model.vocab_size).train)
        # quartile edges from this seed's held-out tokens (fig 11 pools the seeds; the
        # evaluator scores the same held-out windows for every seed, so the edges agree)
        idx, labels = bucket_families(a, train, cfg.model.vocab_size)["bigram"]
        share = gain_shares(g, idx, labels)[bucket]
        total[s] = float(g.sum())
        excess[s] = share.share - share.token_share
        concentration[s] = share.mean_gain - float(g.mean())
    return total, excess, concentration


def condensations(results: Results) -> dict[tuple[int, float], float]:
    """c per (seed, γ) of traced runs: :func:`condensation` of the effective ranks."""
    out = {}
    for job, run in results:
        if run.done:
            tr = trajectory(run)
            ranks = {n: m["effective_rank"] for n, m in tr.get("weights", {}).items()}
            if ranks and len(tr["steps"]) >= 3:
                out[(job.tags["seed"], job.tags["gamma"])] = condensation(ranks)
    return out


# ----------------------------------------------------------------------------- the claims
def _sizes(jobs: list[RunSpec]) -> list[int]:
    return sorted({j.tags["size"] for j in jobs})


def _largest_compared(jobs: list[RunSpec], profile: str) -> list[RunSpec]:
    """The plain γ = 0.5 and γ = 1 runs at the γ sweep's largest size (each at its own
    learning rate where the profile chooses them: best against best, §13.1)."""
    top = max(_sizes(jobs)) if jobs else None
    return [
        j
        for j in jobs
        if j.tags["size"] == top
        and j.tags.get("gamma") in COMPARED
        and j.tags.get("arm", "plain") == "plain"
    ]


def _largest_arm(arm: str) -> Callable[[list[RunSpec], str], list[RunSpec]]:
    """The γ = 0.5 plain runs and the γ = 1 runs of ``arm`` at the largest size."""

    def choose(jobs: list[RunSpec], profile: str) -> list[RunSpec]:
        top = max(_sizes(jobs)) if jobs else None
        return [
            j
            for j in jobs
            if j.tags["size"] == top
            and (
                (j.tags.get("gamma") == 0.5 and j.tags.get("arm", "plain") == "plain")
                or (j.tags.get("gamma") == 1.0 and j.tags.get("arm") == arm)
            )
        ]

    return choose


EARLY_STEP = 250  # §13.1, 5: the gain early (the first held-out evaluation of a fair run)


def _val_at(run: Run, step: int) -> float | None:
    """The held-out loss recorded at ``step`` of a run (None: not recorded there)."""
    found = [r["val_loss"] for r in run.metrics() if r.get("step") == step and "val_loss" in r]
    return float(found[-1]) if found else None


def pays_then_wins(results: Results) -> Judgement:
    """§13.1 rule of ``small-init-pays-then-wins`` on the largest size's γ 0.5 / 1 runs:
    early_s = g_s at step 250, end_s = g_s at the end."""
    by = _pairs_by(results, "seed", "gamma")
    seeds = _both_gammas(by)
    early_by = {k: _val_at(r, EARLY_STEP) for k, r in by.items()}
    if any(v is None for v in early_by.values()):
        return not_run(
            f"no held-out loss recorded at step {EARLY_STEP}: the gain along "
            "training is recorded by the fair profile (eval.at_steps)"
        )
    early = {s: early_by[(s, 0.5)] - early_by[(s, 1.0)] for s in seeds}
    end = _gap(by, _val, seeds)
    if len(seeds) < 2:
        return Judgement(
            stats.one_sample([end[s] for s in seeds] or [NAN], 0.0),
            "not at this scale",
            end,
            series={"end": end, "early": early},
            design=Design((Condition("end"), Condition("early", alternative="less"))),
        )
    e_vals, l_vals = [early[s] for s in seeds], [end[s] for s in seeds]
    early_neg = stats.one_sample(e_vals, 0.0, alternative="less").p_value < ALPHA
    early_pos = stats.one_sample(e_vals, 0.0, alternative="greater").p_value < ALPHA
    end_est = stats.one_sample(l_vals, 0.0, alternative="greater")
    end_pos = end_est.p_value < ALPHA
    end_neg = stats.one_sample(l_vals, 0.0, alternative="less").p_value < ALPHA
    if early_neg and end_pos:
        verdict = "holds"
    elif end_neg:
        verdict = "contradicted"
    elif (end_pos and not early_pos) or (early_neg and not end_neg):
        verdict = "partial"
    else:
        verdict = "not at this scale"
    early_est = stats.one_sample(e_vals, 0.0, alternative="less")
    return Judgement(
        end_est,
        verdict,
        end,
        f"early (step {EARLY_STEP}) {early_est.label('g', 3)}, one-sided p for mean < 0",
        {"end": end, "early": early},
        Design((Condition("end"), Condition("early", alternative="less"))),
    )


def anchor_line(specs: list[RunSpec]) -> tuple[int, float]:
    """(depth, weight decay) of the scan cells the anchor claims read: the grid's first
    depth and first weight decay, or, when the grid has no such cell (full: the λ panel
    sits at another depth), the first depth at the base weight decay (the depth panel's).
    Read off the specs, which the scan lists grid order first
    (:func:`smallinit.study.experiments.anchor_scan.scan_cells`)."""
    depth = [s for s in specs if s.tags.get("panel") == "depth"]
    wd = [s for s in specs if s.tags.get("panel") == "wd"]
    if not depth:
        return (wd[0].tags["layers"], wd[0].tags["weight_decay"]) if wd else (0, 0.0)
    first = (
        depth[0].tags["layers"],
        (wd[0].tags["weight_decay"] if wd else depth[0].tags["weight_decay"]),
    )
    if any((s.tags["layers"], s.tags["weight_decay"]) == first for s in depth + wd):
        return first
    return depth[0].tags["layers"], depth[0].tags["weight_decay"]


def _anchor_cells(specs: list[RunSpec], profile: str) -> list[RunSpec]:
    """The scan cells on :func:`anchor_line`, one per (seed, γ)."""
    layers, weight_decay = anchor_line(specs)
    unique: dict[tuple, RunSpec] = {}
    for s in specs:
        if (
            s.tags.get("panel") in ("depth", "wd")
            and s.tags["layers"] == layers
            and s.tags["weight_decay"] == weight_decay
        ):
            unique.setdefault((s.tags["seed"], s.tags["gamma"]), s)
    return list(unique.values())


def _shares(results: Results, gamma: float) -> tuple[dict[int, float], dict[int, float]]:
    sym, inf = {}, {}
    for job, run in results:
        if run.done and job.tags["gamma"] == gamma:
            sym[job.tags["seed"]] = float(run.summary["share_symmetric"])
            inf[job.tags["seed"]] = float(run.summary["share_inferential"])
    return sym, inf


def _judge_large_symmetric(results: Results) -> Judgement:
    sym, inf = _shares(results, 0.5)
    return share_rule(sym, inf) if sym else not_run("no anchor run at γ = 0.5")


def _judge_small_inferential(results: Results) -> Judgement:
    gammas = sorted({j.tags["gamma"] for j, r in results if r.done and j.tags["gamma"] >= 0.8})
    if not gammas:
        return not_run("no anchor scan γ ≥ 0.8")
    per = {}
    for g in gammas:
        sym, inf = _shares(results, g)
        per[g] = share_rule(inf, sym)
    verdicts = [j.verdict for j in per.values()]
    if all(v == "holds" for v in verdicts):
        verdict = "holds"
    elif "contradicted" in verdicts:
        verdict = "contradicted"
    elif all(v in ("holds", "partial") for v in verdicts):
        verdict = "partial"
    else:
        verdict = "not at this scale"
    first = per[gammas[0]]
    series = {f"share γ {g:g}": j.values for g, j in per.items()}
    return Judgement(
        first.estimate,
        verdict,
        first.values,
        "; ".join(f"γ {g:g}: {j.verdict} ({j.detail})" for g, j in per.items()),
        series,
        Design(tuple(Condition(n, 0.5) for n in series), share=True),
    )


def _judge_reasoning_gain(results: Results) -> Judgement:
    by = _pairs_by(results, "seed", "gamma")
    cells = {k: reasoning_cells(r.summary) for k, r in by.items()}
    if any(c is None for c in cells.values()):
        return not_run("the runs store no per-task reasoning accuracy (acc_T_dK)")
    return directional(
        {
            s: macro_accuracy(cells[(s, 1.0)]) - macro_accuracy(cells[(s, 0.5)])
            for s in _both_gammas(by)
        }
    )


def _judge_above_chance(results: Results) -> Judgement:
    by: dict[float, dict[int, Any]] = {}
    for job, run in results:
        if run.done:
            cells = reasoning_cells(run.summary)
            if cells is None:
                return not_run("the runs store no per-task reasoning accuracy (acc_T_dK)")
            by.setdefault(job.tags["gamma"], {})[job.tags["seed"]] = cells
    return chance_rule(by)


def _judge_critical(results: Results) -> Judgement:
    losses: dict[int, dict[float, float]] = {}
    for job, run in results:
        if run.done:
            losses.setdefault(job.tags["seed"], {})[job.tags["gamma"]] = _val(run)
    return critical_rule(losses)


def _judge_condense(results: Results) -> Judgement:
    c = condensations(results)
    seeds = sorted({s for s, _ in c if (s, 0.5) in c and (s, 1.0) in c})
    return condensation_rule({s: c[(s, 1.0)] for s in seeds}, {s: c[(s, 0.5)] for s in seeds})


def _judge_tokens(results: Results) -> Judgement:
    total, excess, concentration = token_excess(results)
    j = gain_condition(total, excess)
    if concentration:  # §13.2, 6: every seed, no ratio
        j.series, j.design = {"x": concentration}, Design((Condition("x"),))
    return j


def _judge_gain_on_reasoning(results: Results) -> Judgement:
    by = _pairs_by(results, "seed", "gamma")
    seeds = _both_gammas(by)
    answers = _gap(by, _answer_loss, seeds)
    if not all(math.isfinite(v) for v in answers.values()):
        return not_run("the runs score no reasoning answers (eval.answer_items = 0)")
    return directional(_difference(answers, _gap(by, _val, seeds)))


def _judge_eps(results: Results) -> Judgement:
    g = setting_gains(results)
    return directional(_difference(g.get(("relaxed", False), {}), g.get(("standard", False), {})))


def _judge_sinks(results: Results) -> Judgement:
    g = setting_gains(results)
    return directional(_difference(g.get(("standard", True), {}), g.get(("standard", False), {})))


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim of §13: its experiment, the jobs it needs and its judgement; ``arms``:
    statistics reported beside the verdict (§13.1, 4), each an arm's runs and its rule."""

    id: str
    text: str
    experiment: str
    choose: Callable[[list[RunSpec], str], list[RunSpec]]
    judge: Callable[[Results], Judgement]
    arms: tuple[
        tuple[str, Callable[[list[RunSpec], str], list[RunSpec]], Callable[[Results], Judgement]],
        ...,
    ] = ()
    on_probe: bool = False  # reads the reasoning probe where the profile has one
    #: the profiles whose design decides the claim (fair or fair-reasoning; full on the GPU)
    decided_at: tuple[str, ...] = ("fair", "full")
    #: the effect of interest Δ of §13.2 (7), in the claim's units (None: no equivalence test)
    margin: float | None = None

    def decide(self, results: Results) -> Judgement:
        """The judgement on chosen runs, its §13.2 design given the claim's Δ."""
        j = self.judge(results)
        if j.design is not None and self.margin is not None:
            j.design = j.design.with_margin(self.margin)
        return j

    def source(self, profile: str) -> tuple[str, Callable[[list[RunSpec], str], list[RunSpec]]]:
        """The experiment whose runs the claim reads at ``profile`` and how it picks them: a
        claim on reasoning answers reads the profile's reasoning probe, fig 9's γ 0.5 and 1
        runs, where it has one (docs/science.md §13.1, 6), else its own experiment."""
        if self.on_probe and has_probe(profile):
            return "critical-init", _tags()
        return self.experiment, self.choose


def _all(jobs: list[RunSpec], profile: str) -> list[RunSpec]:
    return list(jobs)


def _tags(**want: Any) -> Callable[[list[RunSpec], str], list[RunSpec]]:
    def choose(jobs: list[RunSpec], profile: str) -> list[RunSpec]:
        return [
            j
            for j in jobs
            if j.tags.get("gamma") in COMPARED and all(j.tags.get(k) == v for k, v in want.items())
        ]

    return choose


def _anchor_at_least(low: float) -> Callable[[list[RunSpec], str], list[RunSpec]]:
    def choose(jobs: list[RunSpec], profile: str) -> list[RunSpec]:
        return [j for j in _anchor_cells(jobs, profile) if j.tags["gamma"] >= low]

    return choose


def _anchor_at(gamma: float) -> Callable[[list[RunSpec], str], list[RunSpec]]:
    def choose(jobs: list[RunSpec], profile: str) -> list[RunSpec]:
        return [j for j in _anchor_cells(jobs, profile) if j.tags["gamma"] == gamma]

    return choose


_CLAIMS = [
    Claim(
        "anchor-large-init-symmetric",
        "large init (γ = 0.5) answers the unseen anchor pair (4, 3) symmetrically",
        "anchor-scan",
        _anchor_at(0.5),
        _judge_large_symmetric,
        margin=0.1,
    ),
    Claim(
        "anchor-small-init-inferential",
        "small init (γ ≥ 0.8) answers (4, 3) inferentially",
        "anchor-scan",
        _anchor_at_least(0.8),
        _judge_small_inferential,
        margin=0.1,
    ),
    Claim(
        "small-init-lower-loss",
        "γ = 1 reaches lower held-out loss than γ = 0.5",
        "gamma-sweep",
        _largest_compared,
        lambda r: directional(gains(r)),
        arms=(
            ("shared_lr", _largest_arm("shared_lr"), lambda r: directional(gains(r))),
            ("weight_decay", _largest_arm("weight_decay"), lambda r: directional(gains(r))),
        ),
        margin=0.01,
    ),
    Claim(
        "small-init-pays-then-wins",
        "small init pays early and wins at the end: the gain "
        "is negative early in training and positive at its end",
        "gamma-sweep",
        _largest_compared,
        pays_then_wins,
        margin=0.01,
    ),
    Claim(
        "small-init-reasoning-gain",
        "γ = 1 answers reasoning items better than γ = 0.5",
        "gamma-sweep",
        _largest_compared,
        _judge_reasoning_gain,
        on_probe=True,
        margin=0.02,
        decided_at=("fair-reasoning", "full"),
    ),
    Claim(
        "reasoning-above-chance",
        "the models reason above chance",
        "critical-init",
        _all,
        _judge_above_chance,
        decided_at=("fair-reasoning", "full"),
    ),
    Claim(
        "gain-larger-on-reasoning",
        "the gain of small init is larger on reasoning answers than overall",
        "gamma-sweep",
        _largest_compared,
        _judge_gain_on_reasoning,
        on_probe=True,
        margin=0.01,
        decided_at=("fair-reasoning", "full"),
    ),
    Claim(
        "eps-restrains",
        "a standard RMSNorm ε restrains small init",
        "eps-gating",
        _tags(gated=False),
        _judge_eps,
        margin=0.01,
    ),
    Claim(
        "sinks-restrain",
        "attention sinks restrain small init",
        "eps-gating",
        _tags(eps_setting="standard"),
        _judge_sinks,
        margin=0.01,
    ),
    Claim(
        "relaxed-scaling",
        "with relaxed ε and gated attention the gain grows with model size",
        "gain-scaling",
        _tags(eps_setting="relaxed", gated=True),
        lambda r: directional(scaling_slopes(r)),
        margin=0.01,
        decided_at=("full",),
    ),
    Claim(
        "critical-init",
        "there is a critical γ: loss falls as γ grows up to it and rises beyond",
        "critical-init",
        _all,
        _judge_critical,
        decided_at=("fair-reasoning", "full"),
    ),
    Claim(
        "condense-then-expand",
        "under small init the weights first condense, then expand",
        "condense-expand",
        _tags(),
        _judge_condense,
        margin=0.02,
    ),
    Claim(
        "token-gains-context-constrained",
        "the gains of small init land on tokens that need their context",
        "token-gains",
        _tags(),
        _judge_tokens,
        margin=0.01,
        decided_at=("fair-reasoning", "full"),
    ),
]
CLAIMS: dict[str, Claim] = {c.id: c for c in _CLAIMS}


def _chosen(claim: Claim, results: Results, profile: str) -> Results:
    keep = {id(j) for j in claim.source(profile)[1](results.specs, profile)}
    pairs = [(j, r) for j, r in results if id(j) in keep]
    return Results([j for j, _ in pairs], [r for _, r in pairs])


def judge(claim_id: str, results: Results, profile: str) -> Judgement:
    """Claim ``claim_id`` on the finished runs among ``results`` (its experiment's jobs at
    ``profile`` with their runs), whatever is missing; what the figures draw."""
    claim = CLAIMS[claim_id]
    chosen = _chosen(claim, results, profile)
    if not any(r.done for r in chosen.runs):
        return not_run(f"no finished {claim.source(profile)[0]} run")
    return one_seed_undecided(claim.decide(chosen))


def describe(job: RunSpec) -> str:
    tags = " ".join(f"{k}={v}" for k, v in job.tags.items() if k not in ("init", "d_large"))
    return f"{job.kind}/{job.key} ({tags})"


def evaluate(claim_id: str, profile: str, store: RunStore | None = None) -> Record:
    """Claim ``claim_id`` at ``profile`` from the store as it is: ``not run`` (with the
    missing runs listed) unless every run the rule needs is done. Trains nothing."""
    claim = CLAIMS[claim_id]
    experiment = claim.source(profile)[0]
    every = experiments.existing(experiment, profile, store)
    results = _chosen(claim, every, profile)
    if not results.specs:
        return Record(
            claim.id,
            claim.text,
            profile,
            not_run(f"the profile has no {experiment} runs for this claim"),
            decided_at=claim.decided_at,
        )
    missing, seen = [], set()
    for job, run in results:
        if not run.done and job.ident not in seen:
            seen.add(job.ident)
            missing.append(describe(job) + f": {run.state}")
    if missing:
        return Record(
            claim.id,
            claim.text,
            profile,
            not_run(
                f"{len(missing)} of {len({j.ident for j in results.specs})} "
                f"{experiment} runs not done"
            ),
            missing,
            decided_at=claim.decided_at,
        )
    arms = {}
    for name, choose, rule in claim.arms:
        keep = {id(j) for j in choose(every.specs, profile)}
        pairs = [(j, r) for j, r in every if id(j) in keep]
        if any(j.tags.get("arm") == name for j, _ in pairs) and all(r.done for _, r in pairs):
            arms[name] = rule(Results([j for j, _ in pairs], [r for _, r in pairs]))
    runs = sorted({f"{r.kind}/{r.key}" for r in results.runs})
    return Record(
        claim.id,
        claim.text,
        profile,
        one_seed_undecided(claim.decide(results)),
        arms=arms,
        runs=runs,
        decided_at=claim.decided_at,
    )


def decide(records: Sequence[Record], rules: str = DEFAULT_RULES) -> list[Record]:
    """Give one profile's records their §13.2 decisions (the family: every record with a
    design, docs/science.md §13.2, 3) and the ``rules`` their verdicts follow."""
    if rules not in RULES:
        raise ValueError(f"rules {rules!r}: use one of {', '.join(RULES)}")
    judged = [r for r in records if r.judgement.design is not None]
    for r, d in zip(
        judged,
        decide_family([(r.judgement.series, r.judgement.design) for r in judged]),
        strict=True,
    ):
        r.decision = d
    for r in records:
        r.rules = rules
    return list(records)


def table(
    profile_names: Sequence[str], store: RunStore | None = None, *, rules: str = DEFAULT_RULES
) -> list[Record]:
    """Every claim at every profile, in §13's order, profile by profile; each profile's
    claims decided together under §13.2 (:func:`decide`), the verdicts by ``rules``; a
    store root that is a file (or lies below one) is refused as ``runs ls`` refuses it."""
    store = store or RunStore()
    store.check_readable()
    out: list[Record] = []
    with JudgingProgress(len(profile_names) * len(CLAIMS), profile_names) as bar:
        for p in profile_names:
            out += decide([bar.judged(evaluate(c, p, store)) for c in CLAIMS], rules)
    return out


class JudgingProgress:
    """The progress of :func:`table` (reading every claim's runs from the store takes tens
    of seconds at a large store): on a terminal a bar ``claims: 7/13 judged``
    (:func:`smallinit.core.progress.progress`, hidden by ``--quiet``); elsewhere one INFO
    line when judging starts and one when it ends, as the project's other loops report off
    a terminal (:mod:`smallinit.core.progress`)."""

    def __init__(self, total: int, profile_names: Sequence[str]):
        self.total, self.done = total, 0
        self.where = ", ".join(profile_names)
        self.t0 = time.perf_counter()
        self.bar = progress(
            total=total,
            desc="claims",
            unit="claim",
            leave=False,
            bar_format="{desc}: {n_fmt}/{total_fmt} judged |{bar}| [{elapsed}]",
        )
        if not bars_shown() and total:
            log.info("claims: judging %d claims at %s from the store", total, self.where)

    def judged(self, record: Record) -> Record:
        self.done += 1
        self.bar.update(1)
        return record

    def __enter__(self) -> JudgingProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.bar.close()
        if not bars_shown() and self.total and exc[0] is None:
            log.info(
                "claims: %d/%d judged in %.1f s",
                self.done,
                self.total,
                time.perf_counter() - self.t0,
            )
