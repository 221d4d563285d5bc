"""The committed claims files (bench-results/claims/): every record that carries per-seed
values is decided again from those values and its conditions alone (docs/science.md
§13.2, 8), one family per profile; the files written under §13.1, before records carried
values, live in bench-results/claims/rules-13.1/, and a file anywhere else must carry them.
The plan's default spread reads the nearest committed file of a profile's lineage."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from smallinit.study import power
from smallinit.study.verdicts import ALPHA, Decision, Design, decide_family

ROOT = Path(__file__).resolve().parents[2]
CLAIMS = ROOT / "bench-results" / "claims"
FILES = sorted(CLAIMS.rglob("*.json"))


def from_records(
    records: Sequence[Mapping[str, Any]], alpha: float = ALPHA
) -> list[Decision | None]:
    """:func:`~smallinit.study.verdicts.decide_family` on claims records read back from JSON
    (``values`` and ``conditions``; one profile's records): None for a record with no design
    (``not run``)."""
    judged = [i for i, r in enumerate(records) if r.get("conditions")]
    decisions = decide_family(
        [(records[i]["values"], Design.from_json(records[i]["conditions"])) for i in judged], alpha
    )
    out: list[Decision | None] = [None] * len(records)
    for i, d in zip(judged, decisions, strict=True):
        out[i] = d
    return out


def _same(recorded, computed) -> bool:
    if isinstance(computed, float) and not math.isfinite(computed):
        return recorded is None or (isinstance(recorded, float) and math.isnan(recorded))
    if isinstance(computed, float):
        return recorded == pytest.approx(computed, rel=1e-12, abs=1e-15)
    return recorded == computed


def recompute(records: list[dict]) -> list[str]:
    """What differs between each judged record and its decision computed again from its
    ``values`` and ``conditions`` alone, one family per profile (empty: nothing)."""
    found = []
    by_profile: dict[str, list[dict]] = {}
    for r in records:
        by_profile.setdefault(r["profile"], []).append(r)
    for family in by_profile.values():
        for r, d in zip(family, from_records(family), strict=True):
            if d is None:
                if r.get("verdict") != "not run":
                    found.append(f"{r['id']}: judged, but no conditions to decide it on")
                continue
            if r.get("rules") == "13.2" and r["verdict"] != d.verdict:
                found.append(
                    f"{r['id']}: verdict {r['verdict']} recorded, {d.verdict} from its values"
                )
            for key, value in d.as_json().items():
                if not _same(r.get(key), value):
                    found.append(
                        f"{r['id']}: {key} {r.get(key)!r} recorded, {value!r} from its values"
                    )
    return found


def test_the_claims_files_are_there_and_the_old_rules_have_their_folder():
    assert FILES, "no committed claims file"
    old = {f.name for f in (CLAIMS / power.OLD_RULES).glob("*.json")}
    assert {"fair.json", "fair-reasoning.json", "fair-machine-b.json"} <= old


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(CLAIMS)))
def test_every_committed_claims_file_decides_again_from_its_per_seed_values(path):
    records = json.loads(path.read_text())
    assert isinstance(records, list) and all("id" in r and "profile" in r for r in records)
    carries = [r for r in records if r.get("values") and r.get("conditions")]
    if path.parent.name != power.OLD_RULES:
        judged = [r for r in records if r.get("verdict") != "not run"]
        assert judged and len(carries) == len(judged), (
            f"{path.name}: a claims file outside {power.OLD_RULES}/ carries every judged "
            "record's per-seed values (smallinit claims --json)"
        )
    assert recompute(carries) == []


def test_a_changed_per_seed_value_is_found():
    """The recompute is not vacuous: a record whose verdict its values do not give fails."""
    x = {str(s): 0.02 + 0.001 * s for s in range(6)}
    record = {
        "id": "small-init-lower-loss",
        "profile": "p",
        "rules": "13.2",
        "values": {"x": x},
        "conditions": {
            "conditions": [{"series": "x", "reference": 0.0, "alternative": "greater"}],
            "combine": "all",
            "margin": 0.01,
            "opposite": True,
            "share": False,
        },
    }
    decided = from_records([record])[0]
    assert decided is not None and decided.verdict == "holds"
    good = {**record, "verdict": "holds", **decided.as_json()}
    assert recompute([good]) == []
    lowered = {**good, "values": {"x": {**x, "0": -0.5}}}
    assert any("p_raw" in line for line in recompute([lowered]))


def test_the_default_spread_is_the_nearest_committed_file_of_the_lineage(tmp_path):
    (tmp_path / power.OLD_RULES).mkdir()
    (tmp_path / power.OLD_RULES / "fair.json").write_text("[]")
    assert power.default_spread("fair", tmp_path) == tmp_path / power.OLD_RULES / "fair.json"
    assert (
        power.default_spread("fair-reasoning", tmp_path) == tmp_path / power.OLD_RULES / "fair.json"
    )  # fair-reasoning extends fair
    (tmp_path / "fair.json").write_text("[]")  # a file under the new rules comes first
    assert power.default_spread("fair-reasoning", tmp_path) == tmp_path / "fair.json"
    assert power.default_spread("quick", tmp_path) == tmp_path / "quick.json"  # none: its own
