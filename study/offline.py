"""Everything a profile downloads, fetched ahead, so a node without network can run it.

A compute node of a cluster, or the lent GPU machine, often reaches no network: a profile
that trains on Shakespeare would stop there at its first run. :func:`fetch` builds, into the
corpus cache (``$SMALLINIT_CACHE``, else ``~/.cache/smallinit``), every distinct corpus the
profile's training runs read (:func:`smallinit.study.preflight.corpora`): the pinned source
file is downloaded and checked (:mod:`smallinit.core.downloads`), the tokenizer trained and
the token streams written, exactly as the first run would. Copy that folder to the node and
point ``$SMALLINIT_CACHE`` at it: the runs find their corpora built and fetch nothing.
The anchor task and the synthetic corpus are generated, not downloaded; the synthetic one is
built too, so the node does not spend its time on it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from smallinit.core.errors import ConfigError
from smallinit.llm.data import corpus as corpus_mod
from smallinit.study import preflight


@dataclass(frozen=True)
class Fetched:
    """One corpus of the profile, built in the cache."""

    corpus: str  # data.corpus, e.g. "shakespeare"
    key: str  # the corpus key (its folder's name)
    vocab_size: int
    folder: Path


def fetch(profile: str, figures: list[int] | None = None) -> list[Fetched]:
    """Build every corpus that ``profile``'s runs (of ``figures``, default all) read, into
    the corpus cache; a corpus already built is checked by opening it."""
    specs, failed = preflight.profile_specs(profile, figures)
    for check in failed:  # an experiment whose runs cannot be listed
        raise ConfigError(f"{check.name}: {check.detail}")
    out = []
    for key, (data, vocab) in preflight.corpora(specs).items():
        corpus_mod.load(data, vocab)  # builds it once, then opens (and so checks) it
        out.append(Fetched(data.corpus, key, vocab, corpus_mod.prepare(data, vocab)))
    return out
