"""The MFU the GPU check measured, for the full profile's H200 hours.

The plan (:func:`smallinit.study.experiments.plan_totals`) states its hours at the MFU of
the newest GPU check committed under ``bench-results/gpu/<date>/gpu_check.json`` (a check
run on a GPU, not ``--dry``), next to the assumed :data:`smallinit.llm.training.cost.MFU`.
The MFU is read, in this order of preference (the newest check with the first, else the
newest with the second):

* ``full_run`` — the full profile's own first run on the GPU: its last logged tokens/s ·
  training FLOPs per token of that run's model
  (:func:`smallinit.llm.training.cost.training_flops`) / the H200's dense BF16 peak, when
  the key the check ran is still the full profile's first run (the model is then known);
* ``compiled`` — else the check's compiled ~135M throughput model's MFU.

Hours at an MFU m are C / (m · peak) (:func:`smallinit.llm.training.cost.gpu_hours`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from smallinit.llm.training import cost

#: where the committed checks lie (one folder per date, ``YYYY-MM-DD``)
CHECKS = Path(__file__).resolve().parents[1] / "bench-results" / "gpu"


def _result(check: dict[str, Any], part: str) -> dict[str, Any]:
    entry = check.get("parts", {}).get(part, {})
    return entry.get("result") or {} if entry.get("status") == "ok" else {}


def _full_run_mfu(check: dict[str, Any], first: Any) -> dict[str, Any] | None:
    run = _result(check, "full_run")
    rate = run.get("last_tok_per_s")
    if not rate or run.get("key_of_the_full_run") != first.key:
        return None
    per_token = cost.training_flops(first.config.model, 1)
    return {
        "mfu": rate * per_token / cost.H200_PEAK_BF16_DENSE,
        "part": "full_run",
        "tokens_per_s": rate,
        "flops_per_token": per_token,
        "run_key": first.key,
    }


def from_check(check: dict[str, Any], first: Any) -> dict[str, Any] | None:
    """The MFU of one check's JSON (module docstring), with the part it came from; None
    for a dry check or one that measured neither. ``first`` is the full profile's first
    run (its run spec: ``.key``, ``.config.model``; the plan passes
    ``experiments.specs("gamma-sweep", "full")[0]``)."""
    if check.get("dry", True):
        return None
    found = _full_run_mfu(check, first)
    if found is None and _result(check, "compiled").get("mfu"):
        found = {"mfu": _result(check, "compiled")["mfu"], "part": "compiled"}
    return found


def newest(first: Any, root: Path = CHECKS) -> dict[str, Any] | None:
    """The MFU of the newest check under ``root`` that ran the full profile's first run,
    (``first``, as :func:`from_check` takes it), else of the newest that measured one at
    all (module docstring), with ``source``: its
    file, relative to the repository where it lies inside it; None where none did."""
    found = []
    for path in sorted(Path(root).glob("*/gpu_check.json"), reverse=True):
        one = from_check(json.loads(path.read_text()), first)
        if one is not None:
            try:
                source = path.resolve().relative_to(CHECKS.parents[1])
            except ValueError:
                source = path
            found.append({**one, "source": str(source)})
    return next((f for f in found if f["part"] == "full_run"), found[0] if found else None)


def hours(flops: float, measured: dict[str, Any] | None) -> dict[str, Any] | None:
    """H200 hours of ``flops`` at the measured MFU, with the MFU and its source."""
    if measured is None:
        return None
    return {**measured, "h200_hours": cost.gpu_hours(flops, mfu=measured["mfu"])}
