"""The cosine Gram's GPU dispatch: the path measured fastest per dtype (gram_paths.json),
the library path where none was measured, and the GPU entry point running the path chosen
(here on the emulated device, against the NumPy reference)."""

from __future__ import annotations

import json

import kernel_cases as cases
import numpy as np
import pytest

from smallinit.kernels import gpu, gram_paths, launch
from smallinit.tools import emulation


def test_the_shipped_file_is_valid_and_unmeasured_dtypes_take_the_library_path(tmp_path):
    shipped = gram_paths.load()
    assert set(shipped) == {"measured_on", "paths"}
    empty = tmp_path / "paths.json"
    empty.write_text(json.dumps({"measured_on": None, "paths": {}}))
    assert [gram_paths.chosen(t, empty) for t in ("float32", "double", "bf16_t")] == ["library"] * 3


def test_the_fastest_path_summed_over_shapes_is_chosen_and_written(tmp_path):
    rows = [
        {"dtype": "float32", "ours_s": 1.0, "library_s": 1.5},
        {"dtype": "float32", "ours_s": 3.0, "library_s": 2.0},  # library: 3.5 < 4.0
        {"dtype": "bfloat16", "ours_s": 1.0, "library_s": 0.2},
        {"dtype": "float64", "ours_s": 0.5, "library_s": 0.6},
    ]
    paths = gram_paths.choose(rows)
    assert paths == {"float32": "library", "bfloat16": "library", "float64": "ours"}
    where = gram_paths.write(paths, "NVIDIA H200", tmp_path / "paths.json")
    assert gram_paths.load(where) == {"measured_on": "NVIDIA H200", "paths": paths}
    assert gram_paths.chosen("double", where) == "ours"
    assert gram_paths.chosen("float", where) == "library"


def test_a_file_naming_an_unknown_path_is_refused(tmp_path):
    bad = tmp_path / "paths.json"
    bad.write_text(json.dumps({"measured_on": "x", "paths": {"float32": "cutlass"}}))
    with pytest.raises(ValueError, match=r"paths \{'float32': 'cutlass'\} are not allowed"):
        gram_paths.chosen("float32", bad)


@pytest.mark.parametrize("measured", ["ours", "library"])
def test_the_gpu_entry_point_runs_the_measured_path(tmp_path, monkeypatch, measured):
    """gpu.cosine_gram on the emulated device: the path the file names runs (the other is
    never called) and its Gram equals the NumPy reference."""
    if emulation.compiler() is None:
        pytest.fail("no C++ compiler: the kernels' emulation needs one")
    monkeypatch.setattr(gpu, "_cupy_device", lambda: emulation.device())
    file = gram_paths.write({"float64": measured}, "test", tmp_path / "paths.json")
    monkeypatch.setattr(gram_paths, "FILE", file)
    ran = []
    for name in ("cosine_gram", "cosine_gram_library"):
        original = getattr(launch, name)
        monkeypatch.setattr(
            launch, name, lambda dev, W, n=name, f=original: ran.append(n) or f(dev, W)
        )
    W = cases.gram_input((2, 70, 9), np.float64)
    cases.check_cosine_gram(gpu.cosine_gram, W, np.float64)
    assert ran == [{"ours": "cosine_gram", "library": "cosine_gram_library"}[measured]]
