"""The tests marked ``kernel_sensitive`` (pinned floats, exact results across code paths) run
a second time in a child pytest whose BLAS and SIMD kernels differ from this process's, so a
pin that holds only on this machine's kernels fails here rather than on a user's.

The knobs are the libraries' own environment variables, read when they load:
OPENBLAS_CORETYPE picks numpy's and scipy's OpenBLAS core; ATEN_CPU_CAPABILITY picks torch's
vectorized ATen kernels, MKL_ENABLE_INSTRUCTIONS torch's MKL BLAS/LAPACK path and
ONEDNN_MAX_CPU_ISA its oneDNN kernels. A variable this process has set is unset in the child
(the machine's own choice); one it has not set is set to the AVX2 choice (what a machine
without AVX-512 runs); where that is already this process's kernel, to the one below it.
NPY_DISABLE_CPU_FEATURES turns off NumPy's dispatched AVX-512 loops (its own math:
``power``, ``exp``, ``log``) where this process runs them; the run-key tests are marked, so
a key that hashes a SIMD-computed float fails here.
JAX is left alone: XLA_FLAGS=--xla_cpu_max_isa changed no result of its CPU code here."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARK = "kernel_sensitive and not slow and not gpu and not bench"
# what a child gets for a variable the parent has not set: the AVX2 choice, and the one
# below it where AVX2 is already the parent's own kernel
OPENBLAS = ("OPENBLAS_CORETYPE", "Haswell", "Sandybridge")
TORCH = (
    ("ATEN_CPU_CAPABILITY", "avx2", "default"),
    ("MKL_ENABLE_INSTRUCTIONS", "AVX2", "SSE4_2"),
    ("ONEDNN_MAX_CPU_ISA", "AVX2", "SSE41"),
)
ACTIVE = """
import ctypes, glob, json, os, numpy, torch
core = None
for path in glob.glob(os.path.join(os.path.dirname(numpy.__file__) + ".libs", "*openblas*")):
    get = getattr(ctypes.CDLL(path), "scipy_openblas_get_corename64_", None)
    if get is not None:
        get.restype = ctypes.c_char_p
        core = get().decode()
from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
avx512 = [f for f in __cpu_dispatch__ if __cpu_features__.get(f) and ("512" in f or f == "X86_V4")]
print(json.dumps({"openblas": core, "torch": torch.backends.cpu.get_cpu_capability(),
                  "numpy_avx512": avx512}))
"""
AVX512_OFF = ("NPY_DISABLE_CPU_FEATURES", "X86_V4 AVX512_ICL AVX512_SPR")


def active(env: dict[str, str] | None = None) -> dict:
    """The OpenBLAS core numpy runs, torch's ATen CPU capability and NumPy's AVX-512 loops in
    use, in a fresh interpreter with ``env`` (all are fixed when the libraries load)."""
    out = subprocess.run(
        [sys.executable, "-c", ACTIVE],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(out.stdout)


def flipped(environ: dict[str, str], level: int = 1) -> dict[str, str]:
    """``environ`` with each kernel variable flipped: unset where set, else its choice at
    ``level`` (1: AVX2, 2: below it)."""
    env = dict(environ)
    for name, *choices in (OPENBLAS, *TORCH):
        if name in environ:
            del env[name]
        else:
            env[name] = choices[level - 1]
    return env


def child_env(environ: dict[str, str]) -> tuple[dict[str, str], dict, dict]:
    """The child's environment, and the parent's and child's kernels, chosen so that both the
    OpenBLAS core and torch's capability differ from this process's, and NumPy's AVX-512
    loops are off where this process runs them."""
    parent = active(environ)
    env = flipped(environ)
    if parent["numpy_avx512"]:
        env[AVX512_OFF[0]] = AVX512_OFF[1]
    child = active(env)
    lower = flipped(environ, level=2)
    if child["openblas"] == parent["openblas"] and OPENBLAS[0] not in environ:
        env[OPENBLAS[0]] = lower[OPENBLAS[0]]
    if child["torch"] == parent["torch"]:
        env.update({name: lower[name] for name, *_ in TORCH if name not in environ})
    return env, parent, active(env)


def test_flipped_unsets_what_is_set_and_sets_what_is_not():
    env = flipped({"OPENBLAS_CORETYPE": "Haswell", "PATH": "/bin"})
    assert "OPENBLAS_CORETYPE" not in env and env["PATH"] == "/bin"
    assert env["ATEN_CPU_CAPABILITY"] == "avx2" and env["MKL_ENABLE_INSTRUCTIONS"] == "AVX2"
    assert flipped({})["OPENBLAS_CORETYPE"] == "Haswell"
    assert flipped({}, level=2)["ATEN_CPU_CAPABILITY"] == "default"


def test_kernel_sensitive_tests_hold_under_other_blas_and_simd_kernels():
    env, parent, child = child_env(dict(os.environ))
    assert child["openblas"] != parent["openblas"] or parent["openblas"] is None, child
    assert child["torch"] != parent["torch"], (parent, child)
    assert not child["numpy_avx512"], (parent, child)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            MARK,
            str(ROOT / "tests"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    report = f"kernels {parent} -> {child}\n{proc.stdout[-6000:]}{proc.stderr[-2000:]}"
    assert proc.returncode == 0, report
    passed = re.search(r"(\d+) passed", proc.stdout.splitlines()[-1])
    assert passed and int(passed[1]) >= 10, report  # the marked tests ran, not none
