"""What a toy run may ask for: scales the float64 engine can hold, and memory estimated
before anything is allocated.

Scales (docs/science.md §2 family β1 = 1, β2 = m^{γ'}, α = β1β2 m^γ): the engine trains the
rescaled model with κ = m^{−γ} and κ' = m^{−γ'} and squares them in its step rule, so each
of α, β2, κ, κ' must lie within [:data:`SCALE_MIN`, :data:`SCALE_MAX`]; outside it a scale
or its square underflows to zero (a network that "converges" with all-zero weights) or
overflows. :func:`check_family_scales` refuses such a point naming γ, γ' and the width.

Memory: :func:`scan_bytes` and :func:`condense_bytes` count the large arrays a run holds at
once (parameters and their working copies per network, the recorded histories, the
condense measures' m × m cosine matrix); the callers hand the figure to
:func:`smallinit.core.memory.check_memory` before the run starts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from smallinit.core.errors import ConfigError

SCALE_MIN = 1e-100
SCALE_MAX = 1e100

#: float64 words per neuron of a network (ā and w̄ = (u, b): d + 2 with d = 1 input).
WORDS_PER_NEURON = 3
#: Working copies of the parameters the engine holds per network (state, initial weights,
#: the next state, gradients, forward activations over the data points, packing slack).
ENGINE_COPIES = 12
FLOAT = 8


def check_family_scales(gamma: float, gamma_prime: float, m: int) -> None:
    """ConfigError unless α = m^{γ+γ'}, β2 = m^{γ'}, κ = m^{−γ} and κ' = m^{−γ'} all lie in
    [SCALE_MIN, SCALE_MAX] (decided on logarithms, so nothing overflows here)."""
    for name, value in (("gamma", gamma), ("gamma_prime", gamma_prime)):
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ConfigError(f"{name}={value!r} is not allowed; it must be a finite number")
    log_m = math.log10(m)
    lo, hi = math.log10(SCALE_MIN), math.log10(SCALE_MAX)
    for what, exponent in (
        ("alpha = m^(gamma+gamma')", gamma + gamma_prime),
        ("beta2 = m^gamma'", gamma_prime),
        ("kappa = m^-gamma", -gamma),
        ("kappa' = m^-gamma'", -gamma_prime),
    ):
        log_value = exponent * log_m
        if not lo <= log_value <= hi:
            raise ConfigError(
                f"gamma={gamma:g}, gamma_prime={gamma_prime:g} at width {m} gives "
                f"{what} = 1e{log_value:+.0f}, outside [{SCALE_MIN:g}, {SCALE_MAX:g}] where "
                "the float64 engine's scales and their squares stay representable; use "
                "smaller |gamma|, |gamma'| or a smaller width"
            )


def network_bytes(m: int) -> float:
    """Bytes the engine holds for one network of width m while it trains."""
    return float(m) * WORDS_PER_NEURON * FLOAT * ENGINE_COPIES


def scan_bytes(
    n_points: int, seeds: int, widths: Sequence[int], n_records: int, grouped: bool = False
) -> float:
    """Peak bytes of a phase scan: the networks trained at once (one width's batch, or every
    width for the grouped engine) plus the result arrays over the whole grid (five scalars
    and two histories of ``n_records`` per network)."""
    batch = float(n_points) * seeds
    per_width = [batch * network_bytes(m) for m in widths]
    training = sum(per_width) if grouped else max(per_width)
    results = batch * len(widths) * (5 + 2 * n_records) * FLOAT
    histories_of_a_batch = batch * 2 * n_records * FLOAT
    return training + results + histories_of_a_batch


def condense_bytes(n_points: int, m: int) -> float:
    """Peak bytes of a condensation grid: every point's network trained at once, then the
    measures' m × m cosine matrix (and its |·| copy) of one network."""
    return float(n_points) * network_bytes(m) + 2.0 * float(m) ** 2 * FLOAT
