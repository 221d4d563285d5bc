"""The verdict rules of docs/science.md §13.2, on per-seed values alone.

A claim's decision is a :class:`Design`: a list of :class:`Condition` ("the mean over seeds
of series x_s lies above, or below, a reference μ₀"), how they combine (``all``: an
intersection-union test, p = the largest condition p, Berger 1982; ``any``: Bonferroni,
p = K · the smallest, capped at 1), the effect of interest Δ of the main (first) condition's
equivalence test, and whether the main condition's opposite test can contradict the claim.

:func:`examine` runs a design's tests on its series (each condition: the one-sided t test,
or the exact sign test at sd 0, :func:`smallinit.core.stats.one_sided`); :func:`decide_family`
adjusts a profile's claims by Holm (three families: the claimed direction, the opposite
one, the equivalence tests) and gives each its verdict (§13.2, 5) and one-sided bounds
(§13.2, 4). Everything here reads plain numbers, so a claims record read back from JSON
(``values`` and ``conditions``) decides again to the same verdict.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from smallinit.core import stats

ALPHA = 0.05  # family-wise level of every §13.2 family
VERDICTS = ("holds", "contradicted", "not at this scale", "undecided", "not run")
NAN = float("nan")
Series = Mapping[Any, float]  # seed -> value (seeds as ints, or as JSON's strings)


@dataclasses.dataclass(frozen=True)
class Condition:
    """mean(series) > reference (``greater``) or < reference (``less``) over seeds."""

    series: str
    reference: float = 0.0
    alternative: str = "greater"

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Design:
    """How a claim is decided from its series (module doc); ``share``: the series are shares,
    whose bounds are clipped to [0, 1]; ``note``: what the decision's detail must say about
    the design (a reference chosen on the same seeds)."""

    conditions: tuple[Condition, ...]
    combine: str = "all"
    margin: float | None = None
    opposite: bool = True
    share: bool = False
    note: str = ""

    def __post_init__(self) -> None:
        if not self.conditions:
            raise ValueError("a design needs at least one condition")
        if self.combine not in ("all", "any"):
            raise ValueError(f"combine {self.combine!r}: use all or any")
        if self.combine == "any" and (self.opposite or self.margin is not None):
            raise ValueError("an 'any' design has neither an opposite nor an equivalence test")

    def with_margin(self, margin: float) -> Design:
        """The same design with the effect of interest Δ of its equivalence test."""
        return Design(self.conditions, self.combine, margin, self.opposite, self.share, self.note)

    def as_json(self) -> dict[str, Any]:
        return {
            "conditions": [c.as_json() for c in self.conditions],
            "combine": self.combine,
            "margin": self.margin,
            "opposite": self.opposite,
            "share": self.share,
            "note": self.note,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Design:
        return cls(
            tuple(Condition(**c) for c in data["conditions"]),
            data["combine"],
            data["margin"],
            data["opposite"],
            data["share"],
            data.get("note", ""),
        )


@dataclasses.dataclass(frozen=True)
class Tested:
    """A claim's tests before the family: ``p_raw`` of the claimed direction (combined),
    ``main`` the condition its bounds belong to, ``k`` the Bonferroni factor of ``any``."""

    p_raw: float
    test: str
    main: Condition
    values: tuple[float, ...]
    k: int
    p_opposite: float
    p_equivalence: float
    p_permutation: float


@dataclasses.dataclass(frozen=True)
class Decision:
    """A claim's §13.2 verdict with the numbers of its record (docs/science.md §13.2, 8)."""

    verdict: str
    test: str
    p_raw: float
    p_holm: float
    p_opposite: float
    p_opposite_holm: float
    p_equivalence: float
    p_equivalence_holm: float
    p_permutation: float
    bound: float
    bound_holm: float
    detail: str = ""

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in ("verdict", "detail")}


def _ordered(series: Series) -> tuple[float, ...]:
    """The values in seed order; JSON's null (a NaN or ±∞ written out) reads as NaN."""
    return tuple(
        NAN if series[s] is None else float(series[s]) for s in sorted(series, key=lambda s: int(s))
    )


def _finite(values: Sequence[float]) -> bool:
    return len(values) >= 2 and all(math.isfinite(v) for v in values)


def _p(values: Sequence[float], reference: float, alternative: str) -> tuple[float, str]:
    if not _finite(values):
        return NAN, "none"
    t = stats.one_sided(values, reference, alternative=alternative)
    return t.p_value, t.test


