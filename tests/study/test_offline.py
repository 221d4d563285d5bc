"""``smallinit data fetch`` builds every corpus a profile's runs read, so that a node without
network finds them built (smallinit.study.offline)."""

from __future__ import annotations

import json
import os

import pytest

from smallinit.cli import main
from smallinit.llm.data import corpus as corpus_mod
from smallinit.study import experiments


def test_fetch_builds_every_corpus_the_profiles_runs_open(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SMALLINIT_CACHE", str(tmp_path / "elsewhere"))
    cache = tmp_path / "cache"
    assert main(["data", "fetch", "--profile", "quick", "--cache", str(cache), "--json"]) == 0
    fetched = json.loads(capsys.readouterr().out)
    assert fetched and all((cache / "corpora" / f["key"] / "meta.json").is_file() for f in fetched)
    # every training run of the plan, listed by the registry itself, reads a fetched corpus
    read = set()
    for experiment in experiments.EXPERIMENTS.values():
        for spec in experiment.specs("quick") + experiment.inner("quick"):
            cfg = spec.config
            if hasattr(cfg, "data") and hasattr(cfg, "model"):
                read.add(corpus_mod.corpus_key(cfg.data, cfg.model.vocab_size))
    assert read and read <= {f["key"] for f in fetched}
    # a second fetch builds nothing: the cached files are opened as they are
    stamps = {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()}
    assert main(["data", "fetch", "--profile", "quick", "--cache", str(cache)]) == 0
    assert {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()} == stamps
    assert not (tmp_path / "elsewhere").exists()  # --cache, not the environment's cache
    assert os.environ["SMALLINIT_CACHE"] == str(cache.resolve())


def test_fetch_refuses_an_unknown_profile(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["data", "fetch", "--profile", "nosuch"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nosuch" in err[0]
