"""``smallinit llm ...``: transformer pretraining under the γ rule."""

from __future__ import annotations

from smallinit.cliutil import add_group


def register(subparsers) -> None:
    add_group(
        subparsers,
        "llm",
        help="transformer pretraining with the γ-initialization rule",
        description="Decoder-only transformers, init schemes, training and analysis "
        "(SPEC §1, §5, §6).",
    )
