"""One prepared GPU check: the gpu-marked tests, then the GPU benchmarks, as JSON.

Usage (on a machine with a CUDA device and CuPy): ``python -m smallinit.kernels.gpu_report
[OUT_DIR]`` (default ``$OUT`` or ``bench-results``). Writes ``gpu_check.json`` with the
pytest exit code, the device name, the grouped-step benchmark (against a per-network torch
loop and padded torch.bmm), the cosine Gram benchmark (against cupy.matmul/cuBLAS) and the
batched stack measurements (against the per-matrix host loop).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

from . import bench
from .backend import BACKEND, cp


def collect() -> dict:
    """The gpu-marked tests' exit code and tail, then (with CuPy on CUDA) the benchmarks."""
    repo = Path(__file__).resolve().parent.parent
    result: dict = {}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(repo / "tests" / "kernels" / "test_kernels_gpu.py"),
            "-m",
            "gpu",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=repo,
    )
    result["pytest_rc"] = proc.returncode
    result["pytest_tail"] = (proc.stdout + proc.stderr)[-4000:]

    result["backend"] = BACKEND
    if BACKEND == "cupy":
        result["device"] = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
        for key, fn in (
            ("grouped_step", bench.gpu_grouped_benchmark),
            ("cosine_gram", bench.gpu_gram_benchmark),
            ("measure_stack", bench.gpu_stack_benchmark),
        ):
            try:
                result[key] = fn()
            except Exception:
                result[key] = {"error": traceback.format_exc()[-3000:]}
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0] if argv else os.environ.get("OUT", "bench-results"))
    out.mkdir(parents=True, exist_ok=True)
    result = collect()
    (out / "gpu_check.json").write_text(json.dumps(result, indent=2, default=float))
    print(
        json.dumps({k: v for k, v in result.items() if k != "pytest_tail"}, indent=2, default=float)
    )
    print(result["pytest_tail"][-1500:])
    return 0 if result["pytest_rc"] == 0 and result["backend"] == "cupy" else 1


if __name__ == "__main__":
    sys.exit(main())
