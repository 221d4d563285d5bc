"""Bad input on the llm side and in compare: every case is one ConfigError / StoreError
naming the value and what is allowed, raised before anything large is built, and a config
error leaves no run directory behind."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from smallinit.core.config import load_config
from smallinit.core.errors import ConfigError, CorruptRun, StoreError
from smallinit.core.runs import config_key
from smallinit.llm.model.init import apply_init, init_table
from smallinit.llm.model.transformer import Transformer, meta_transformer
from smallinit.llm.run_config import ModelConfig, RunConfig
from smallinit.llm.training import memory
from smallinit.llm.training.train import train

TINY = [
    "model.d_model=16",
    "model.n_layers=1",
    "model.n_heads=2",
    "model.context=16",
    "model.vocab_size=300",
    "train.steps=4",
    "train.log_every=2",
    "train.checkpoint_every=0",
    "train.eval_every=0",
    "train.warmup=0",
    "train.batch_size=4",
    "train.threads=1",
    "data.synthetic_items=200",
    "data.synthetic_val_items=50",
    "eval.answer_items=4",
    "eval.token_windows=2",
]


def tiny(cache, *extra: str) -> RunConfig:
    return load_config(RunConfig, None, [*TINY, f"data.cache_dir={cache}", *extra])


def as_stored_before_manifests(folder: Path) -> None:
    """Drop the manifest from a run's status.json, as runs stored before manifests have
    none: then what a reader finds in the damaged file itself is what gets reported."""
    status = json.loads((folder / "status.json").read_text())
    del status["manifest"]
    (folder / "status.json").write_text(json.dumps(status))


def run_dirs(root: Path) -> list[Path]:
    base = root / "llm-train"
    return sorted(base.iterdir()) if base.is_dir() else []


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny finished run in its own store, and its corpus cache."""
    root = tmp_path_factory.mktemp("bad-llm")
    cache = root / "cache"
    run = train(tiny(cache), runs_dir=root / "runs")
    assert run.state == "done"
    return run, cache


# ----------------------------------------------------------------------------- estimates
@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"mlp": "gelu", "tie_embeddings": True, "positions": "learned"},
        {"gated_attention": True},
        {"gated_attention": True, "gate_kind": "headwise"},
        {"d_ff": 40, "n_layers": 3},
    ],
)
def test_param_count_is_the_models(extra):
    cfg = ModelConfig(
        **{"d_model": 32, "n_heads": 4, "n_layers": 2, "vocab_size": 300, "context": 16, **extra}
    )
    assert memory.param_count(cfg) == Transformer(cfg).num_params()


def test_training_estimate_grows_as_its_formula_says():
    base = ModelConfig(d_model=64, n_heads=4, n_layers=2, vocab_size=512, context=32)
    one = memory.training_bytes(base, 8)
    two = memory.training_bytes(base, 16)
    # doubling the batch doubles the activations and token ids, not the 16 bytes/parameter
    per_seq = (two - one) / 8
    fixed = one - 8 * per_seq
    assert fixed == pytest.approx(16 * memory.param_count(base) + memory.rope_bytes(base))
    t = base.context
    assert per_seq == pytest.approx(
        4 * t * ((12 * 64 + 4 * base.ffn_dim) * 2 + 3 * 512) + 16 * (t + 1)
    )


def test_memory_limit_refuses_naming_the_sizes(monkeypatch, tmp_path):
    monkeypatch.setenv("SMALLINIT_MEMORY_LIMIT", "1M")
    cfg = tiny(tmp_path / "cache", "model.d_model=64", "model.n_heads=2")
    with pytest.raises(ConfigError, match=r"model\.d_model=64.*needs about .* limit of 1\.0 MiB"):
        memory.check_training_memory(cfg)
    with pytest.raises(ConfigError, match="needs about"):
        train(cfg, runs_dir=tmp_path / "runs")
    assert run_dirs(tmp_path / "runs") == []


@pytest.mark.parametrize(
    "override",
    [
        "model.d_model=1000000",
        "model.d_ff=1000000000",
        "train.batch_size=100000000",
        "model.context=10000000",
        "model.n_layers=1000000",
    ],
)
def test_huge_configs_are_refused_before_anything_is_built(override, tmp_path):
    with pytest.raises(ConfigError, match=override.replace(".", r"\.") + ".*needs about"):
        train(load_config(RunConfig, None, [override]), runs_dir=tmp_path)
    assert run_dirs(tmp_path) == []


