"""Shared figure style and byte-deterministic saving.

Every figure is drawn inside :func:`use_style` (the package's ``smallinit.mplstyle``) and
written by :func:`save_figure` as PNG and PDF whose bytes depend only on the drawing: the
software/creation-date metadata that would make them differ run to run is stripped.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # figures are files; never open a window

import matplotlib.pyplot as plt  # noqa: E402

from smallinit.core.atomic import atomic_write_bytes  # noqa: E402

STYLE = resources.files("smallinit.core") / "style" / "smallinit.mplstyle"
PNG_METADATA = {"Software": None}
PDF_METADATA = {"Creator": None, "Producer": None, "CreationDate": None, "ModDate": None}


@contextlib.contextmanager
def use_style() -> Iterator[None]:
    """Apply the smallinit style for the figures drawn inside the block."""
    with resources.as_file(STYLE) as path, plt.style.context(str(path)):
        yield


def save_figure(fig: matplotlib.figure.Figure, out_dir: str | Path, stem: str) -> list[Path]:
    """Write ``out_dir/stem.png`` and ``.pdf`` (atomically, metadata stripped); close ``fig``."""
    out_dir = Path(out_dir)
    paths = []
    for ext, metadata in (("png", PNG_METADATA), ("pdf", PDF_METADATA)):
        buf = io.BytesIO()
        fig.savefig(buf, format=ext, metadata=metadata)
        path = out_dir / f"{stem}.{ext}"
        atomic_write_bytes(path, buf.getvalue())
        paths.append(path)
    plt.close(fig)
    return paths
