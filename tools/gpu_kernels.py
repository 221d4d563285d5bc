"""The kernels part of the GPU check: the gpu-marked kernel tests, then the GPU benchmarks.

:func:`gpu_tests` runs ``tests/kernels/test_kernels_gpu.py -m gpu`` of the checkout in a
pytest subprocess (a time limit of its own, at which pytest is interrupted and still
reports the tests that finished; the counts read from pytest's JUnit XML, so "every test
skipped" is seen, not only the exit code); in a dry run the emulated replay of
the same cases (``tests/kernels/test_kernels_emulated.py``) instead. :func:`benchmarks`
times the grouped step (against a per-network torch loop and a padded ``torch.bmm``), the
cosine Gram in float32, float64 and bf16 by both of its paths (against cuBLAS; the faster
path per dtype is written to ``gram_paths.json``, which the GPU dispatch reads) and the
batched stack measurements (against the per-matrix host loop) on CUDA, or through the CPU
emulation of the kernels at toy sizes in a dry run (:mod:`.bench`).

Standalone: ``python -m smallinit.tools.gpu_kernels [OUT_DIR]`` (default ``$OUT`` or
``bench-results``) writes both into ``gpu_check.json``; exit status 1 unless the tests
passed on the cupy backend.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import traceback
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from smallinit.kernels import gram_paths
from smallinit.kernels.backend import BACKEND, cupy_status
from smallinit.tools import kernel_bench

REPO = Path(__file__).resolve().parent.parent
GPU_TESTS = "tests/kernels/test_kernels_gpu.py"
EMULATED_TESTS = "tests/kernels/test_kernels_emulated.py"
#: toy sizes of a dry run's benchmarks (seconds through the emulation)
DRY_SIZES: dict[str, dict[str, Any]] = {
    "grouped": {"batch": {"n_widths": 3, "repeats": 1, "lo": 16, "hi": 64}, "repeat": 1},
    "gram": {"shapes": ((1, 70, 33), (3, 65, 17)), "repeat": 1},
    "stack": {"shapes": ((2, 32, 16),), "repeat": 1},
}
#: seconds pytest has, after the SIGINT that stops it at its timeout, to write its report
PYTEST_GRACE_S = 10


def _interruptible() -> None:
    """In the child before exec: SIGINT at its default, so that Python turns it into
    KeyboardInterrupt even where the parent ignores it (a job started with ``&`` by a
    shell without job control, as CI and ``nohup make test &`` do, ignores SIGINT, and
    an ignored signal stays ignored across exec)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _run_stoppable(cmd: list[str], timeout: float | None, log: Path) -> tuple[int, bool]:
    """``cmd`` from the checkout, its output into ``log``; past ``timeout`` seconds it gets
    SIGINT (pytest then ends its session and writes its report of the tests that finished)
    and is killed :data:`PYTEST_GRACE_S` later. The exit code, and whether it was stopped."""
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO, preexec_fn=_interruptible
        )
        try:
            return proc.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
        except BaseException:
            proc.kill()
            raise
        try:
            return proc.wait(timeout=PYTEST_GRACE_S), True
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait(), True


def _junit_counts(xml: Path) -> dict[str, int]:
    """tests, failed, errors, skipped and passed from a JUnit XML (zeros when absent)."""
    counts = {"tests": 0, "failed": 0, "errors": 0, "skipped": 0}
    if xml.exists():
        for suite in ET.parse(xml).getroot().iter("testsuite"):
            counts["tests"] += int(suite.get("tests", 0))
            counts["failed"] += int(suite.get("failures", 0))
            counts["errors"] += int(suite.get("errors", 0))
            counts["skipped"] += int(suite.get("skipped", 0))
    counts["passed"] = counts["tests"] - counts["failed"] - counts["errors"] - counts["skipped"]
    return counts


