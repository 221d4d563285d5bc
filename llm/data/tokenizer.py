"""Byte-level BPE (GPT-2 style, Radford et al. 2019) trained with Hugging Face ``tokenizers``.

Text is split into pre-tokens by the GPT-2 regex (letters, digits, punctuation runs, each
with an optional leading space), mapped to bytes, and merged by BPE learned on the training
split only. Every byte is in the base alphabet, so any text encodes; ids fit in uint16.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from smallinit.core.atomic import atomic_write_text
from smallinit.core.errors import StoreError, one_line

END_OF_TEXT = "<|endoftext|>"
TOKENIZER = "tokenizer.json"  # its file name in a cached corpus and in a trained run


def train_bpe(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """A byte-level BPE with at most ``vocab_size`` tokens (including ``<|endoftext|>``)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def load_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer saved at ``path``; a damaged file is a :class:`StoreError` naming it and
    the cache folder to delete (the corpus is rebuilt there on the next run)."""
    path = Path(path)
    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises a bare Exception for a damaged file
        raise StoreError(f"{path} is damaged ({one_line(err)[:200]}); delete the folder "
                         f"{path.parent} and run again to rebuild it") from None


def cached_bpe(path: Path, texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """Load the tokenizer at ``path``, or train it on ``texts`` and save it there."""
    path = Path(path)
    if path.exists():
        return load_tokenizer(path)
    tok = train_bpe(texts, vocab_size)
    atomic_write_text(path, tok.to_str())
    return tok


def encode_many(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
    """Token ids of each text (batched in Rust)."""
    return [enc.ids for enc in tok.encode_batch(texts, add_special_tokens=False)]
