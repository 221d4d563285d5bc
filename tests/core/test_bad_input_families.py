"""Bad input by family, where one line on stderr is not the whole rule: a deeply nested
store file makes its run corrupt while the rest of the store still lists; the nesting and
size bounds sit exactly where they say; every field of every config dataclass is checked
as loading checks it (a misspelled Literal names the allowed values); the sampling limits
of the CLI are the API's; long generation shows progress."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import typing
from pathlib import Path

import pytest
import torch

from smallinit.cli import main
from smallinit.core.atomic import read_json
from smallinit.core.config import (
    CONFIG_BYTES,
    MAX_DEPTH,
    config_to_dict,
    parse_json,
    parse_overrides,
    read_toml,
    read_user_file,
)
from smallinit.core.errors import ConfigError, StoreError
from smallinit.core.results import list_runs
from smallinit.core.store import RunStore


def nested(n: int) -> str:
    """JSON (and TOML value) text of ``n`` nested arrays."""
    return "[" * n + "]" * n


# ----------------------------------------------------------------------------- deep nesting
def test_a_deeply_nested_status_json_makes_one_run_corrupt_and_the_rest_still_list(
    tmp_path, capsys
):
    store = RunStore(tmp_path / "runs")
    runs = [store.get_or_run("toy-x", {"i": i}, lambda run: {"v": 1.0}) for i in range(3)]
    (runs[1].path / "status.json").write_text(nested(100_000))
    (runs[2].path / "config.json").write_text(nested(500))
    states = {r.key: (r.state, r.problem) for r in list_runs(tmp_path / "runs")}
    assert states[runs[0].key] == ("done", None)
    for run, name in ((runs[1], "status.json"), (runs[2], "config.json")):
        state, problem = states[run.key]
        assert state == "corrupt" and f"{name} is corrupt" in problem
    assert main(["runs", "ls", "--runs-dir", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    listed = out.splitlines()[1:-1]
    assert sum("  corrupt  " in line for line in listed) == 2 and runs[0].key in out
    assert out.splitlines()[-1].startswith("3 runs, 2 corrupt")


def test_the_nesting_bound_is_exact(tmp_path):
    assert parse_json(nested(MAX_DEPTH), "x") is not None
    with pytest.raises(ConfigError, match=f"more than {MAX_DEPTH} levels"):
        parse_json(nested(MAX_DEPTH + 1), "x")
    ok, deep = tmp_path / "ok.json", tmp_path / "deep.json"
    ok.write_text(nested(MAX_DEPTH))
    deep.write_text(json.dumps({"a": [{"b": json.loads(nested(MAX_DEPTH - 2))}]}))
    assert read_json(ok) is not None
    with pytest.raises(StoreError, match=r"deep\.json is corrupt \(nested more than 64"):
        read_json(deep)
    toml = tmp_path / "c.toml"
    toml.write_text("a = " + nested(MAX_DEPTH - 1))  # inside the top-level table: 64 levels
    assert read_toml(toml)["a"] is not None
    toml.write_text("a = " + nested(MAX_DEPTH))
    with pytest.raises(ConfigError, match="more than 64 levels"):
        read_toml(toml)
    with pytest.raises(ConfigError, match="dotted parts"):
        parse_overrides(["a." * MAX_DEPTH + "b=1"])
    assert parse_overrides(["a." * (MAX_DEPTH - 1) + "b=1"])


# ----------------------------------------------------------------------------- special files
@pytest.fixture
def special(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    sock.close()
    os.symlink("loop", tmp_path / "loop")
    (tmp_path / "folder").mkdir()
    return tmp_path


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("fifo", "is a FIFO"),
        ("sock", "cannot be read"),
        ("loop", "cannot be read"),
        ("folder", "is a folder"),
        ("/dev/zero", "is a character device"),
        ("/dev/urandom", "is a character device"),
        ("missing", "does not exist"),
    ],
)
def test_only_regular_files_are_read(special, name, words):
    with pytest.raises(ConfigError, match=words):
        read_user_file(special / name, what="input", limit=100)
    with pytest.raises(ConfigError, match=f"config file .*{words}"):
        read_toml(special / name)


def test_the_size_cap_is_exact(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert len(read_user_file(path, what="input", limit=100)) == 100
    path.write_bytes(b"x" * 101)
    with pytest.raises(ConfigError, match="at most 100 B is allowed"):
        read_user_file(path, what="input", limit=100)
    path.write_bytes(b"#" * (CONFIG_BYTES + 1))
    with pytest.raises(ConfigError, match=r"config file .* at most 1\.0 MiB"):
        read_toml(path)


# ----------------------------------------------------------------------------- config dataclasses
def _config_classes():
    from smallinit.compare.comparison import CompareConfig
    from smallinit.llm.data.anchor import AnchorTaskConfig
    from smallinit.llm.run_config import DataConfig, EvalConfig, ModelConfig, RunConfig, TrainConfig
    from smallinit.llm.training.anchor import AnchorConfig
    from smallinit.study.experiments.anchor_scan import AnchorScan
    from smallinit.study.experiments.llm_plan import plan
    from smallinit.toy.condense import CondenseConfig
    from smallinit.toy.diagonal import DiagonalConfig
    from smallinit.toy.escape import EscapeConfig
    from smallinit.toy.initial_condensation import InitialCondensationConfig
    from smallinit.toy.scan import ScanConfig
    from smallinit.toy.twolayer import TrainSettings

    return [
        cls()
        for cls in (
            ModelConfig,
            DataConfig,
            TrainConfig,
            EvalConfig,
            RunConfig,
            ScanConfig,
            CondenseConfig,
            DiagonalConfig,
            EscapeConfig,
            InitialCondensationConfig,
            TrainSettings,
            CompareConfig,
            AnchorTaskConfig,
            AnchorConfig,
            AnchorScan,
        )
    ] + [plan("quick")]


CONFIGS = _config_classes()
FIELDS = [(type(c).__name__, f.name) for c in CONFIGS for f in dataclasses.fields(c)]
LITERALS = [
    (type(c).__name__, name)
    for c in CONFIGS
    for name, tp in typing.get_type_hints(type(c)).items()
    if typing.get_origin(tp) is typing.Literal
]


def test_every_dataclass_with_a_literal_field_is_a_checked_config():
    """A new dataclass with an enum-like Literal field must join the checked configs (or
    be named here as a record that is no user config)."""
    import ast

    records = {"TaskSpec"}  # benchmark task table rows, built by code, not from user input
    root = Path(__file__).resolve().parents[2]
    found = set()
    for folder in ("smallinit", "toy", "llm", "theory", "kernels"):
        for path in (root / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef) and any(
                    isinstance(s, ast.AnnAssign) and "Literal[" in ast.unparse(s.annotation)
                    for s in node.body
                ):
                    found.add(node.name)
    assert found - records <= {type(c).__name__ for c in CONFIGS}
    assert {"ModelConfig", "TrainConfig", "ScanConfig"} <= found


@pytest.mark.parametrize(("cls", "name"), FIELDS)
def test_every_field_of_every_config_is_checked_when_built_in_python(cls, name):
    cfg = next(c for c in CONFIGS if type(c).__name__ == cls)
    with pytest.raises(ConfigError, match=rf"{name}\b.*object"):
        dataclasses.replace(cfg, **{name: object()})


@pytest.mark.parametrize(("cls", "name"), LITERALS)
def test_a_misspelled_literal_names_the_allowed_values(cls, name):
    cfg = next(c for c in CONFIGS if type(c).__name__ == cls)
    allowed = typing.get_args(typing.get_type_hints(type(cfg))[name])
    typo = str(allowed[0]).upper() + "x"
    with pytest.raises(ConfigError) as err:
        dataclasses.replace(cfg, **{name: typo})
    assert repr(typo) in str(err.value)
    assert all(repr(a) in str(err.value) for a in allowed)


def test_tuple_fields_read_a_string_as_the_command_line_does_and_keep_their_keys():
    from smallinit.core.runs import config_key
    from smallinit.toy.scan import ScanConfig

    assert ScanConfig(widths="250,500") == ScanConfig(widths=(250, 500))
    assert ScanConfig(widths=[250, 500]).widths == (250, 500)
    widths = ScanConfig(widths=(250.0, 500.0)).widths  # integral floats become ints
    assert widths == (250, 500) and all(type(w) is int for w in widths)
    # ints in a float tuple stay ints: a config built that way keeps the key it always had
    one = ScanConfig(gammas=(1, 0.5), widths=(250, 500))
    assert config_to_dict(one)["gammas"] == [1, 0.5]
    assert config_key("toy-scan", one, "1") != config_key(
        "toy-scan", ScanConfig(gammas=(1.0, 0.5), widths=(250, 500)), "1"
    )


# ----------------------------------------------------------------------------- sampling
def test_the_cli_sampling_limits_are_the_apis():
    from smallinit.cli import llm_sample
    from smallinit.llm.model import generate
    from smallinit.llm.training import sample

    assert (llm_sample.MAX_NEW_TOKENS, llm_sample.MAX_SAMPLES) == (
        sample.MAX_NEW_TOKENS,
        sample.MAX_SAMPLES,
    )
    assert (llm_sample.MIN_TEMPERATURE, llm_sample.MAX_TEMPERATURE) == (
        generate.MIN_TEMPERATURE,
        generate.MAX_TEMPERATURE,
    )


@pytest.fixture(scope="module")
def tiny_model():
    from smallinit.llm.model.transformer import Transformer
    from smallinit.llm.run_config import ModelConfig

    torch.manual_seed(0)
    return Transformer(
        ModelConfig(d_model=16, n_heads=2, vocab_size=64, context=8, n_layers=1)
    ).eval()


def test_the_temperature_range_is_exact(tiny_model):
    from smallinit.llm.model.generate import MAX_TEMPERATURE, MIN_TEMPERATURE

    idx = torch.tensor([[1, 2]])
    for t in (0, MIN_TEMPERATURE, MAX_TEMPERATURE):
        out = tiny_model.generate(idx, 3, temperature=t, generator=torch.Generator().manual_seed(0))
        assert out.shape == (1, 5) and bool(((out >= 0) & (out < 64)).all())
    for t in (MIN_TEMPERATURE / 2, MAX_TEMPERATURE * 2, 1e-300, -0.5, float("nan"), True):
        with pytest.raises(ConfigError, match="temperature"):
            tiny_model.generate(idx, 3, temperature=t)


def test_generate_reads_any_integer_dtype_as_int64(tiny_model):
    idx = torch.tensor([[1, 2, 3]])
    ref = tiny_model.generate(idx, 4, temperature=0)
    for dtype in (torch.uint8, torch.int16, torch.int32):
        out = tiny_model.generate(idx.to(dtype), 4, temperature=0)
        assert out.dtype == torch.long and torch.equal(out, ref)


class _ByteTokenizer:
    """Ids are bytes (enough for the model's 64-token vocabulary with ASCII below 64)."""

    class _Enc:
        def __init__(self, ids):
            self.ids = ids

    def encode(self, text, add_special_tokens=False):
        return self._Enc([b % 64 for b in text.encode()])

    def decode(self, ids):
        return " ".join(map(str, ids))


def test_long_generation_logs_its_progress_where_no_bar_is_shown(tiny_model, monkeypatch, caplog):
    from smallinit.llm.training import sample

    monkeypatch.setattr(sample, "LOG_SECONDS", 0.0)  # a line per step
    with caplog.at_level(logging.INFO, logger=sample.__name__):
        out = sample.sample_texts(
            tiny_model, _ByteTokenizer(), "ab", max_new_tokens=5, temperature=0
        )
    lines = [r.getMessage() for r in caplog.records if r.name == sample.__name__]
    assert out["samples"][0]["tokens"] == 5
    assert [ln.split(" elapsed")[0].split(" tok/s")[0] for ln in lines] == [
        f"sample step {n}/5" for n in range(1, 6)
    ]
    caplog.clear()
    monkeypatch.setattr(sample, "LOG_SECONDS", 3600.0)  # a short sample: no lines
    with caplog.at_level(logging.INFO, logger=sample.__name__):
        sample.sample_texts(tiny_model, _ByteTokenizer(), "ab", max_new_tokens=5, temperature=0)
    assert not [r for r in caplog.records if r.name == sample.__name__]
