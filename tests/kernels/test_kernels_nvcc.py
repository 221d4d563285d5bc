"""Compile every CUDA source with nvcc for sm_90 (no GPU needed); skip where nvcc is absent."""

import re
import shutil
from functools import cache

import pytest

from smallinit.kernels import gpu, launch
from smallinit.tools import nvcc_check

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")

compiled = cache(lambda source: nvcc_check.compile_one(source, gpu.KERNELS[source]))

# Register spills we accept knowingly, by mangled-name substring (none at present).
ALLOWED_SPILLS: dict[str, int] = {}


@pytest.mark.parametrize("source", sorted(gpu.KERNELS))
def test_cuda_source_compiles_without_warnings_or_spills(source):
    res = compiled(source)
    assert res.returncode == 0, res.log
    assert "warning" not in res.log.lower(), res.log
    # every instantiation CuPy asks for was built by ptxas
    assert len(res.kernels) >= len(gpu.KERNELS[source]), res.log
    for k in res.kernels:
        allowed = max((v for s, v in ALLOWED_SPILLS.items() if s in k.entry), default=0)
        assert k.spill_stores <= allowed and k.spill_loads <= allowed, (k, res.log)


def test_static_shared_memory_is_what_the_launch_limit_counts():
    """The grouped step's launch limit adds GS_STATIC_SHARED values of T to its dynamic
    shared memory: ptxas must report exactly that static size for every instantiation."""
    res = compiled("grouped_step.cu")
    seen = 0
    for k in res.kernels:
        t = re.search(r"grouped_two_layer_stepI([fd])Li", k.entry).group(1)
        assert k.static_shared == launch.GS_STATIC_SHARED * {"f": 4, "d": 8}[t], (k, res.log)
        seen += 1
    assert seen == len(gpu.KERNELS["grouped_step.cu"])
    gram = compiled("cosine_gram.cu")
    assert all(k.static_shared <= launch.SHARED_LIMIT for k in gram.kernels), gram.log


def test_every_cu_file_is_registered():
    on_disk = {p.name for p in gpu.HERE.glob("*.cu")}
    assert on_disk == set(gpu.KERNELS)


def test_parse_ptxas_reads_spills():
    log = (
        "ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_90'\n"
        "ptxas info    : Function properties for _Z3fooPf\n"
        "    8 bytes stack frame, 12 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 255 registers, used 1 barriers, 256 bytes smem\n"
    )
    (k,) = nvcc_check.parse_ptxas(log)
    assert (k.entry, k.spill_stores, k.spill_loads, k.registers, k.static_shared) == (
        "_Z3fooPf",
        12,
        4,
        255,
        256,
    )
