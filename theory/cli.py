"""``smallinit theory ...``: tables of exact results."""

from __future__ import annotations

from smallinit.cliutil import add_group


def register(subparsers) -> None:
    add_group(
        subparsers,
        "theory",
        help="exact phase diagram, closed forms and the transformer mapping",
        description="Exact results derived with sympy (SPEC §2-§5).",
    )
