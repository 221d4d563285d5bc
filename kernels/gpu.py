"""CuPy side: compile the ``*.cu`` kernels with ``cupy.RawModule`` and launch them.

Imported only when the backend is ``"cupy"`` (see :mod:`backend`). Sources are read from
this package, local ``#include "..."`` lines are inlined (so CuPy's source-hash cache sees
header changes), and the templates are instantiated through ``name_expressions``. The host
code around each launch (geometry, outputs, CPU fallback) is :mod:`launch`'s, shared with
the CPU emulation of the kernels; scalar kernel arguments are explicit
``numpy.int32``/``numpy.int64``.

bf16: CuPy has no bfloat16 dtype, so torch bf16 tensors are handed over as uint16 views
and the kernels widen the bits to float32 (outputs are float32).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from . import gram_paths, launch
from .backend import cp, family, to_device
from .launch import HERE, KERNELS, inline_source
from .layout import GroupedStep

__all__ = [
    "HERE",
    "KERNELS",
    "cosine_gram",
    "grouped_two_layer_step",
    "inline_source",
    "kernel",
    "module",
]


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


def _product(xp: Any, Wd: Any, tname: str) -> Any:
    """W Wᵀ through cuBLAS: CuPy's matmul for float32/float64; bf16 through torch's batched
    product on the tensor cores, accumulated and returned in float32 (``out_dtype``)."""
    if tname != "bf16_t":
        return launch.host_gram(xp, Wd, tname)
    import torch  # noqa: PLC0415  # lazy: only for bf16 inputs, which come from torch

    t = torch.from_dlpack(Wd.view(cp.int16)).view(torch.bfloat16)
    try:
        G = torch.bmm(t, t.transpose(1, 2), out_dtype=torch.float32)
    except (TypeError, NotImplementedError, RuntimeError):  # a torch without out_dtype
        G = torch.bmm(t.float(), t.float().transpose(1, 2))
    return cp.from_dlpack(G.contiguous())


@cache
def _cupy_device() -> launch.Device:
    return launch.Device(cp, kernel, _device, _product)


def _dtype_name(W: Any) -> str:
    name = str(W.dtype).removeprefix("torch.")
    return name if name in ("float64", "bfloat16") else "float32"


def cosine_gram(W: Any, path: str | None = None) -> Any:
    """Batched cosine Gram on the GPU by ``path`` (None: the one measured fastest for W's
    dtype, :mod:`.gram_paths`): ``ours`` (row norms kernel, then the symmetric tiled
    product) or ``library`` (row norms, cuBLAS, the fused normalization)."""
    path = path or gram_paths.chosen(_dtype_name(W))
    run = launch.cosine_gram_library if path == "library" else launch.cosine_gram
    return run(_cupy_device(), W)


def grouped_two_layer_step(X, y, a, W, b, offsets, alpha, activation) -> GroupedStep:
    """One launch: a block per network (see grouped_step.cu); CPU fallback when d is large.

    Returns CuPy arrays (the dispatcher in :mod:`batched` converts to the caller's family).
    """
    return launch.grouped_two_layer_step(_cupy_device(), X, y, a, W, b, offsets, alpha, activation)
