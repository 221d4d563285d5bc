"""smallinit.kernels: CuPy kernels with CPU fallbacks, and the shared measurements.

This package imports nothing else of smallinit; toy and llm both call it. The backend
(``"cpu"`` or ``"cupy"``) is decided once, at import (``SMALLINIT_BACKEND`` overrides).
Importing it loads NumPy/SciPy only (CuPy is probed unless ``SMALLINIT_BACKEND=cpu``).
Torch tensors are accepted everywhere; CUDA tensors reach the CuPy kernels through DLPack.
"""

from .backend import backend
from .batched import (
    GroupedStep,
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
from .stack import condensation_scores, measure_stack

__all__ = [
    "GroupedStep",
    "backend",
    "cap_fraction",
    "cluster_count",
    "cluster_labels",
    "condensation_baseline",
    "condensation_score",
    "condensation_scores",
    "cosine_gram",
    "effective_rank",
    "grouped_two_layer_step",
    "leading_eigvec_order",
    "mean_abs_cosine",
    "measure_all",
    "measure_stack",
    "offsets_from_widths",
    "relative_distance",
    "segment_relative_distance",
    "top_singular_share",
]