def run_pytest(target: str, marker: str, timeout: float | None = None) -> dict:
    """``pytest target -m marker`` in a subprocess from the checkout: exit code, counts
    (tests, passed, failed, errors, skipped) from its JUnit XML, and the output's tail; past
    ``timeout`` seconds it is stopped and the counts are of the tests that finished, with
    ``timed_out`` and an ``error`` saying so."""
    path = REPO / target
    if not path.is_file():
        return {"error": f"{path} does not exist: run the check from a checkout"}
    with tempfile.TemporaryDirectory() as tmp:
        xml, log = Path(tmp) / "junit.xml", Path(tmp) / "pytest.log"
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            str(path),
            "-m",
            marker,
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            f"--junitxml={xml}",
        ]
        code, stopped = _run_stoppable(cmd, timeout, log)
        counts = _junit_counts(xml)
        tail = log.read_text(errors="replace")[-3000:]
    result = {
        "target": target,
        "marker": marker,
        "pytest_rc": code,
        **counts,
        "all_skipped": counts["tests"] > 0 and counts["skipped"] == counts["tests"],
        "timed_out": stopped,
        "tail": tail,
    }
    if stopped:
        result["error"] = f"ran past their {timeout:g} s and were stopped"
    return result


def gpu_tests(dry: bool = False, timeout: float | None = None) -> dict:
    """The gpu-marked kernel tests (dry: the emulated replay of their cases)."""
    if dry:
        return run_pytest(EMULATED_TESTS, "not slow", timeout)
    return run_pytest(GPU_TESTS, "gpu", timeout)


def benchmarks(dry: bool = False) -> dict:
    """Every GPU benchmark of :mod:`.bench` (dry: through the emulation at toy sizes), each
    caught on its own: a failing one is recorded with its traceback."""
    result: dict = {"backend": BACKEND, **cupy_status()}
    try:
        dev = kernel_bench.emulated_bench_device() if dry else kernel_bench.cuda_bench_device()
    except Exception:
        result["error"] = traceback.format_exc()[-3000:]
        return result
    result["device"] = dev.name
    sizes = DRY_SIZES if dry else {}
    for key, fn, size in (
        ("grouped_step", kernel_bench.gpu_grouped_benchmark, "grouped"),
        ("cosine_gram", kernel_bench.gpu_gram_benchmark, "gram"),
        ("measure_stack", kernel_bench.gpu_stack_benchmark, "stack"),
    ):
        try:
            result[key] = fn(dev, **sizes.get(size, {}))
        except Exception:
            result[key] = {"error": traceback.format_exc()[-3000:]}
    if isinstance(result.get("cosine_gram"), list):
        result["gram_paths"] = record_gram_paths(result["cosine_gram"], dev.name, dry)
    return result


def record_gram_paths(rows: list[dict], device: str, dry: bool) -> dict:
    """The Gram path chosen per dtype from the benchmark's ``rows``, written to the package's
    ``gram_paths.json`` (the dispatch reads it) when measured on a GPU, not in a dry run."""
    paths = {row["dtype"]: row["chosen_path"] for row in rows}
    written = None if dry else str(gram_paths.write(paths, device))
    return {"paths": paths, "measured_on": device, "written_to": written}


def collect() -> dict:
    """The gpu-marked tests, then (with CuPy on CUDA) the benchmarks."""
    result = {"tests": gpu_tests()}
    if BACKEND == "cupy":
        result["benchmarks"] = benchmarks()
    else:
        result["backend"] = cupy_status()
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0] if argv else os.environ.get("OUT", "bench-results"))
    out.mkdir(parents=True, exist_ok=True)
    result = collect()
    (out / "gpu_check.json").write_text(json.dumps(result, indent=2, default=float))
    print(json.dumps(result, indent=2, default=float)[-4000:])
    tests = result["tests"]
    return 0 if tests.get("pytest_rc") == 0 and BACKEND == "cupy" else 1


if __name__ == "__main__":
    sys.exit(main())
