"""The character-level tokenizer (``data.tokenizer=char``, nanoGPT's ``shakespeare_char``):
one token per character of the training split, decoding gives the text back, a loss per
token is a loss per character; a vocabulary too small is refused in one line; the field
leaves every existing run key alone."""

from __future__ import annotations

import math

import numpy as np
import pytest

from smallinit.core.config import config_to_dict, load_config
from smallinit.core.errors import ConfigError
from smallinit.core.runs import config_key
from smallinit.llm.data import corpus as corpus_mod
from smallinit.llm.data.tokenizer import END_OF_TEXT, train_char
from smallinit.llm.run_config import DataConfig, RunConfig
from smallinit.llm.training.train import KIND, VERSION, train
from tests.llm.test_llm_logging import TINY

TEXT = "".join(
    f"{who}:\nWe are accounted poor citizens, line {i}; the patricians good.\n\n"
    for i, who in enumerate(["First Citizen", "Second Citizen", "MENENIUS"] * 40)
)


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def test_one_token_per_character_and_decoding_gives_the_text_back(text_file, tmp_path):
    cfg = DataConfig(corpus=f"text:{text_file}", tokenizer="char", cache_dir=str(tmp_path))
    corpus = corpus_mod.load(cfg, 64)
    tok = corpus.tokenizer
    chars = sorted(set(TEXT))
    assert corpus.vocab_size == len(chars) + 2 <= 64  # the characters, <|endoftext|>, <|unk|>
    assert [tok.id_to_token(i) for i in range(2, corpus.vocab_size)] == chars
    train_docs, val_docs = corpus_mod.split_documents([TEXT], cfg.val_fraction)
    eot = tok.token_to_id(END_OF_TEXT)
    # the streams: each document's characters, one token each, then <|endoftext|>
    assert len(corpus.train) == sum(len(d) + 1 for d in train_docs)
    assert len(corpus.val) == sum(len(d) + 1 for d in val_docs)
    ends = np.flatnonzero(np.asarray(corpus.val) == eot)
    first = np.asarray(corpus.val[: ends[0]]).tolist()
    assert tok.decode(first) == val_docs[0] and len(first) == len(val_docs[0])
    assert tok.decode(tok.encode("Zé!", add_special_tokens=False).ids) == ""  # unseen: unk
    assert tok.encode("Zé", add_special_tokens=False).tokens == ["<|unk|>", "<|unk|>"]


def test_too_small_a_vocabulary_is_one_line_naming_what_it_needs(text_file, tmp_path):
    need = len(set(TEXT)) + 2
    with pytest.raises(
        ConfigError,
        match=rf"{need - 2} distinct characters; a character "
        rf"tokenizer needs model.vocab_size >= {need} \(got 20\)",
    ):
        train_char([TEXT], 20)
    cfg = DataConfig(corpus=f"text:{text_file}", tokenizer="char", cache_dir=str(tmp_path))
    with pytest.raises(ConfigError, match=f">= {need}"):
        corpus_mod.prepare(cfg, 20)
    with pytest.raises(ConfigError, match="use >= 300, or data.tokenizer=char"):
        corpus_mod.prepare(DataConfig(corpus=f"text:{text_file}", cache_dir=str(tmp_path)), 64)
    with pytest.raises(ConfigError, match="tokenizer"):
        DataConfig(tokenizer="word")


def test_the_field_leaves_existing_run_keys_alone():
    plain = RunConfig()
    assert "tokenizer" not in config_to_dict(plain)["data"]  # at "bpe": out of the key
    char = load_config(RunConfig, None, ["data.tokenizer=char"])
    assert config_to_dict(char)["data"]["tokenizer"] == "char"
    assert config_key(KIND, char, VERSION) != config_key(KIND, plain, VERSION)
    assert config_key(
        KIND, load_config(RunConfig, None, ["data.tokenizer=bpe"]), VERSION
    ) == config_key(KIND, plain, VERSION)


def test_a_character_level_run_trains_and_its_loss_is_per_character(
    text_file, tmp_path, monkeypatch
):
    monkeypatch.delenv("SMALLINIT_TENSORBOARD", raising=False)
    monkeypatch.delenv("SMALLINIT_WANDB", raising=False)
    overrides = [o for o in TINY if not o.startswith(("model.vocab_size", "data.synthetic"))]
    cfg = load_config(
        RunConfig,
        None,
        [
            *overrides,
            "model.vocab_size=64",
            f"data.corpus=text:{text_file}",
            "data.tokenizer=char",
            f"data.cache_dir={tmp_path}",
            "train.steps=8",
            "train.checkpoint_every=0",
            "train.lr=0.01",
        ],
    )
    run = train(cfg, runs_dir=tmp_path / "runs")
    s = run.summary
    uniform = math.log(64)  # an untrained model's loss per character, near
    assert s["val_loss"] < uniform and math.isfinite(s["val_loss"])
    assert s["corpus"]["vocab_size"] == len(set(TEXT)) + 2
