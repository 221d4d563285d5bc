"""CuPy side: compile the ``*.cu`` kernels with ``cupy.RawModule`` and launch them.

Imported only when the backend is ``"cupy"`` (see :mod:`backend`). Sources are read from
this package, local ``#include "..."`` lines are inlined (so CuPy's source-hash cache sees
header changes), and the templates are instantiated through ``name_expressions``. Scalar
kernel arguments are passed as explicit ``numpy.int32``/``numpy.int64``.

bf16: CuPy has no bfloat16 dtype, so torch bf16 tensors are handed over as uint16 views
and the kernels widen the bits to float32 (outputs are float32).
"""

from __future__ import annotations

import re
import warnings
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from . import activations, cpu
from .backend import cp, family, to_device, to_numpy
from .batched import GroupedStep, _check_layout

HERE = Path(__file__).resolve().parent
TILE = 64
MAX_GRID_Z = 65535
GS_DMAX = {"float": (4, 8, 16, 32, 64), "double": (4, 8, 16, 32)}
KERNELS = {
    "grouped_step.cu": [
        f"grouped_two_layer_step<{t},{d}>" for t, ds in GS_DMAX.items() for d in ds
    ],
    "cosine_gram.cu": [
        f"{k}<{t}>"
        for k in ("row_inv_norms", "cosine_gram_sym")
        for t in ("float", "double", "bf16_t")
    ],
}
_INCLUDE = re.compile(r'^#include "([^"]+)"\s*$', re.M)


def inline_source(name: str, seen: set[str] | None = None) -> str:
    """Source of ``name`` with local includes expanded once each (``#pragma once`` dropped)."""
    seen = set() if seen is None else seen
    seen.add(name)
    text = (HERE / name).read_text().replace("#pragma once", "")

    def expand(match: re.Match) -> str:
        inc = match.group(1)
        return "" if inc in seen else inline_source(inc, seen)

    return _INCLUDE.sub(expand, text)


@cache
def module(name: str) -> Any:
    return cp.RawModule(
        code=inline_source(name), options=("-std=c++17",), name_expressions=KERNELS[name]
    )


def kernel(name: str, expr: str) -> Any:
    return module(name).get_function(expr)


def _device(x: Any) -> tuple[Any, str]:
    """Contiguous CuPy array and its kernel type name ('float', 'double' or 'bf16_t')."""
    if family(x) == "torch" and str(x.dtype) == "torch.bfloat16":
        import torch  # noqa: PLC0415  # lazy: only for torch bf16 arrays handed in

        return to_device(x.detach().contiguous().view(torch.int16)).view(cp.uint16), "bf16_t"
    arr = cp.ascontiguousarray(to_device(x))
    if arr.dtype == cp.float64:
        return arr, "double"
    if arr.dtype != cp.float32:
        arr = arr.astype(cp.float32)
    return arr, "float"


def widen_bf16(x: Any) -> Any:
    """float32 array from bf16 bit patterns (uint16); other arrays pass through."""
    if x.dtype != cp.uint16:
        return x
    return (x.astype(cp.uint32) << 16).view(cp.float32)


def _acc_dtype(tname: str) -> Any:
    return cp.float64 if tname == "double" else cp.float32


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def cosine_gram(W: Any) -> Any:
    """Batched cosine Gram on the GPU: row norms kernel, then the symmetric tiled product."""
    Wd, tname = _device(W)
    *lead, m, d = Wd.shape
    batch = int(np.prod(lead)) if lead else 1
    out = cp.zeros((batch, m, m), dtype=_acc_dtype(tname))
    if batch * m == 0 or d == 0:
        return out.reshape(*lead, m, m)
    Wd = Wd.reshape(batch, m, d)
    rinv = cp.empty((batch, m), dtype=out.dtype)
    rows = batch * m
    kernel("cosine_gram.cu", f"row_inv_norms<{tname}>")(
        (_cdiv(rows * 32, 256),), (256,), (Wd, rinv, np.int64(rows), np.int32(d))
    )
    T = _cdiv(m, TILE)
    gram = kernel("cosine_gram.cu", f"cosine_gram_sym<{tname}>")
    for s in range(0, batch, MAX_GRID_Z):
        e = min(batch, s + MAX_GRID_Z)
        gram((T, T, e - s), (256,), (Wd[s:e], rinv[s:e], out[s:e], np.int32(m), np.int32(d)))
    return out.reshape(*lead, m, m)


def grouped_two_layer_step(X, y, a, W, b, offsets, alpha, activation):
    """One launch: a block per network (see grouped_step.cu); CPU fallback when d is large.

    Returns CuPy arrays (the dispatcher in :mod:`batched` converts to the caller's family).
    """
    Wd, tname = _device(W)
    if tname == "bf16_t":
        Wd, tname = widen_bf16(Wd), "float"
    dt = Wd.dtype

    def dev(v: Any) -> Any:
        return cp.ascontiguousarray(widen_bf16(_device(v)[0]), dtype=dt)

    Xd, yd, ad = dev(X), dev(y), dev(a)
    bd = None if b is None else dev(b)
    off = np.asarray(to_numpy(offsets)).astype(np.int64)
    al = np.asarray(to_numpy(alpha), dtype=np.float64)
    G, n = _check_layout(Xd, yd, ad, Wd, bd, off, al)
    M, d = Wd.shape
    itemsize = np.dtype(dt.name).itemsize
    dmax = next((c for c in GS_DMAX[tname] if c >= d), None)
    if dmax is None or n * itemsize > 48 * 1024:
        warnings.warn(
            f"grouped_two_layer_step: d={d}, n={n} exceed the GPU kernel's limits; using CPU",
            stacklevel=3,
        )
        out = cpu.grouped_two_layer_step(
            to_numpy(Xd),
            np.broadcast_to(to_numpy(yd), (G, n)),
            to_numpy(ad),
            to_numpy(Wd),
            None if bd is None else to_numpy(bd),
            off,
            np.broadcast_to(al, (G,)).astype(dt.name),
            activation,
        )
        return GroupedStep(*(None if o is None else cp.asarray(o) for o in out))
    yd = cp.ascontiguousarray(cp.broadcast_to(yd, (G, n)))
    ald = cp.asarray(np.broadcast_to(al, (G,)), dtype=dt)
    offd = cp.asarray(off)
    loss = cp.zeros(G, dtype=dt)
    f = cp.zeros((G, n), dtype=dt)
    ga, gW = cp.zeros(M, dtype=dt), cp.zeros((M, d), dtype=dt)
    gb = cp.zeros(M if bd is not None else 1, dtype=dt)
    if G > 0:
        x_stride = 0 if Xd.ndim == 2 else n * d
        threads = 256 if dmax <= 16 else 128
        kernel("grouped_step.cu", f"grouped_two_layer_step<{tname},{dmax}>")(
            (G,),
            (threads,),
            (
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
                np.int32(activations.CODES[activation]),
                np.int32(bd is not None),
                loss,
                f,
                ga,
                gW,
                gb,
            ),
            shared_mem=n * itemsize,
        )
    return GroupedStep(loss, ga, gW, None if bd is None else gb, f)
