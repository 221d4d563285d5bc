"""Which cosine Gram runs on the GPU, per input dtype: chosen by measurement.

Two paths compute the same Gram (:mod:`.launch`): ``ours``, the symmetric tiled kernel with
the normalization fused (``cosine_gram_sym``), and ``library``, the library product W Wᵀ
(cuBLAS; bf16 on the tensor cores) followed by the fused normalization
(``cosine_normalize``). ``gram_paths.json`` (package data) holds the path measured fastest
for each dtype and the device it was measured on; the GPU check's kernels part rewrites it
when it measures both (:func:`choose`, :func:`write`). A dtype it does not name takes
:data:`DEFAULT`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

FILE = Path(__file__).resolve().parent / "gram_paths.json"
PATHS = ("ours", "library")
DEFAULT = "library"
#: the kernels' type names (:mod:`.launch`) by the dtype names the benchmarks use
DTYPES = {"float": "float32", "double": "float64", "bf16_t": "bfloat16"}


def load(path: Path | None = None) -> dict[str, Any]:
    """The measured choice at ``path`` (default :data:`FILE`): ``{"measured_on": device or
    None, "paths": {dtype: path}}``."""
    path = FILE if path is None else Path(path)
    data = json.loads(path.read_text())
    bad = {
        k: v for k, v in data.get("paths", {}).items() if k not in DTYPES.values() or v not in PATHS
    }
    if bad:
        raise ValueError(
            f"{path}: paths {bad} are not allowed; dtypes are "
            f"{', '.join(DTYPES.values())}, paths {', '.join(PATHS)}"
        )
    return data


def chosen(dtype: str, path: Path | None = None) -> str:
    """The path for ``dtype`` (``float32``, ``float64``, ``bfloat16`` or a kernel type
    name): the measured one, else :data:`DEFAULT`."""
    return load(path)["paths"].get(DTYPES.get(dtype, dtype), DEFAULT)


def choose(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Per dtype, the path whose time summed over the benchmark's shapes is least (rows
    with ``dtype``, ``ours_s`` and ``library_s``, as
    :func:`smallinit.tools.kernel_bench.gpu_gram_benchmark`)."""
    totals: dict[str, dict[str, float]] = {}
    for row in rows:
        sums = totals.setdefault(row["dtype"], dict.fromkeys(PATHS, 0.0))
        for name in PATHS:
            sums[name] += row[f"{name}_s"]
    return {dtype: min(PATHS, key=sums.__getitem__) for dtype, sums in totals.items()}


def write(paths: dict[str, str], device: str, path: Path | None = None) -> Path:
    """Record ``paths`` as measured on ``device`` at ``path`` (default :data:`FILE`,
    replaced atomically)."""
    path = FILE if path is None else Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(
        json.dumps({"measured_on": device, "paths": dict(sorted(paths.items()))}, indent=2) + "\n"
    )
    os.replace(tmp, path)
    return path