# ----------------------------------------------------------------------------- config errors
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("init=gamma:1e308", r"matrix tok_emb\.weight: init gamma:.*1e\+308 gives σ=0"),
        ("data.corpus=text:/no/such/file.txt", r"text:/no/such/file\.txt: no such file"),
    ],
)
def test_config_errors_leave_no_run_directory(extra, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        train(tiny(tmp_path / "cache", extra), runs_dir=tmp_path / "runs")
    assert run_dirs(tmp_path / "runs") == []


def test_apply_init_rejects_what_it_cannot_use():
    model = Transformer(ModelConfig(d_model=16, n_heads=2, vocab_size=64, context=8, n_layers=1))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ConfigError, match=r"init scheme None .*give a string such as"):
        apply_init(model, None)
    for scheme in ("gamma:1e308", "gamma:-1e308"):
        with pytest.raises(
            ConfigError,
            match=r"matrix tok_emb\.weight: init gamma:.*1e\+308 "
            r"gives σ=(0|inf)",
        ):
            apply_init(model, scheme)
    # every σ is checked before the first draw: a refused scheme leaves the weights alone
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])
    with pytest.raises(ConfigError, match="supported: smallinit.llm Transformer"):
        apply_init(torch.nn.Conv2d(3, 3, 3), "gamma:1")
    with pytest.raises(ConfigError, match="is not known; choose one of gamma"):
        apply_init(model, "bogus:1")


def _hf_llama(cfg: ModelConfig):
    from smallinit.llm.model.hf import llama_from

    return llama_from(cfg)


SMALL = ModelConfig(d_model=16, n_heads=2, vocab_size=64, context=8, n_layers=1)


@pytest.mark.parametrize("build", [meta_transformer, _hf_llama], ids=["ours", "llama"])
def test_apply_init_refuses_a_model_without_storage(build):
    """On the meta device nothing can be drawn: a refusal naming a parameter, and no scheme
    recorded as if it had been."""
    from smallinit.llm.model.init import recorded_scheme

    with torch.device("meta"):
        model = build(SMALL)
    with pytest.raises(
        ConfigError,
        match=r"parameter \S+ \(and \d+ more\) of \w+ is on the "
        r"meta device .* model\.to_empty\(device='cpu'\)",
    ):
        apply_init(model, "gamma:0.5")
    assert recorded_scheme(model) is None
    model.to_empty(device="cpu")  # the advice works
    apply_init(model, "gamma:0.5", seed=0)
    assert recorded_scheme(model) == "gamma:0.5"


@pytest.mark.parametrize(
    ("build", "head", "embedding"),
    [
        (Transformer, "head.weight", "tok_emb.weight"),
        (_hf_llama, "lm_head.weight", "model.embed_tokens.weight"),
    ],
    ids=["ours", "llama"],
)
def test_apply_init_refuses_a_head_override_on_a_tied_head(build, head, embedding):
    """A tied head is the embedding matrix, drawn once with the embedding's σ: a head=
    override could only be recorded, never drawn, so it is refused before any draw."""
    from smallinit.llm.model.init import recorded_scheme

    tied = build(ModelConfig(**{**SMALL.__dict__, "tie_embeddings": True}))
    before = {k: v.clone() for k, v in tied.state_dict().items()}
    with pytest.raises(
        ConfigError,
        match=(
            rf"init 'gamma:0\.5,head=2' sets the head's γ \(head=2\), but the LM head of "
            rf"\w+ \({re.escape(head)}\) is tied to the embedding {re.escape(embedding)}: one "
            r"matrix, drawn once as the embedding; drop head= or untie the head"
        ),
    ):
        apply_init(tied, "gamma:0.5,head=2")
    assert recorded_scheme(tied) is None
    assert all(torch.equal(v, before[k]) for k, v in tied.state_dict().items())
    # untied, the override is drawn: the head's σ is d_model^-2, the embedding's d^-0.5
    untied = apply_init(build(SMALL), "gamma:0.5,head=2", seed=0)
    weight = dict(untied.named_parameters())[head]
    # 1024 draws: the sample std lies within 10% of σ (about 4.5 standard errors)
    assert float(weight.detach().std()) == pytest.approx(16**-2, rel=0.1)


