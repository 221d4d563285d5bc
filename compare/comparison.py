"""What ``smallinit compare`` runs: γ values, transformer widths, the base LLM run, the toy.

For every γ the transformer is trained at each width d_model with d_ff = r·d_model (``ffn_ratio``
r, proportional widths, so theory's FFN map gives (γ, γ') = (2γ, 0), docs/science.md §5), the same
number of layers, context, steps and batch (a fixed token budget: steps·batch·context tokens
at every width), and the init ``gamma:<γ>`` in its canonical spelling (``gamma:1``, not
``gamma:1.0``). Attention heads keep ``head_dim`` as the width grows (n_heads =
d_model / head_dim, at least 1).

Profiles: ``quick`` is sized for a few CPU minutes on 2 cores (measured: one training step
at d_model = 32/64/128/256/512, 2 layers, context 64, batch 16, one thread takes about
0.04/0.06/0.15/0.4/1.4 s on a loaded machine, so widths up to 512 at a few hundred steps
take most of an hour; the quick widths stop at 128). ``full`` is GPU scale. Both are the
``[compare]`` table of ``core/profiles/<profile>.toml``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from smallinit.core import profiles
from smallinit.core.config import MAX_STEPS, check_fields, override
from smallinit.core.errors import ConfigError, require
from smallinit.llm.run_config import RunConfig
from smallinit.theory.init_rules import gamma_scheme

SECTION = "compare"  # the profiles' table of the comparison (core/profiles/*.toml)


def default_llm() -> RunConfig:
    """The base transformer run of a comparison (``CompareConfig.llm``'s default; d_model,
    d_ff, n_heads and init are set per point): 240 AdamW steps of 16 sequences of 64
    tokens, held-out loss at the end only. A profile's ``[compare.llm]`` is an overlay on the
    plain RunConfig defaults (:func:`profile_config`), not on this."""
    return override(
        RunConfig(),
        {
            "seed": 0,
            "model": {
                "vocab_size": 512,
                "context": 64,
                "d_model": 64,
                "n_layers": 2,
                "n_heads": 2,
                "mlp": "gelu",
            },
            "data": {"synthetic_items": 10000, "synthetic_val_items": 500, "synthetic_facts": 100},
            "train": {
                "steps": 240,
                "batch_size": 16,
                "lr": 3e-3,
                "warmup": 24,
                "weight_decay": 0.1,
                "threads": 1,
                "log_every": 20,
                "eval_every": 0,
                "eval_batches": 4,
                "checkpoint_every": 80,
            },
            "eval": {"answer_items": 0, "token_windows": 4},
        },
    )


@dataclass
class CompareConfig:
    """One comparison: theory, toy and transformer at every γ (module docstring)."""

    # the defaults live here; a profile's [compare] table is an overlay on them
    gammas: tuple[float, ...] = (0.3, 0.5, 0.75, 1.0, 1.25)
    widths: tuple[int, ...] = (32, 64, 128)  # d_model
    ffn_ratio: int = 4  # d_ff = ffn_ratio · d_model
    head_dim: int = 32
    llm: RunConfig = field(default_factory=default_llm)
    toy_widths: tuple[int, ...] = (250, 500, 1000)
    toy_seeds: int = 3
    toy_max_steps: int = 20000
    condense_width: int = 1000
    critical_tol: float = 0.15  # |S_w| within this counts as critical (as in the toy scan)
    top_k: int = 4  # condensation score: amplitude share of the top_k heaviest clusters
    threshold: float = 0.95  # cosine threshold of an orientation cluster

    def __post_init__(self) -> None:
        check_fields(self, bounds={"toy_max_steps": (1, MAX_STEPS)})
        require(len(self.gammas) > 0, "gammas is empty; give at least one γ")
        require(
            len(set(self.gammas)) == len(self.gammas), f"gammas={list(self.gammas)} has duplicates"
        )
        for g in self.gammas:
            require(
                math.isfinite(g) and 0 < g <= 2,
                f"gamma {g} is not allowed; use values in (0, 2] (the toy runs at 2γ ≤ 4)",
            )
        require(
            len(self.widths) >= 2,
            f"widths={list(self.widths)} needs at least two widths to fit a slope",
        )
        require(
            len(set(self.widths)) == len(self.widths), f"widths={list(self.widths)} has duplicates"
        )
        require(self.ffn_ratio >= 1, f"ffn_ratio={self.ffn_ratio} must be >= 1")
        require(
            self.head_dim >= 2 and self.head_dim % 2 == 0,
            f"head_dim={self.head_dim} is not allowed; it must be even and >= 2 (RoPE)",
        )
        for w in self.widths:
            heads = n_heads(w, self.head_dim)
            require(
                w >= 2 and w % heads == 0 and (w // heads) % 2 == 0,
                f"width {w} is not allowed; its {heads} heads (width // head_dim="
                f"{self.head_dim}) need an even head dimension that divides it; use a "
                "multiple of head_dim",
            )
        require(self.toy_seeds >= 1, f"toy_seeds={self.toy_seeds} must be >= 1")
        require(
            self.condense_width >= 2 and self.condense_width % 2 == 0,
            f"condense_width={self.condense_width} must be even and >= 2 (ASI)",
        )
        require(self.critical_tol > 0, f"critical_tol={self.critical_tol} must be > 0")
        require(self.top_k >= 1, f"top_k={self.top_k} must be >= 1")
        require(-1 < self.threshold <= 1, f"threshold={self.threshold} must be in (-1, 1]")

    def ffn_widths(self) -> list[int]:
        """The FFN widths m = d_ff = r·d_model, the axis of the slope fits."""
        return [self.ffn_ratio * w for w in self.widths]

    def llm_run(self, gamma: float, width: int) -> RunConfig:
        """The transformer run at (γ, d_model): the base run with its width, heads, d_ff
        and init ``gamma:<γ>``."""
        try:
            return override(
                self.llm,
                {
                    "model.d_model": width,
                    "model.d_ff": self.ffn_ratio * width,
                    "model.n_heads": n_heads(width, self.head_dim),
                    "init": gamma_scheme(float(gamma)),
                },
            )
        except ValueError as err:
            raise ConfigError(f"transformer at γ={gamma}, d_model={width}: {err}") from None


def n_heads(width: int, head_dim: int) -> int:
    """Heads at this width: width // head_dim, at least 1."""
    return max(1, width // head_dim)


def profile_config(profile: str) -> CompareConfig:
    """The comparison of a profile's ``[compare]`` table (``quick``: CPU minutes; ``full``:
    GPU scale). Its ``[compare.llm]`` run is laid over the plain RunConfig defaults."""
    table = profiles.section(profile, SECTION)
    neutral = CompareConfig(llm=RunConfig())
    return override(neutral, table, where=f"{profile}.{SECTION}")
