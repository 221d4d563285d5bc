"""RUN references stay in the store; a foreign run's config is not followed."""

import json
import shutil

import pytest

from smallinit.core.errors import ConfigError
from smallinit.core.integrity import build_manifest
from smallinit.core.runs import config_key
from smallinit.llm.training import trained as tr


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A run store with one tiny trained run (synthetic corpus, a few seconds on CPU)."""
    from smallinit.core.config import load_config
    from smallinit.llm.run_config import RunConfig
    from smallinit.llm.training.train import train

    base = tmp_path_factory.mktemp("refs")
    mp = pytest.MonkeyPatch()
    mp.setenv("SMALLINIT_CACHE", str(base / "cache"))
    mp.setenv("SMALLINIT_QUIET", "1")
    cfg = load_config(
        RunConfig,
        None,
        [
            "model.d_model=32",
            "model.n_layers=1",
            "model.n_heads=2",
            "model.vocab_size=320",
            "model.context=64",
            "train.steps=4",
            "train.batch_size=4",
            "data.synthetic_items=100",
            "data.synthetic_val_items=20",
            "train.eval_every=0",
            "train.checkpoint_every=0",
            "eval.answer_items=4",
            "eval.token_windows=2",
        ],
    )
    run = train(cfg, runs_dir=base / "runs")
    assert run.done
    yield base, run
    mp.undo()


def _foreign_copy(store, tmp_path, edit=None):
    """The run copied outside the store, its config edited by ``edit`` and re-keyed, as
    someone handing over a run directory could."""
    base, run = store
    meta = json.loads((run.path / "config.json").read_text())
    if edit:
        edit(meta["config"])
    meta["key"] = config_key("llm-train", meta["config"], meta["version"])
    dest = tmp_path / "downloaded" / meta["key"]
    shutil.copytree(run.path, dest)
    (dest / "config.json").write_text(json.dumps(meta))
    status = json.loads((dest / "status.json").read_text())
    status["manifest"] = build_manifest(dest)  # consistent, as the maker's store wrote it
    (dest / "status.json").write_text(json.dumps(status))
    return dest


@pytest.mark.parametrize(
    "ref", ["*", "..", "../llm-train", "a*", "[0-9]*", "llm-train/*", "ABC", "0123456789abcdef0"]
)
def test_key_references_are_hex_prefixes_never_patterns(store, ref):
    base, _ = store
    with pytest.raises(ConfigError, match="matches no run: it is neither a run directory"):
        tr.resolve_run(ref, base / "runs")


def test_key_prefix_and_kind_key_resolve_inside_the_store(store):
    base, run = store
    for ref in (run.key[:5], f"llm-train/{run.key}", str(run.path)):
        found = tr.resolve_run(ref, base / "runs")
        assert found.path.resolve() == run.path.resolve() and found.in_store
        assert found.store_root == base / "runs"


def test_run_directory_must_be_a_valid_run(store, tmp_path):
    base, run = store
    copy = tmp_path / "copy" / run.key
    shutil.copytree(run.path, copy)
    meta = json.loads((copy / "config.json").read_text())
    meta["config"]["data"]["corpus"] = "text:/etc/passwd"  # edited, key kept
    (copy / "config.json").write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match="does not hash to its key"):
        tr.resolve_run(str(copy), base / "runs")
    renamed = tmp_path / "copy" / "0000000000000000"
    shutil.copytree(run.path, renamed)
    with pytest.raises(ConfigError, match="names key"):
        tr.resolve_run(str(renamed), base / "runs")


def test_foreign_run_results_go_to_the_store(store, tmp_path):
    from smallinit.llm.downstream.run import benchmark

    base, _ = store
    foreign = _foreign_copy(store, tmp_path)
    found = tr.resolve_run(str(foreign), base / "runs")
    assert not found.in_store and found.store_root == base / "runs"
    data = tmp_path / "bench"
    data.mkdir()
    (data / "arc_easy.jsonl").write_text(
        json.dumps({"id": "a", "query": "Q:", "choices": [" x", " y"], "gold": 0}) + "\n"
    )
    (bench_run,) = benchmark(
        str(foreign), ["arc_easy"], runs_dir=base / "runs", data_dir=data, fetch=False
    )
    assert bench_run.done and bench_run.path.parent == base / "runs" / "llm-downstream"
    assert sorted(p.name for p in foreign.parent.iterdir()) == [foreign.name]  # nothing beside


def test_foreign_run_naming_a_file_corpus_is_refused_unless_trusted(store, tmp_path):
    base, _ = store
    secret = tmp_path / "secret.txt"
    secret.write_text("".join(f"line {i} of a private file\n" for i in range(400)))

    def point_at_secret(cfg):
        cfg["data"]["corpus"] = f"text:{secret}"
        cfg["data"]["cache_dir"] = str(tmp_path / "written-here")

    foreign = tr.resolve_run(str(_foreign_copy(store, tmp_path, point_at_secret)), base / "runs")
    with pytest.raises(ConfigError) as err:
        tr.evaluate_run(foreign, n_items=0)
    assert f"data.corpus='text:{secret}'" in str(err.value)
    assert "--trust-run-data" in str(err.value)
    assert not (tmp_path / "written-here").exists()
    metrics = tr.evaluate_run(foreign, n_items=0, trust_data=True)  # the user vouches for it
    assert metrics and (tmp_path / "written-here").exists()


def test_foreign_run_cache_dir_is_ignored(store, tmp_path):
    base, _ = store

    def elsewhere(cfg):
        cfg["data"]["cache_dir"] = str(tmp_path / "written-here")

    foreign = tr.resolve_run(str(_foreign_copy(store, tmp_path, elsewhere)), base / "runs")
    assert tr.evaluate_run(foreign, n_items=0)
    assert not (tmp_path / "written-here").exists()


def test_trust_flag_is_offered_by_eval_and_benchmark():
    from smallinit.cli import build_parser

    parser = build_parser()
    for argv in (["llm", "eval", "abc"], ["llm", "downstream", "abc"]):
        assert parser.parse_args(argv).trust_run_data is False
        assert parser.parse_args([*argv, "--trust-run-data"]).trust_run_data is True