def _flip(alternative: str) -> str:
    return "less" if alternative == "greater" else "greater"


def examine(series: Mapping[str, Series], design: Design) -> Tested:
    """The design's tests on ``series`` (name -> seed -> value), §13.2, 4."""
    values = {c.series: _ordered(series[c.series]) for c in design.conditions}
    tested = [_p(values[c.series], c.reference, c.alternative) for c in design.conditions]
    ps = [p for p, _ in tested]
    if design.combine == "any":
        finite = [i for i, p in enumerate(ps) if math.isfinite(p)]
        i = min(finite, key=lambda j: ps[j]) if finite else 0
        k = len(design.conditions)
        p_raw = min(1.0, k * ps[i]) if finite else NAN
    else:
        i, k = 0, 1
        p_raw = NAN if any(math.isnan(p) for p in ps) else max(ps)
    main = design.conditions[i]
    x = values[main.series]
    p_opp = _p(x, main.reference, _flip(main.alternative))[0] if design.opposite else NAN
    p_eq = (
        stats.tost(x, design.margin, main.reference)
        if design.margin is not None and _finite(x)
        else NAN
    )
    p_perm = (
        stats.permutation_paired(x, main.reference, alternative=main.alternative)
        if _finite(x)
        else NAN
    )
    return Tested(p_raw, tested[i][1], main, x, k, p_opp, p_eq, p_perm)


def _holm_of(ps: Sequence[float]) -> list[float]:
    """Holm over the finite entries (the family); NaN stays NaN."""
    idx = [i for i, p in enumerate(ps) if math.isfinite(p)]
    out = [NAN] * len(ps)
    if idx:
        for i, q in zip(idx, stats.holm([ps[i] for i in idx]), strict=True):
            out[i] = float(q)
    return out


def _steps(ps: Sequence[float]) -> list[int]:
    """Holm's divisor m − r + 1 for each finite p (r its rank in the family, ties in
    order); 0 for NaN."""
    idx = sorted((i for i, p in enumerate(ps) if math.isfinite(p)), key=lambda i: ps[i])
    out = [0] * len(ps)
    for r, i in enumerate(idx):
        out[i] = len(idx) - r
    return out


def _bound(t: Tested, level: float, share: bool) -> float:
    if not _finite(t.values):
        return NAN
    b = stats.bound(t.values, t.main.alternative, level)
    return float(np.clip(b, 0.0, 1.0)) if share and math.isfinite(b) else b


def decide_family(
    claims: Sequence[tuple[Mapping[str, Series], Design]], alpha: float = ALPHA
) -> list[Decision]:
    """§13.2's verdicts of one profile's claims (each: its series and design), in order."""
    tested = [examine(series, design) for series, design in claims]
    holm = _holm_of([t.p_raw for t in tested])
    holm_opp = _holm_of([t.p_opposite for t in tested])
    holm_eq = _holm_of([t.p_equivalence for t in tested])
    steps = _steps([t.p_raw for t in tested])
    out = []
    for (_, design), t, q, q_opp, q_eq, step in zip(
        claims, tested, holm, holm_opp, holm_eq, steps, strict=True
    ):
        if q < alpha:
            verdict = "holds"
        elif q_opp < alpha:
            verdict = "contradicted"
        elif q_eq < alpha:
            verdict = "not at this scale"
        else:
            verdict = "undecided"
        detail = ""
        mean = float(np.mean(t.values)) if t.values else NAN
        if (
            verdict == "holds"
            and design.margin is not None
            and abs(mean - t.main.reference) < design.margin
        ):
            detail = f"effect {mean - t.main.reference:.3g} below Δ = {design.margin:g}"
        if not math.isfinite(t.p_raw):
            detail = "fewer than 2 seeds with finite values: no test"
        detail = "; ".join(x for x in (design.note, detail) if x)
        level_holm = 1 - alpha / (t.k * step) if step else NAN
        out.append(
            Decision(
                verdict,
                t.test,
                t.p_raw,
                q,
                t.p_opposite,
                q_opp,
                t.p_equivalence,
                q_eq,
                t.p_permutation,
                _bound(t, 1 - alpha / t.k, design.share),
                _bound(t, level_holm, design.share) if step else NAN,
                detail,
            )
        )
    return out
