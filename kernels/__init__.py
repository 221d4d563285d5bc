"""smallinit.kernels: CuPy kernels with CPU fallbacks, and the shared measurements.

This package imports nothing else of smallinit; toy and llm both call it. The backend
(``"cpu"`` or ``"cupy"``) is decided once, at import (``SMALLINIT_BACKEND`` overrides).
Importing it loads NumPy/SciPy only (CuPy is probed unless ``SMALLINIT_BACKEND=cpu``);
torch wrappers live in :mod:`smallinit.kernels.torch_ops`.
"""

from .backend import backend
from .batched import (
    GroupedStep,
    bmm,
    cosine_gram,
    grouped_two_layer_step,
    offsets_from_widths,
)
from .measure import (
    cap_fraction,
    cluster_count,
    cluster_labels,
    condensation_baseline,
    condensation_score,
    effective_rank,
    leading_eigvec_order,
    mean_abs_cosine,
    measure_all,
    relative_distance,
    segment_relative_distance,
    top_singular_share,
)

__all__ = [
    "GroupedStep",
    "backend",
    "bmm",
    "cap_fraction",
    "cluster_count",
    "cluster_labels",
    "condensation_baseline",
    "condensation_score",
    "cosine_gram",
    "effective_rank",
    "grouped_two_layer_step",
    "leading_eigvec_order",
    "mean_abs_cosine",
    "measure_all",
    "offsets_from_widths",
    "relative_distance",
    "segment_relative_distance",
    "top_singular_share",
]
