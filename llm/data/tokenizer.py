"""The corpora's tokenizers, both Hugging Face ``tokenizers`` objects (``data.tokenizer``).

* ``bpe``: byte-level BPE (GPT-2 style, Radford et al. 2019). Text is split into pre-tokens
  by the GPT-2 regex (letters, digits, punctuation runs, each with an optional leading
  space), mapped to bytes, and merged by BPE learned on the training split only. Every byte
  is in the base alphabet, so any text encodes; ids fit in uint16.
* ``char``: one token per character (Karpathy's nanoGPT ``shakespeare_char``): the
  characters of the training split, sorted, after ``<|endoftext|>`` and ``<|unk|>`` (a
  held-out character never seen in training). A loss in nats per token is then nats per
  character: divided by ln 2, bits per character, the unit character-level results are
  given in.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from smallinit.core.atomic import atomic_write_text
from smallinit.core.errors import ConfigError, StoreError, one_line

END_OF_TEXT = "<|endoftext|>"
UNKNOWN = "<|unk|>"  # the character tokenizer's token for a character training never saw
#: the tokenizers a corpus can have (``data.tokenizer``)
KINDS = ("bpe", "char")
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


def train_char(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """One token per character of ``texts`` (module docstring); a ConfigError when they
    have more distinct characters than ``vocab_size`` leaves room for (it counts the two
    special tokens)."""
    chars: set[str] = set()
    for text in texts:
        chars.update(text)
    if len(chars) + 2 > vocab_size:
        raise ConfigError(
            f"the training text has {len(chars)} distinct characters; a "
            f"character tokenizer needs model.vocab_size >= {len(chars) + 2} "
            f"(got {vocab_size})"
        )
    vocab = {END_OF_TEXT: 0, UNKNOWN: 1, **{c: i + 2 for i, c in enumerate(sorted(chars))}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNKNOWN))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()  # characters joined as they are, no spaces between
    tok.add_special_tokens([END_OF_TEXT, UNKNOWN])
    return tok


def load_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer saved at ``path``; a damaged file is a :class:`StoreError` naming it and
    the cache folder to delete (the corpus is rebuilt there on the next run)."""
    path = Path(path)
    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises a bare Exception for a damaged file
        raise StoreError(
            f"{path} is damaged ({one_line(err)[:200]}); delete the folder "
            f"{path.parent} and run again to rebuild it"
        ) from None


def cached_tokenizer(
    path: Path, texts: Iterable[str], vocab_size: int, kind: str = "bpe"
) -> Tokenizer:
    """Load the tokenizer at ``path``, or train one of ``kind`` (:data:`KINDS`) on
    ``texts`` and save it there."""
    path = Path(path)
    if path.exists():
        return load_tokenizer(path)
    tok = (train_char if kind == "char" else train_bpe)(texts, vocab_size)
    atomic_write_text(path, tok.to_str())
    return tok


def encode_many(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
    """Token ids of each text (batched in Rust)."""
    return [enc.ids for enc in tok.encode_batch(texts, add_special_tokens=False)]
