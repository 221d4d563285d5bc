"""How long a refusal takes (``make bench``): ``smallinit figs --only 99`` and ``llm train
--config <folder>`` as subprocesses, against ``python -c pass`` as the baseline, timed
alternately round by round so that the ratio holds on a shared machine. The goal is a
refusal under a second (``goal_met`` in ``extra_info``); tests/cli/test_light_refusals.py
checks that nothing heavy is imported on the way."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.bench

ROUNDS, WARMUP = 5, 1
GOAL_S = 1.0

CASES = {
    "figs --only 99": ["figs", "--only", "99"],
    "llm train --config DIR": ["llm", "train", "--config", "{dir}"],
    "llm init-table --config DIR": ["llm", "init-table", "--config", "{dir}"],
    "llm init-table bad value": ["llm", "init-table", "model.d_model=abc"],
    "figs overlay nan": ["figs", "--plan", "anchor.train.lr=nan"],
}


def _median(times: list[float]) -> float:
    times = sorted(times)
    return times[len(times) // 2]


@pytest.mark.parametrize("name", list(CASES))
def test_refusal_against_a_bare_python(benchmark, name, tmp_path):
    argv = [
        sys.executable,
        "-m",
        "smallinit",
        *(a.replace("{dir}", str(tmp_path)) for a in CASES[name]),
    ]
    base: list[float] = []

    def bare() -> None:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        base.append(time.perf_counter() - t0)

    def refuse() -> subprocess.CompletedProcess:
        return subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path)

    proc = benchmark.pedantic(refuse, setup=bare, rounds=ROUNDS, warmup_rounds=WARMUP)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    refusal, bare_s = benchmark.stats.stats.median, _median(base[WARMUP:])
    benchmark.extra_info.update(
        refusal_s=refusal,
        bare_python_s=bare_s,
        ratio=refusal / bare_s,
        goal_s=GOAL_S,
        goal_met=refusal < GOAL_S,
    )
    print(
        f"\n{name}: refused in {refusal:.2f} s, bare python {bare_s:.3f} s "
        f"({refusal / bare_s:.0f}x); goal < {GOAL_S} s: {refusal < GOAL_S}"
    )
