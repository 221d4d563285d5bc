"""Backend selection (decided once, at import) and zero-copy array hand-over.

Backend rule: ``SMALLINIT_BACKEND`` may be ``cpu``, ``cupy`` or unset/``auto``.
``auto`` picks CuPy when it imports *and* a CUDA device answers
(``cupy.cuda.runtime.getDeviceCount() > 0`` and a tiny allocation succeeds), otherwise
the CPU (NumPy). ``cupy`` forces CuPy and raises at import when it is unusable; ``cpu``
never touches CuPy.

Hand-over: torch tensors and JAX arrays go to CuPy through DLPack (no copy; inputs are made
contiguous first, and torch's current CUDA stream is synchronized before CuPy reads and
after CuPy writes, because CuPy kernels run on CuPy's stream). On the CPU, torch tensors
become NumPy views through ``Tensor.numpy()`` and JAX arrays through ``np.asarray``.
Results return in the caller's array family (:func:`like`).
"""

from __future__ import annotations

import os
from importlib import metadata
from typing import Any

import numpy as np

ENV_VAR = "SMALLINIT_BACKEND"
CHOICES = ("auto", "cpu", "cupy")


def _probe_cupy() -> tuple[Any | None, str]:
    """Return (cupy module or None, reason it is unusable)."""
    try:
        import cupy  # noqa: PLC0415  (optional dependency, probed once)
    except Exception as exc:  # ImportError, or a broken CUDA install
        return None, f"cupy does not import ({type(exc).__name__}: {exc})"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None, "no CUDA device"
        cupy.zeros(1, dtype=cupy.float32).sum().item()
    except Exception as exc:
        return None, f"CUDA device unusable ({type(exc).__name__}: {exc})"
    return cupy, ""


def decide(requested: str | None, probe=_probe_cupy) -> tuple[str, Any | None]:
    """Pure decision rule: ``(name, cupy-module-or-None)`` for a requested backend."""
    want = (requested or "auto").strip().lower() or "auto"
    if want not in CHOICES:
        raise ValueError(f"{ENV_VAR}={requested!r} is not allowed; use one of {', '.join(CHOICES)}")
    if want == "cpu":
        return "cpu", None
    cp, why = probe()
    if cp is not None:
        return "cupy", cp
    if want == "cupy":
        raise RuntimeError(f"{ENV_VAR}=cupy but the GPU backend is unusable: {why}")
    return "cpu", None


#: CuPy when the backend is "cupy", else None; Any, since CuPy ships no type hints and the
#: GPU modules use it only under that backend
cp: Any
BACKEND, cp = decide(os.environ.get(ENV_VAR))


def backend() -> str:
    """Name of the backend chosen at import: ``"cpu"`` or ``"cupy"``."""
    return BACKEND


def cupy_status() -> dict[str, Any]:
    """What the backend rule saw, for a report: the backend asked for (``$SMALLINIT_BACKEND``)
    and chosen, the CuPy distribution installed, and why the GPU backend is not live (empty
    when it is)."""
    why = ""
    if BACKEND != "cupy":
        asked = (os.environ.get(ENV_VAR) or "").strip().lower()
        why = f"{ENV_VAR}=cpu" if asked == "cpu" else _probe_cupy()[1]
    return {
        "requested": os.environ.get(ENV_VAR) or "auto",
        "backend": BACKEND,
        "cupy": _cupy_distribution(),
        "cupy_unusable": why,
    }


def _cupy_distribution() -> str | None:
    for name in ("cupy-cuda13x", "cupy-cuda12x", "cupy"):
        try:
            return f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return None


# ---------------------------------------------------------------------------- array families


def family(x: Any) -> str:
    """``"numpy"``, ``"torch"``, ``"jax"``, ``"cupy"`` or ``"other"`` (lists, scalars)."""
    mod = type(x).__module__
    if isinstance(x, np.ndarray):
        return "numpy"
    if mod.startswith("torch"):
        return "torch"
    if mod.startswith(("jax", "jaxlib")):
        return "jax"
    if mod.startswith("cupy"):
        return "cupy"
    return "other"


def _torch_sync(t: Any) -> None:
    if t.is_cuda:
        import torch  # noqa: PLC0415  # lazy: only for torch arrays handed in

        torch.cuda.current_stream(t.device).synchronize()


def to_numpy(x: Any) -> np.ndarray:
    """A NumPy view (CPU torch/JAX/NumPy) or a host copy (device arrays)."""
    fam = family(x)
    if fam == "numpy":
        return x
    if fam == "torch":
        t = x.detach()
        if t.dtype.is_floating_point and str(t.dtype) == "torch.bfloat16":
            t = t.float()
        return t.cpu().numpy() if t.device.type != "cpu" else t.numpy()
    if fam == "cupy":
        return x.get()
    return np.asarray(x)


def to_device(x: Any) -> Any:
    """A CuPy array sharing memory with ``x`` when possible (DLPack), else a device copy."""
    if cp is None:
        raise RuntimeError("to_device needs the cupy backend")
    fam = family(x)
    if fam == "cupy":
        return x
    if fam == "torch":
        t = x.detach().contiguous()
        if t.is_cuda:
            _torch_sync(t)
            return cp.from_dlpack(t)
        return cp.asarray(t.numpy())
    if fam == "jax":
        try:
            return cp.from_dlpack(x)
        except Exception:  # CPU-resident JAX array
            return cp.asarray(np.asarray(x))
    return cp.asarray(np.ascontiguousarray(x))


def like(result: Any, template: Any) -> Any:
    """Return ``result`` (NumPy or CuPy) in the array family of ``template``.

    NumPy (or list) templates get NumPy (a CuPy result is copied to the host), CuPy templates
    keep CuPy; torch gets a tensor on the template's device (zero-copy through DLPack for
    CuPy results); JAX gets a ``jax.Array``. For speed on the GPU pass device arrays (CuPy,
    CUDA torch): NumPy inputs are copied to the device and back on every call.
    """
    fam = family(template)
    rfam = family(result)
    if fam in ("numpy", "other") and rfam == "cupy":
        return result.get()
    if fam == "torch":
        import torch  # noqa: PLC0415  # lazy: only for torch arrays handed in

        if rfam == "cupy":
            if template.is_cuda:
                cp.cuda.get_current_stream().synchronize()  # CuPy's writes before torch reads
                return torch.from_dlpack(result)
            return torch.from_numpy(result.get())
        return torch.from_numpy(np.ascontiguousarray(result)).to(template.device)
    if fam == "jax":
        import jax.numpy as jnp  # noqa: PLC0415  # lazy: only for JAX arrays handed in

        if rfam == "cupy":
            import jax  # noqa: PLC0415  # lazy: only for JAX arrays handed in

            try:
                return jax.dlpack.from_dlpack(result)
            except Exception:
                return jnp.asarray(result.get())
        return jnp.asarray(result)
    return result


def use_gpu(*arrays: Any) -> bool:
    """Run on the GPU when the backend is CuPy (any input family is accepted)."""
    del arrays
    return BACKEND == "cupy"