def test_a_head_override_on_a_tied_run_leaves_no_run_directory(tmp_path):
    with pytest.raises(ConfigError, match=r"is tied to the embedding tok_emb\.weight"):
        train(
            tiny(tmp_path / "cache", "model.tie_embeddings=true", "init=gamma:0.5,head=1"),
            runs_dir=tmp_path / "runs",
        )
    assert run_dirs(tmp_path / "runs") == []


def test_init_table_of_a_huge_model_reads_shapes_only():
    cfg = ModelConfig(d_model=1_000_000, n_heads=1000)
    model = meta_transformer(cfg)
    assert all(p.device.type == "meta" for p in model.parameters())
    rows = init_table(model, "gamma:0.5")
    emb = next(r for r in rows if r["name"] == "tok_emb.weight")
    assert emb["std"] == pytest.approx(1_000_000**-0.5)
    assert emb["gamma_eff"] == pytest.approx(0.5)


def test_anchor_gamma_must_be_positive():
    from smallinit.llm.training.anchor import AnchorConfig
    from smallinit.study.experiments.anchor_scan import cell_config

    for gamma in (-1.0, 0.0, float("inf"), float("nan")):
        with pytest.raises(ConfigError, match=r"γ must be a finite number > 0"):
            cell_config(AnchorConfig(), gamma=gamma)


def test_compare_refuses_huge_widths_before_training(tmp_path):
    from smallinit.compare.comparison import CompareConfig
    from smallinit.compare.run import run_compare
    from smallinit.core.store import RunStore

    cfg = CompareConfig(widths=(1_000_000, 2_000_000))
    with pytest.raises(ConfigError, match=r"model\.d_model=2000000.*needs about"):
        run_compare(cfg, RunStore(tmp_path))
    assert not any(tmp_path.rglob("config.json"))


# ----------------------------------------------------------------------------- stored runs
@pytest.mark.parametrize("name", ["model.safetensors", "model.pt"])
def test_damaged_weights_are_a_store_error(trained, tmp_path, name):
    """Damaged final weights: model.safetensors, or model.pt of a run from before the
    safetensors file was written."""
    from smallinit.llm.training.trained import load_trained

    run, _ = trained
    copy = tmp_path / run.key
    shutil.copytree(run.path, copy)
    weights = copy / name
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 3])
    if name == "model.safetensors":  # its manifest tells first
        with pytest.raises(CorruptRun, match=rf"{weights} is [0-9,]+ bytes, its manifest says"):
            load_trained(copy)
    else:
        (copy / "model.safetensors").unlink()
    as_stored_before_manifests(copy)
    with pytest.raises(StoreError, match=rf"{weights} cannot be read .*damaged"):
        load_trained(copy)


def test_flipped_bytes_in_the_weights_are_named_not_evaluated(trained, tmp_path):
    """Same size, other bytes (the header intact): the manifest's SHA-256 tells, before any
    loss is computed from them."""
    from smallinit.llm.training.trained import load_trained

    run, _ = trained
    copy = tmp_path / run.key
    shutil.copytree(run.path, copy)
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-64:] = bytes(b ^ 0xFF for b in data[-64:])
    weights.write_bytes(bytes(data))
    with pytest.raises(CorruptRun, match=rf"{weights} does not match its manifest"):
        load_trained(copy)


