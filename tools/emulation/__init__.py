"""The CUDA kernels on the CPU: the unmodified ``*.cu`` sources compiled by a host C++
compiler against ``cuda_host.h`` and launched on NumPy arrays, to check their arithmetic
where there is no GPU (tests/kernels/test_kernels_emulated.py).

``cuda_host.h`` states the execution model: the threads of a block are fibers scheduled
deterministically (each runs as far as the code lets it before the next one starts),
``__shared__`` memory is filled with NaN bytes before every block, barriers and warp
shuffles are checked (divergent barriers, masks naming lanes that are absent, deadlocks
abort the launch with :class:`EmulationError`), and with ``sanitize=True`` the library is
built under AddressSanitizer and UBSan (it then loads only into a process started with
``LD_PRELOAD`` of the compiler's libasan: :func:`sanitizer_env`).

The host code around the launches is :mod:`..launch`'s, the same that runs on the GPU;
only the array module (NumPy, with :func:`empty` returning NaN-filled arrays, so an output
element the kernel does not write shows) and the kernel loader differ. Each source is
compiled once per content: the shared library is cached under ``$SMALLINIT_CACHE`` (else
``~/.cache/smallinit``) in ``emulation/``, named by the hash of the sources, the
instantiations, the compiler and its flags.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from smallinit.kernels import launch

HERE = Path(__file__).resolve().parent
HEADER = HERE / "cuda_host.h"
FLAGS = (
    "-std=gnu++17",
    "-O2",
    "-fPIC",
    "-shared",
    "-pthread",
    "-ffp-contract=off",
    "-fno-extern-tls-init",  # extern __shared__ arrays have no dynamic initializer
    # every symbol but the C interface stays inside its library: two builds loaded in
    # one process (a planted error next to the real source) never share a kernel
    "-fvisibility=hidden",
    "-fvisibility-inlines-hidden",
    "-fno-gnu-unique",
    "-Wall",
    "-Wno-unknown-pragmas",
    "-Wno-unused-function",
)
SANITIZE_FLAGS = (
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
    "-g",
)
_EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([A-Za-z_][\w\s]*?)\s+(\w+)\s*\[\s*\]"
)


class EmulationError(RuntimeError):
    """A launch the emulation refused or aborted (bad geometry, arguments, deadlock, ...)."""


def compiler() -> str | None:
    """The host C++ compiler: ``$CXX``, else ``g++``, else ``c++`` (None if none is found)."""
    for name in (os.environ.get("CXX"), "g++", "c++"):
        if name and (path := shutil.which(name)):
            return path
    return None


def cache_dir() -> Path:
    root = os.environ.get("SMALLINIT_CACHE") or Path.home() / ".cache" / "smallinit"
    return Path(root) / "emulation"


def translation_unit(
    source: str, root: Path = launch.HERE, exprs: Sequence[str] | None = None
) -> str:
    """The C++ file compiled for ``source``: the header, the storage of the source's
    ``extern __shared__`` arrays, the unmodified source (by path) and a table of its
    instantiations (``exprs``, by default those :data:`launch.KERNELS` lists)."""
    text = launch.inline_source(source, root=root)
    lines = [f'#include "{HEADER}"']
    # defined before the source, so the kernels' block-scope `extern __shared__` declarations
    # see a constant-initialized variable (the element type must be a builtin one)
    for i, (ctype, name) in enumerate(dict.fromkeys(_EXTERN_SHARED.findall(text))):
        lines += [
            f"thread_local __attribute__((aligned(16))) {ctype} "
            f"{name}[::emu::kDynamicSharedMax / sizeof({ctype})];",
            f"static unsigned char* emu_shared_{i}() {{ "
            f"return reinterpret_cast<unsigned char*>({name}); }}",
            f"static ::emu::RegisterDynamicShared emu_register_shared_{i}(&emu_shared_{i});",
        ]
    lines.append(f'#include "{(root / source).resolve()}"')
    exprs = launch.KERNELS[source] if exprs is None else exprs
    table = ",\n    ".join(f'::emu::entry("{e}", &{e})' for e in exprs)
    lines += [f"static ::emu::Register emu_register_kernels({{\n    {table}}});", "EMU_EXPORTS", ""]
    return "\n".join(lines)


def _compiler_id(cxx: str) -> str:
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.splitlines()[0] if out.stdout else cxx


def build(
    source: str,
    *,
    root: Path = launch.HERE,
    sanitize: bool = False,
    exprs: Sequence[str] | None = None,
) -> Path:
    """The shared library for ``source`` in ``root`` (compiled once per content)."""
    cxx = compiler()
    if cxx is None:
        raise EmulationError("no C++ compiler found ($CXX, g++ or c++)")
    tu = translation_unit(source, root, exprs)
    flags = FLAGS + (SANITIZE_FLAGS if sanitize else ())
    digest = hashlib.sha256()
    # by content, not place: a copy of the sources elsewhere reuses the library (only the
    # file names in the emulator's messages then name the first copy)
    placeless = tu.replace(str(Path(root).resolve()), "<root>").replace(str(HEADER), "<header>")
    for part in (
        placeless,
        HEADER.read_text(),
        launch.inline_source(source, root=root),
        _compiler_id(cxx),
        " ".join(flags),
    ):
        digest.update(part.encode() + b"\0")
    name = f"{Path(source).stem}-{'asan-' if sanitize else ''}{digest.hexdigest()[:16]}.so"
    lib = cache_dir() / name
    if lib.exists():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:
        cpp = Path(tmp) / f"{Path(source).stem}_host.cpp"
        cpp.write_text(tu)
        out = Path(tmp) / name
        proc = subprocess.run(
            [cxx, *flags, "-o", str(out), str(cpp)], capture_output=True, text=True, check=False
        )
        if proc.returncode:
            raise EmulationError(
                f"compiling {root / source} for the host failed:\n{proc.stderr[-4000:]}"
            )
        os.replace(out, lib)
    return lib


def sanitizer_env() -> dict[str, str]:
    """Environment of a process that can load a ``sanitize=True`` library: the compiler's
    libasan preloaded, leaks not reported (the interpreter's own are not ours)."""
    cxx = compiler()
    if cxx is None:
        raise EmulationError("no C++ compiler found ($CXX, g++ or c++)")
    asan = subprocess.run(
        [cxx, "-print-file-name=libasan.so"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return {
        "LD_PRELOAD": asan,
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    }


def _code(x: Any) -> str:
    """The kernel-parameter code of an argument (see ``code_of`` in cuda_host.h)."""
    if isinstance(x, np.ndarray):
        return f"{x.dtype.kind}{x.dtype.itemsize}*"
    if isinstance(x, np.generic):
        return f"{x.dtype.kind}{x.dtype.itemsize}"
    raise EmulationError(f"kernel argument {x!r}: pass NumPy arrays or NumPy scalars")


class Kernel:
    """One instantiation, called like CuPy's ``RawKernel``: ``k(grid, block, args,
    shared_mem=0)``. Arguments are checked against the kernel's parameter types."""

    def __init__(self, lib: ctypes.CDLL, expr: str, order: int):
        sig = lib.emu_signature(expr.encode())
        if sig is None:
            raise EmulationError(f"the emulated library has no kernel {expr}")
        self.lib, self.expr, self.order = lib, expr, order
        self.signature = sig.decode().split(",")

    def __call__(self, grid, block, args, *, shared_mem: int = 0) -> None:
        if len(args) != len(self.signature):
            raise EmulationError(
                f"{self.expr} takes {len(self.signature)} arguments, got {len(args)}"
            )
        held = []
        for i, (want, x) in enumerate(zip(self.signature, args, strict=True)):
            got = _code(x)
            if got != want.removeprefix("c"):
                raise EmulationError(
                    f"{self.expr} argument {i}: the kernel takes {want}, got "
                    f"{got} ({getattr(x, 'dtype', type(x))})"
                )
            if isinstance(x, np.ndarray):
                if not x.flags.c_contiguous:
                    raise EmulationError(f"{self.expr} argument {i} is not C-contiguous")
                if not want.startswith("c") and not x.flags.writeable:
                    raise EmulationError(
                        f"{self.expr} argument {i} is written by the kernel but read-only"
                    )
                held.append(ctypes.c_void_p(x.ctypes.data))
            else:
                held.append(np.ctypeslib.as_ctypes_type(x.dtype)(x.item()))
        ptrs = (ctypes.c_void_p * len(held))(*[ctypes.addressof(h) for h in held])
        dims = [tuple(int(v) for v in d) + (1,) * (3 - len(d)) for d in (grid, block)]
        err = ctypes.create_string_buffer(2048)
        rc = self.lib.emu_launch(
            self.expr.encode(),
            (ctypes.c_uint * 3)(*dims[0]),
            (ctypes.c_uint * 3)(*dims[1]),
            int(shared_mem),
            ptrs,
            self.order,
            err,
            len(err),
        )
        if rc:
            raise EmulationError(
                f"{self.expr} grid {dims[0]} block {dims[1]}: {err.value.decode()}"
            )


class Module:
    """The emulated counterpart of a ``cupy.RawModule`` for one source."""

    def __init__(self, path: Path, order: int = 0):
        self.path = path
        self.lib = ctypes.CDLL(str(path))
        self.lib.emu_signature.restype = ctypes.c_char_p
        self.lib.emu_signature.argtypes = [ctypes.c_char_p]
        self.lib.emu_launch.restype = ctypes.c_int
        self.lib.emu_launch.argtypes = [
            ctypes.c_char_p,
            ctypes.POINTER(ctypes.c_uint),
            ctypes.POINTER(ctypes.c_uint),
            ctypes.c_ulonglong,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.c_ulonglong,
        ]
        self.lib.emu_shared_bytes.restype = ctypes.c_ulonglong
        self.order = order

    def get_function(self, expr: str) -> Kernel:
        return Kernel(self.lib, expr, self.order)

    def shared_bytes(self) -> int:
        """Bytes of all ``__shared__`` storage of the library (every instantiation)."""
        return int(self.lib.emu_shared_bytes())


def empty(shape, dtype=float) -> np.ndarray:
    """``numpy.empty`` filled with 0xFF bytes (NaN in float32 and float64)."""
    out = np.empty(shape, dtype=dtype)
    out.view(np.uint8).fill(0xFF)
    return out


class _HostArrays:
    """NumPy as the emulated device's array module, except :func:`empty`."""

    empty = staticmethod(empty)

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)


host_arrays = _HostArrays()


def _host_array(x: Any) -> tuple[np.ndarray, str]:
    """NumPy float64 -> 'double', uint16 (bf16 bits) -> 'bf16_t', anything else float32."""
    arr = np.ascontiguousarray(x)
    if arr.dtype == np.float64:
        return arr, "double"
    if arr.dtype == np.uint16:
        return arr, "bf16_t"
    return np.ascontiguousarray(arr, dtype=np.float32), "float"


@cache
def _module(source: str, root: Path, sanitize: bool, order: int) -> Module:
    return Module(build(source, root=root, sanitize=sanitize), order)


def device(root: Path = launch.HERE, *, sanitize: bool = False, order: int = 0) -> launch.Device:
    """The emulated device for the sources in ``root``; ``order`` 1 schedules each block's
    threads from the highest-numbered down."""
    root = Path(root).resolve()

    def kernel(source: str, expr: str) -> Kernel:
        return _module(source, root, sanitize, order).get_function(expr)

    return launch.Device(host_arrays, kernel, _host_array)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16, round to nearest even) of a float32 array."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
