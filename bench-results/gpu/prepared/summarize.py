"""The prepared session's timings as JSON: each phase's wall seconds and exit code (from the
marks run.sh wrote: ``NAME_start T``, ``NAME_end T``, ``NAME_rc N``) and nvidia-smi's GPU
utilization (mean, median, share of samples >= 50%, peak memory) over the figs phase and
the bench phase. Usage: python summarize.py MARKS UTIL_CSV (UTIL_CSV may be missing)."""

from __future__ import annotations

import csv
import json
import statistics
import sys
from datetime import datetime
from pathlib import Path


def read_marks(path: Path) -> tuple[dict[str, float], dict[str, int]]:
    times: dict[str, float] = {}
    codes: dict[str, int] = {}
    for line in path.read_text().splitlines():
        name, value = line.split()
        if name.endswith("_rc"):
            codes[name[:-3]] = int(value)
        else:
            times[name] = float(value)
    return times, codes


def read_util(path: Path) -> list[tuple[float, float, float]]:
    """(epoch seconds, utilization %, memory MiB) per nvidia-smi sample."""
    if not path.exists():
        return []
    rows = []
    with path.open() as f:
        for row in csv.reader(f):
            if len(row) < 3 or row[0].startswith("timestamp"):
                continue
            try:
                when = datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
                rows.append((when, float(row[1].split()[0]), float(row[2].split()[0])))
            except ValueError:
                continue
    return rows


def utilization(samples, start: float | None, end: float | None) -> dict | None:
    if start is None or end is None:
        return None
    util = [u for t, u, _ in samples if start <= t <= end]
    if not util:
        return None
    return {"samples": len(util), "mean_pct": statistics.fmean(util),
            "median_pct": statistics.median(util),
            "share_at_least_50pct": sum(u >= 50 for u in util) / len(util),
            "peak_memory_mib": max(m for t, _, m in samples if start <= t <= end)}


def main(argv: list[str]) -> int:
    times, codes = read_marks(Path(argv[0]))
    samples = read_util(Path(argv[1]))
    phases = sorted({k.rsplit("_", 1)[0] for k in times})
    out = {"phases": {p: {"wall_s": times[f"{p}_end"] - times[f"{p}_start"]
                          if f"{p}_end" in times and f"{p}_start" in times else None,
                          "rc": codes.get(p)} for p in phases},
           "exit_codes": codes,
           "gpu_utilization": {p: utilization(samples, times.get(f"{p}_start"),
                                              times.get(f"{p}_end"))
                               for p in ("figs", "bench")}}
    if "install" in out["phases"] and "figs" in out["phases"]:
        out["figs_with_install_s"] = sum(out["phases"][p]["wall_s"] or 0.0
                                         for p in ("install", "figs"))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
