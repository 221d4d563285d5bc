"""Offline compile check of the CUDA sources with ``nvcc`` (no GPU needed).

Each ``*.cu`` file is compiled exactly as CuPy will see it (local includes inlined, see
:func:`launch.inline_source`) plus one host reference per template instantiation that
:data:`launch.KERNELS` asks NVRTC for, so every kernel CuPy can launch is built by ptxas.
Flags: ``-arch=sm_90 -std=c++17 -Xptxas -v -Werror all-warnings``. The ptxas report is
parsed for register spills and static shared memory.

Run ``python -m smallinit.tools.nvcc_check`` to print a per-kernel summary.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from smallinit.kernels.launch import KERNELS, inline_source

ARCH = "sm_90"
_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


@dataclass
class KernelReport:
    entry: str
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    static_shared: int = 0  # bytes of static __shared__ memory


@dataclass
class CompileResult:
    source: str
    returncode: int
    log: str
    kernels: list[KernelReport]


def _sources() -> dict[str, list[str]]:
    return KERNELS


def translation_unit(name: str, exprs: list[str]) -> str:
    """The inlined source plus a host reference to every instantiated kernel."""
    refs = ", ".join(f"(void*)&{e}" for e in exprs)
    return (
        inline_source(name)
        + "\n// instantiations requested by launch.KERNELS\n"
        + f"void* smallinit_kernel_refs[] = {{{refs}}};\n"
    )


def parse_ptxas(log: str) -> list[KernelReport]:
    reports: list[KernelReport] = []
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            reports.append(KernelReport(m.group(1)))
        elif reports and (m := _SPILL.search(line)):
            reports[-1].spill_stores, reports[-1].spill_loads = int(m.group(1)), int(m.group(2))
        elif reports and (m := _REGS.search(line)):
            reports[-1].registers = int(m.group(1))
            if m := _SMEM.search(line):
                reports[-1].static_shared = int(m.group(1))
    return reports


def compile_one(name: str, exprs: list[str], nvcc: str | None = None) -> CompileResult:
    nvcc = nvcc or shutil.which("nvcc")
    if nvcc is None:
        raise FileNotFoundError("nvcc is not on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / name
        src.write_text(translation_unit(name, exprs))
        cmd = [
            nvcc,
            f"-arch={ARCH}",
            "-std=c++17",
            "-Xptxas",
            "-v",
            "-Werror",
            "all-warnings",
            "-c",
            str(src),
            "-o",
            str(Path(tmp) / "out.o"),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    log = proc.stdout + proc.stderr
    return CompileResult(name, proc.returncode, log, parse_ptxas(log))


def compile_all(nvcc: str | None = None) -> list[CompileResult]:
    return [compile_one(n, e, nvcc) for n, e in _sources().items()]


def main() -> int:
    bad = 0
    for res in compile_all():
        print(f"{res.source}: rc={res.returncode}")
        for k in res.kernels:
            print(f"  {k.entry}: {k.registers} regs, spills {k.spill_stores}/{k.spill_loads} B")
        if res.returncode:
            print(res.log)
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
