"""Each claim's power at a profile's seed count (docs/science.md §13.2, 2).

For a claim with an effect of interest Δ (:attr:`smallinit.study.claims.Claim.margin`) and a
per-seed spread σ, the power of its one-sided one-sample t test with n seeds is
:func:`smallinit.core.stats.t_power` at level α and at α/m (m the claims the profile judges:
Bonferroni's level, Holm's first step, so a lower bound on the power under Holm), and the
seed count that reaches 0.9 is :func:`smallinit.core.stats.t_sample_size`.

σ is read from a claims record list (``smallinit claims --json``; by default the committed
one nearest the profile, :func:`default_spread`): the sample sd of the record's main per-seed series
where the record has ``values`` (§13.2, 8), else recovered from its two-sided 95% t interval,
σ = (ci_high − ci_low)/2 · √n / t_{0.975, n−1} (§13's record). Nothing is trained or read
from the run store: the seed counts come from the profile's plan.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

from smallinit.core import profiles, stats
from smallinit.study import experiments
from smallinit.study.claims import CLAIMS
from smallinit.study.verdicts import ALPHA

#: the committed claims files, and the folder of those judged under §13.1's rules
CLAIMS_DIR = Path("bench-results/claims")
OLD_RULES = "rules-13.1"
TARGET = 0.9  # §13.2, 2: the power a profile's seed count aims at
#: claims whose §13.2 series is not §13's x_s (§13.2, 6): a §13 record's interval says
#: nothing of their spread
NEW_STATISTIC = frozenset({"token-gains-context-constrained"})


def default_spread(profile: str, root: Path = CLAIMS_DIR) -> Path:
    """The claims file whose spread the plan reads when none is given: the first that
    exists of ``root/P.json`` and ``root/rules-13.1/P.json`` for P the profile, then the
    profile it extends, and so on (a new profile's σ is its base's last measurement);
    ``root/<profile>.json`` when none does."""
    for name in profiles.lineage(profile):
        for folder in (root, root / OLD_RULES):
            if (folder / f"{name}.json").is_file():
                return folder / f"{name}.json"
    return root / f"{profile}.json"


def spread(record: Mapping[str, Any]) -> float:
    """σ of a claims record's main series (module doc); NaN where it has neither values nor
    a finite interval over ≥ 2 seeds of the same statistic."""
    values, design = record.get("values"), record.get("conditions")
    if values and design:
        main = values[design["conditions"][0]["series"]]
        x = [v for v in main.values() if v is not None]
        return float(np.std(x, ddof=1)) if len(x) >= 2 else math.nan
    if record.get("id") in NEW_STATISTIC:
        return math.nan
    n, low, high = record.get("n_seeds") or 0, record.get("ci_low"), record.get("ci_high")
    if n < 2 or low is None or high is None:
        return math.nan
    return (high - low) / 2 * math.sqrt(n) / float(sps.t.ppf(0.975, n - 1))


def seeds_of(claim_id: str, profile: str) -> list[int]:
    """The seeds the claim's runs have at ``profile`` (from the plan, nothing computed)."""
    claim = CLAIMS[claim_id]
    experiment, choose = claim.source(profile)
    chosen = choose(experiments.specs(experiment, profile), profile)
    return sorted({s.tags["seed"] for s in chosen if "seed" in s.tags})


def table(profile: str, records: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """One row per claim: Δ, the planned seeds n, σ (from ``records``, the profile's claims
    JSON, or NaN), the power at α and at α/m, and the seeds needed for 0.9 at each."""
    by_id = {r["id"]: r for r in records or ()}
    seeds = {c: seeds_of(c, profile) for c in CLAIMS}
    m = sum(bool(s) for s in seeds.values())
    rows = []
    for cid, claim in CLAIMS.items():
        n, delta = len(seeds[cid]), claim.margin
        sigma = spread(by_id[cid]) if cid in by_id else math.nan
        row = {
            "id": cid,
            "effect_of_interest": delta,
            "n_seeds": n,
            "sd": sigma,
            "family": m,
            "power": math.nan,
            "power_holm": math.nan,
            "n_needed": None,
            "n_needed_holm": None,
        }
        if delta is not None and math.isfinite(sigma) and sigma > 0 and m:
            for suffix, alpha in (("", ALPHA), ("_holm", ALPHA / m)):
                if n >= 2:
                    row["power" + suffix] = stats.t_power(n, delta, sigma, alpha)
                row["n_needed" + suffix] = stats.t_sample_size(delta, sigma, alpha, TARGET)
        rows.append(row)
    return rows


def format_rows(rows: Sequence[Mapping[str, Any]], source: str) -> str:
    """The power block of ``smallinit figs --plan``."""
    m = rows[0]["family"] if rows else 0
    lines = [
        f"power (docs/science.md §13.2, 2): one-sided t at α {ALPHA} and α/m = "
        f"{ALPHA}/{m}, σ from {source}; seeds for power {TARGET}"
    ]
    for r in rows:
        if r["effect_of_interest"] is None:
            lines.append(f"  {r['id']:<32} no effect of interest (§13.2, 7)")
            continue
        if r["n_needed"] is None:
            lines.append(
                f"  {r['id']:<32} Δ {r['effect_of_interest']:g}, n {r['n_seeds']}: "
                "no spread recorded"
            )
            continue

        def pw(x: float) -> str:
            return "—" if not math.isfinite(x) else f"{x:.2f}"

        lines.append(
            f"  {r['id']:<32} Δ {r['effect_of_interest']:g}  σ {r['sd']:.3g}  "
            f"n {r['n_seeds']}  power {pw(r['power'])} (α/m {pw(r['power_holm'])})  "
            f"n for {TARGET}: {r['n_needed']} (α/m {r['n_needed_holm']})"
        )
    return "\n".join(lines)
