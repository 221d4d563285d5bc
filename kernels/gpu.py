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

from . import launch
from .backend import cp, family, to_device
from .batched import GroupedStep
from .launch import HERE, KERNELS, inline_source

__all__ = ["HERE", "KERNELS", "cosine_gram", "grouped_two_layer_step", "inline_source",
           "kernel", "module"]


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


@cache
def _cupy_device() -> launch.Device:
    return launch.Device(cp, kernel, _device)


def cosine_gram(W: Any) -> Any:
    """Batched cosine Gram on the GPU: row norms kernel, then the symmetric tiled product."""
    return launch.cosine_gram(_cupy_device(), W)


def grouped_two_layer_step(X, y, a, W, b, offsets, alpha, activation) -> GroupedStep:
    """One launch: a block per network (see grouped_step.cu); CPU fallback when d is large.

    Returns CuPy arrays (the dispatcher in :mod:`batched` converts to the caller's family).
    """
    return launch.grouped_two_layer_step(_cupy_device(), X, y, a, W, b, offsets, alpha,
                                         activation)
