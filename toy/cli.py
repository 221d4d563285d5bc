"""``smallinit toy ...``: two-layer simulations."""

from __future__ import annotations

from smallinit.cliutil import add_group


def register(subparsers) -> None:
    add_group(
        subparsers,
        "toy",
        help="two-layer simulations: phase scan, condensation, lazy vs rich",
        description="Two-layer network simulations in JAX (SPEC §2-§4).",
    )