def test_a_full_disk_while_the_weights_are_written_names_the_file(
    trained, tmp_path, monkeypatch, capsys
):
    """safetensors reports the failed write as its own error; the run is recorded as failed
    (retried next time) and the command prints one line naming the file."""
    from safetensors import SafetensorError

    from smallinit.cli import main
    from smallinit.llm.training import checkpoint

    _, cache = trained

    def no_space(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error")

    monkeypatch.setattr(checkpoint, "save_file", no_space)
    real_usage = shutil.disk_usage
    monkeypatch.setattr(
        checkpoint.shutil,
        "disk_usage",  # full once the run has begun
        lambda p: real_usage(p)._replace(
            free=4096 if "llm-train" in str(p) else real_usage(p).free
        ),
    )
    store = tmp_path / "runs"
    assert main(["llm", "train", *TINY, f"data.cache_dir={cache}", "--runs-dir", str(store)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    [folder] = run_dirs(store)
    assert err[-1] == (
        f"smallinit: error: cannot use {folder / 'model.safetensors'}: No space "
        "left on device (the disk is full)"
    )
    status = json.loads((folder / "status.json").read_text())
    assert status["state"] == "failed" and not status["final"]
    assert not list(folder.glob(".*.tmp"))


class FullDisk:
    """A file object of :mod:`smallinit.core.atomic` on a disk with no space left: every
    write raises ENOSPC, without a file name (as ``write(2)`` reports it)."""

    def __init__(self, fd, *args, **kwargs):
        os.close(fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def write(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_under_every_atomic_write_is_one_line_naming_the_file(
    trained, tmp_path, monkeypatch, capsys
):
    """The lowest write helper (atomic_write_bytes) on a full disk: the run store's first
    file of a new run fails, and the command prints one line naming it; nothing half
    written is left."""
    from smallinit.cli import main
    from smallinit.core import atomic

    _, cache = trained
    monkeypatch.setattr(atomic, "os", SimpleNamespace(**{**vars(os), "fdopen": FullDisk}))
    store = tmp_path / "runs"
    assert (
        main(["llm", "train", *TINY, f"data.cache_dir={cache}", "--runs-dir", str(store), "seed=7"])
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.fullmatch(
        rf"smallinit: error: cannot use {re.escape(str(store))}/llm-train/[0-9a-f]{{16}}/"
        r"\S+\.json: No space left on device \(the disk is full\)",
        err[0],
    ), err
    assert not [p for p in store.rglob("*") if p.name.endswith(".tmp")]


@pytest.mark.parametrize("where", ["safetensors", "config"])
def test_a_full_disk_during_export_is_one_line_naming_out(
    trained, tmp_path, monkeypatch, capsys, where
):
    """``llm export`` on a full disk: safetensors reports the failed write as its own
    SafetensorError (the disk nearly full then), transformers as an OSError without a file
    name. Either way one line names OUT, and neither OUT nor a temporary folder is left."""
    import transformers
    from safetensors import SafetensorError

    from smallinit.cli import main
    from smallinit.llm.model import export

    run, _ = trained
    if where == "safetensors":

        def no_space(*args, **kwargs):
            raise SafetensorError("Error while serializing: I/O error")

        monkeypatch.setattr(export, "save_file", no_space)
        real_usage = shutil.disk_usage
        monkeypatch.setattr(shutil, "disk_usage", lambda p: real_usage(p)._replace(free=4096))
    else:

        def no_space(self, *args, **kwargs):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(transformers.PretrainedConfig, "save_pretrained", no_space)
    out = tmp_path / "exported"
    assert (
        main(["llm", "export", str(run.path), str(out), "--runs-dir", str(run.path.parents[1])])
        == 2
    )
    assert capsys.readouterr().err.strip().splitlines() == [
        f"smallinit: error: cannot use {out}: No space left on device (the disk is full)"
    ]
    assert list(tmp_path.iterdir()) == []


def test_a_run_that_cannot_fit_the_disk_is_refused_before_it_starts(trained, tmp_path, monkeypatch):
    from smallinit.llm.training import checkpoint

    _, cache = trained
    real_usage = shutil.disk_usage
    monkeypatch.setattr(
        checkpoint.shutil, "disk_usage", lambda p: real_usage(p)._replace(free=10_000)
    )
    with pytest.raises(
        StoreError,
        match=r"has 9\.8 KiB free; the run to be computed there "
        r"needs about [0-9.]+ KiB \(weights and checkpoints\)",
    ):
        train(tiny(cache, "train.checkpoint_every=2"), runs_dir=tmp_path / "runs")
    assert run_dirs(tmp_path / "runs") == []


def test_weights_that_do_not_match_the_config(trained, tmp_path):
    """A run directory whose config (consistently re-keyed) describes another model."""
    from smallinit.llm.training.trained import evaluate_run, resolve_run

    run, _ = trained
    meta = json.loads((run.path / "config.json").read_text())
    meta["config"]["model"]["d_model"] = 32
    meta["key"] = config_key("llm-train", meta["config"], str(meta["version"]))
    store = tmp_path / "runs"
    copy = store / "llm-train" / meta["key"]
    shutil.copytree(run.path, copy)
    (copy / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CorruptRun, match=r"config\.json is [0-9,]+ bytes, its manifest says"):
        evaluate_run(resolve_run(str(copy), store))
    as_stored_before_manifests(copy)
    with pytest.raises(
        StoreError,
        match=r"model\.safetensors does not match its config\.json: "
        r"tok_emb\.weight has shape \(300, 16\), "
        r"the config gives \(300, 32\)",
    ):
        evaluate_run(resolve_run(str(copy), store))


def test_damaged_tokenizer_names_the_folder_to_delete(trained):
    from smallinit.llm.data import corpus as corpus_mod

    _, cache = trained
    data = tiny(cache).data  # the corpus the run was trained on
    folder = corpus_mod.prepare(data, 300)
    tok = folder / "tokenizer.json"
    good = tok.read_text()
    tok.write_text('{"model": ')
    with pytest.raises(StoreError, match=rf"{tok} is damaged .*delete the folder {folder}"):
        corpus_mod.load(data, 300)
    shutil.rmtree(folder)  # the advice works: the corpus is rebuilt, the same as before
    corpus = corpus_mod.load(data, 300)
    assert (folder / "tokenizer.json").read_text() == good
    assert len(corpus.train) > 0


# ----------------------------------------------------------------------------- benchmarks
def test_benchmark_device_is_checked():
    from smallinit.llm.downstream.run import check_device

    check_device("cpu")
    with pytest.raises(ConfigError, match=r"--device 'bogus' is not a torch device"):
        check_device("bogus")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA device is available"):
            check_device("cuda")
    if not torch.backends.mps.is_available():
        with pytest.raises(
            ConfigError,
            match=r"--device 'mps': this torch build or machine "
            r"has no MPS \(Apple GPU\) device; use cpu",
        ):
            check_device("mps")


def test_benchmark_line_limit(tmp_path, monkeypatch):
    from smallinit.llm.downstream import tasks

    path = tmp_path / "arc_easy.jsonl"
    ok = json.dumps({"query": "q", "choices": ["a", "b"], "gold": 0})
    path.write_text(
        ok + "\n" + json.dumps({"query": "x" * 500, "choices": ["a", "b"], "gold": 0}) + "\n"
    )
    monkeypatch.setattr(tasks, "MAX_LINE_CHARS", 200)
    with pytest.raises(ConfigError, match=rf"{path}:2: the line is longer than 200"):
        tasks.read_jsonl_items(path, tasks.task_spec("arc_easy"))
    path.write_text(ok + "\n")
    assert len(tasks.read_jsonl_items(path, tasks.task_spec("arc_easy"))) == 1


def test_bootstrap_estimate_before_reading_runs():
    from smallinit.llm.downstream.report import compare_runs

    with pytest.raises(ConfigError, match=r"--bootstrap 1000000000000 .*needs about"):
        compare_runs("nope-a", "nope-b", n_boot=10**12)


def test_init_table_refuses_millions_of_layers():
    from smallinit.llm.training.trained import MAX_TABLE_LAYERS, build_for_table

    with pytest.raises(ConfigError, match=r"model\.n_layers=1000000 is too deep .* at most"):
        build_for_table(ModelConfig(n_layers=1_000_000), "ours")
    assert len(build_for_table(ModelConfig(n_layers=3), "ours").blocks) == 3
    assert MAX_TABLE_LAYERS >= 1000


def test_cli_damaged_run_files_exit_2_on_one_line(trained, tmp_path, capsys, monkeypatch):
    """``llm eval`` on a run in the store whose model.safetensors is cut short, then on a
    cache whose tokenizer is damaged: exit status 2, one line naming the file."""
    from smallinit.cli import main

    run, cache = trained
    store = tmp_path / "runs"
    copy = store / "llm-train" / run.key
    shutil.copytree(run.path, copy)
    weights = copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    assert main(["llm", "eval", str(copy), "--runs-dir", str(store)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{weights} is 100 bytes, its manifest says" in err[0]

    shutil.copy2(run.path / "model.safetensors", weights)
    as_stored_before_manifests(copy)  # the re-keyed config below is then what it says
    bad_cache = tmp_path / "cache"
    shutil.copytree(cache, bad_cache)
    for tok in bad_cache.rglob("tokenizer.json"):
        tok.write_text("{")
    cfg = json.loads((copy / "config.json").read_text())
    assert cfg["config"]["data"]["cache_dir"] == str(cache)
    cfg["config"]["data"]["cache_dir"] = None  # read the cache from $SMALLINIT_CACHE
    key = config_key("llm-train", cfg["config"], str(cfg["version"]))
    cfg["key"] = key
    moved = copy.with_name(key)
    copy.rename(moved)
    (moved / "config.json").write_text(json.dumps(cfg))
    monkeypatch.setenv("SMALLINIT_CACHE", str(bad_cache))
    assert main(["llm", "eval", key, "--runs-dir", str(store)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tokenizer.json is damaged" in err[0]
    assert f"delete the folder {bad_cache}" in err[0]


# ----------------------------------------------------------------------------- foreign code
def planted_tokenizer(folder: Path, sentinel: Path, auto_map) -> None:
    """A loadable Llama folder without tokenizer.json whose tokenizer_config.json maps the
    tokenizer to ``tokenization_evil.py`` of the folder, a file that writes ``sentinel``
    when imported."""
    from smallinit.llm.model.hf import llama_from

    llama_from(
        ModelConfig(d_model=16, n_heads=2, n_layers=1, vocab_size=64, context=16)
    ).save_pretrained(folder)
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"auto_map": auto_map, "tokenizer_class": "EvilTokenizer"})
    )
    (folder / "tokenization_evil.py").write_text(
        f"import pathlib\npathlib.Path({str(sentinel)!r}).write_text('ran')\n"
        "from transformers import PreTrainedTokenizer\n"
        "class EvilTokenizer(PreTrainedTokenizer):\n    pass\n"
    )


@pytest.mark.parametrize(
    ("how", "auto_map"),
    [
        ("cli", {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}),
        # the loader without the auto_map refusal in front: transformers itself must not run it
        ("bare loader", ["tokenization_evil.EvilTokenizer", None]),
    ],
)
def test_a_tokenizers_own_code_never_runs(tmp_path, how, auto_map):
    """``llm downstream --hf DIR`` on a folder whose tokenizer names its own Python file,
    with "y" piped to transformers' "run the custom code? [y/N]" prompt: a refusal, and the
    file is never imported."""
    folder, sentinel = tmp_path / "hf", tmp_path / "sentinel"
    planted_tokenizer(folder, sentinel, auto_map)
    task = tmp_path / "task.jsonl"
    task.write_text('{"id": "a", "query": "Q:", "choices": [" x", " y"], "gold": 0}\n')
    if how == "cli":
        argv = [
            "-m",
            "smallinit",
            "llm",
            "downstream",
            "--hf",
            str(folder),
            "--tasks",
            str(task),
            "--no-fetch",
            "--runs-dir",
            str(tmp_path / "runs"),
        ]
    else:
        argv = [
            "-c",
            "from smallinit.llm.downstream import hf_model\n"
            "hf_model._refuse_custom_code = lambda folder: None\n"
            f"hf_model._tokenizer(__import__('pathlib').Path({str(folder)!r}))",
        ]
    env = {
        **os.environ,
        "HF_HOME": str(tmp_path / "hf-home"),
        "PYTHONWARNINGS": "ignore",
        "HF_MODULES_CACHE": str(tmp_path / "hf-modules"),
    }
    proc = subprocess.run(
        [sys.executable, *argv],
        input="y\ny\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert not sentinel.exists(), proc.stderr[-2000:]
    assert not (tmp_path / "hf-modules").exists()  # nothing was copied to be imported
    if how == "cli":
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert proc.stderr.strip().splitlines() == [
            f"smallinit: error: --hf {folder}: its tokenizer_config.json maps the tokenizer "
            "to code in the folder (auto_map), which is never run; add a tokenizer.json (a "
            "tokenizers serialization) instead"
        ]
    else:
        assert "ConfigError: --hf" in proc.stderr and "no usable tokenizer" in proc.stderr
