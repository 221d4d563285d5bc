"""How the ``*.cu`` kernels are launched: sources, geometry and the host code around them.

One copy of the host side of every kernel, for any :class:`Device`: CuPy on a GPU
(:mod:`gpu`) or the CPU emulation of CUDA (:mod:`smallinit.tools.emulation`, tooling), which
runs the same code on NumPy arrays. A device supplies its array module (``xp``: cupy, or
numpy), a kernel loader with CuPy's ``RawKernel`` call convention (``kernel(source,
expr)(grid, block, args, shared_mem=...)``) and the conversion of an input to a contiguous
device array with its kernel type name (``'float'``, ``'double'`` or ``'bf16_t'``, bf16
handed over as uint16 bits and widened by the kernels).

Launch geometry:

* ``row_inv_norms``: one warp per row, 256 threads a block, ⌈32·rows/256⌉ blocks.
* ``cosine_gram_sym``: 64×64 output tiles, grid (T, T, batch) with T = ⌈m/64⌉, 256 threads;
  the batch axis in chunks of at most ``MAX_GRID_Z`` (CUDA's limit on gridDim.z).
* ``cosine_normalize`` (after the library product of :func:`cosine_gram_library`): 256
  threads a block, ⌈batch·m²/256⌉ blocks up to ``NORMALIZE_MAX_BLOCKS``, a grid-stride loop.
* ``grouped_two_layer_step``: one block per network; 256 threads when d ≤ 16, else 128
  (the register arrays are DMAX long); the template's DMAX is the smallest instantiated
  value ≥ d. Dynamic shared memory holds one value per data point (n·itemsize bytes) next
  to the kernel's static ``red[32]``; both together must fit the 48 KiB a block gets
  without opting in, else (or when d exceeds every DMAX) the step runs on the CPU.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import cpu, pointwise
from .backend import to_numpy
from .layout import GroupedStep, check_layout

HERE = Path(__file__).resolve().parent
TILE = 64
MAX_GRID_Z = 65535
SHARED_LIMIT = 48 * 1024  # static + dynamic shared memory of a block, without opting in
GS_DMAX = {"float": (4, 8, 16, 32, 64), "double": (4, 8, 16, 32)}
GS_STATIC_SHARED = 32  # values of T in grouped_step.cu's static `__shared__ T red[32]`
KERNELS = {
    "grouped_step.cu": [
        f"grouped_two_layer_step<{t},{d}>" for t, ds in GS_DMAX.items() for d in ds
    ],
    "cosine_gram.cu": [
        f"{k}<{t}>"
        for k in ("row_inv_norms", "cosine_gram_sym")
        for t in ("float", "double", "bf16_t")
    ],
    "gram_normalize.cu": [f"cosine_normalize<{t}>" for t in ("float", "double")],
}
#: blocks of the normalization's grid-stride loop at most (a few waves on any GPU)
NORMALIZE_MAX_BLOCKS = 4096
ITEMSIZE = {"float": 4, "double": 8, "bf16_t": 2}
_INCLUDE = re.compile(r'^#include "([^"]+)"\s*$', re.M)


def inline_source(name: str, seen: set[str] | None = None, root: Path = HERE) -> str:
    """Source of ``name`` (in ``root``) with local includes expanded once each
    (``#pragma once`` dropped)."""
    seen = set() if seen is None else seen
    seen.add(name)
    text = (root / name).read_text().replace("#pragma once", "")

    def expand(match: re.Match) -> str:
        inc = match.group(1)
        return "" if inc in seen else inline_source(inc, seen, root)

    return _INCLUDE.sub(expand, text)


def host_gram(xp: Any, Wd: Any, tname: str) -> Any:
    """W Wᵀ per batch through the array module's matmul (cuBLAS under CuPy, NumPy's BLAS in
    the emulation), bf16 widened to float32 first; in the kernels' accumulation type."""
    Wd = widen_bf16(xp, Wd)
    return xp.ascontiguousarray(xp.matmul(Wd, Wd.transpose(0, 2, 1)), dtype=_acc_dtype(xp, tname))


@dataclass(frozen=True)
class Device:
    """Where the kernels run (module docstring): array module, kernel loader, converter,
    and the library product W Wᵀ of a (batch, m, d) device array of a kernel type
    (:func:`host_gram` unless the device has a faster one: bf16 on the tensor cores)."""

    xp: Any
    kernel: Callable[[str, str], Callable[..., Any]]
    array: Callable[[Any], tuple[Any, str]]
    gram: Callable[[Any, Any, str], Any] = host_gram

    def product(self, Wd: Any, tname: str) -> Any:
        return self.gram(self.xp, Wd, tname)


@dataclass(frozen=True)
class Launch:
    """One kernel launch: template instantiation, grid, block and dynamic shared bytes."""

    expr: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    shared_mem: int = 0


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def grouped_launch(G: int, n: int, d: int, tname: str) -> Launch | None:
    """The grouped step's launch for G networks, n data points, d inputs; None when the
    kernel cannot take it (d above every DMAX, or shared memory past ``SHARED_LIMIT``)."""
    dmax = next((c for c in GS_DMAX[tname] if c >= d), None)
    itemsize = ITEMSIZE[tname]
    if dmax is None or (n + GS_STATIC_SHARED) * itemsize > SHARED_LIMIT:
        return None
    threads = 256 if dmax <= 16 else 128
    return Launch(f"grouped_two_layer_step<{tname},{dmax}>", (G,), (threads,), n * itemsize)


def widen_bf16(xp: Any, x: Any) -> Any:
    """float32 array from bf16 bit patterns (uint16); other arrays pass through."""
    if x.dtype != xp.uint16:
        return x
    return (x.astype(xp.uint32) << 16).view(xp.float32)


def _acc_dtype(xp: Any, tname: str) -> Any:
    return xp.float64 if tname == "double" else xp.float32


def _run(dev: Device, source: str, launch: Launch, args: tuple) -> None:
    dev.kernel(source, launch.expr)(launch.grid, launch.block, args, shared_mem=launch.shared_mem)


def cosine_gram(dev: Device, W: Any) -> Any:
    """Batched cosine Gram: the row-norms kernel, then the symmetric tiled product, which
    writes every element of its output (a tile and its mirror per block)."""
    xp = dev.xp
    Wd, tname = dev.array(W)
    *lead, m, d = Wd.shape
    batch = int(np.prod(lead)) if lead else 1
    if batch * m == 0 or d == 0:  # nothing launched: zero rows have cosine 0
        return xp.zeros((*lead, m, m), dtype=_acc_dtype(xp, tname))
    out = xp.empty((batch, m, m), dtype=_acc_dtype(xp, tname))
    Wd = Wd.reshape(batch, m, d)
    rinv = xp.empty((batch, m), dtype=out.dtype)
    rows = batch * m
    norms = Launch(f"row_inv_norms<{tname}>", (cdiv(rows * 32, 256),), (256,))
    _run(dev, "cosine_gram.cu", norms, (Wd, rinv, np.int64(rows), np.int32(d)))
    T = cdiv(m, TILE)
    for s in range(0, batch, MAX_GRID_Z):
        e = min(batch, s + MAX_GRID_Z)
        gram = Launch(f"cosine_gram_sym<{tname}>", (T, T, e - s), (256,))
        _run(dev, "cosine_gram.cu", gram, (Wd[s:e], rinv[s:e], out[s:e], np.int32(m), np.int32(d)))
    return out.reshape(*lead, m, m)


def cosine_gram_library(dev: Device, W: Any) -> Any:
    """Batched cosine Gram through the library: the row-norms kernel, the device's product
    W Wᵀ (:attr:`Device.gram`: cuBLAS on a GPU), then ``cosine_normalize`` in place, which
    scales every element of the product by r_i r_j and clips it to [−1, 1]."""
    xp = dev.xp
    Wd, tname = dev.array(W)
    *lead, m, d = Wd.shape
    batch = int(np.prod(lead)) if lead else 1
    if batch * m == 0 or d == 0:  # nothing launched: zero rows have cosine 0
        return xp.zeros((*lead, m, m), dtype=_acc_dtype(xp, tname))
    Wd = Wd.reshape(batch, m, d)
    acc = _acc_dtype(xp, tname)
    rinv = xp.empty((batch, m), dtype=acc)
    rows = batch * m
    norms = Launch(f"row_inv_norms<{tname}>", (cdiv(rows * 32, 256),), (256,))
    _run(dev, "cosine_gram.cu", norms, (Wd, rinv, np.int64(rows), np.int32(d)))
    out = dev.product(Wd, tname)
    aname = "double" if acc == xp.float64 else "float"
    blocks = min(cdiv(batch * m * m, 256), NORMALIZE_MAX_BLOCKS)
    scale = Launch(f"cosine_normalize<{aname}>", (blocks,), (256,))
    _run(dev, "gram_normalize.cu", scale, (out, rinv, np.int64(batch), np.int32(m)))
    return out.reshape(*lead, m, m)


def grouped_two_layer_step(dev: Device, X, y, a, W, b, offsets, alpha, activation) -> GroupedStep:
    """One launch, a block per network (see grouped_step.cu), whose threads write every
    element of the outputs; the CPU reference when the kernel's limits are exceeded.
    Returns arrays of the device's array module."""
    xp = dev.xp
    Wd, tname = dev.array(W)
    if tname == "bf16_t":
        Wd, tname = widen_bf16(xp, Wd), "float"
    dt = Wd.dtype

    def arr(v: Any) -> Any:
        return xp.ascontiguousarray(widen_bf16(xp, dev.array(v)[0]), dtype=dt)

    Xd, yd, ad = arr(X), arr(y), arr(a)
    bd = None if b is None else arr(b)
    off = np.asarray(to_numpy(offsets)).astype(np.int64)
    al = np.asarray(to_numpy(alpha), dtype=np.float64)
    G, n = check_layout(Xd, yd, ad, Wd, bd, off, al)
    M, d = Wd.shape
    launch = grouped_launch(G, n, d, tname)
    if launch is None:
        warnings.warn(
            f"grouped_two_layer_step: d={d}, n={n} exceed the GPU kernel's limits; using CPU",
            stacklevel=4,
        )
        out = cpu.grouped_two_layer_step(
            to_numpy(Xd),
            np.broadcast_to(to_numpy(yd), (G, n)),
            to_numpy(ad),
            to_numpy(Wd),
            None if bd is None else to_numpy(bd),
            off,
            np.broadcast_to(al, (G,)).astype(np.dtype(dt.name)),
            activation,
        )
        return GroupedStep(*(None if o is None else xp.asarray(o) for o in out))
    yd = xp.ascontiguousarray(xp.broadcast_to(yd, (G, n)))
    ald = xp.asarray(np.broadcast_to(al, (G,)), dtype=dt)
    offd = xp.asarray(off)
    loss = xp.empty(G, dtype=dt)
    f = xp.empty((G, n), dtype=dt)
    ga, gW = xp.empty(M, dtype=dt), xp.empty((M, d), dtype=dt)
    gb = xp.empty(M if bd is not None else 1, dtype=dt)
    if G > 0:
        x_stride = 0 if Xd.ndim == 2 else n * d
        args = (
            Xd,
            np.int64(x_stride),
            yd,
            ad,
            Wd,
            ad if bd is None else bd,
            offd,
            ald,
            np.int32(n),
            np.int32(d),
            np.int32(pointwise.CODES[activation]),
            np.int32(bd is not None),
            loss,
            f,
            ga,
            gW,
            gb,
        )
        _run(dev, "grouped_step.cu", launch, args)
    return GroupedStep(loss, ga, gW, None if bd is None else gb, f)
