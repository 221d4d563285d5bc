"""Runs as objects (smallinit.core.results, `smallinit runs`), the public Python surfaces of
smallinit, theory, toy and llm, and the CLI conventions (--json, --print-config, classify's
tolerance)."""

from __future__ import annotations

import argparse
import inspect
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import smallinit
from smallinit.cli import build_parser, main
from smallinit.core.errors import ConfigError, RunFailed, StoreError
from smallinit.core.integrity import build_manifest
from smallinit.core.store import RunStore


# ----------------------------------------------------------------------------- a small store
def _train_like(run):
    for step in (10, 20, 30):
        run.log(
            {
                "step": step,
                "loss": 3.0 / step,
                "lr": 0.1,
                "per_category": {"reasoning": 1.0 / step, "fact": 2.0 / step},
            }
        )
    run.save_arrays(curve=np.arange(6, dtype=np.float32).reshape(2, 3), widths=np.array([8, 16]))
    return {"val_loss": 0.25, "train_loss": 0.2, "steps": 30}


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "runs"
    s = RunStore(root)
    a = s.get_or_run(
        "llm-train", {"init": "gamma:0.5", "model": {"d_model": 32}, "seed": 0}, _train_like
    )
    b = s.get_or_run(
        "llm-train", {"init": "gamma:1", "model": {"d_model": 32}, "seed": 1}, _train_like
    )

    def fails(run):
        raise RunFailed("loss became NaN at step 3")

    c = s.get_or_run("toy-scan", {"gammas": [0.5, 1.0], "widths": [20, 40]}, fails)
    d = s.get_or_run("toy-scan", {"gammas": [0.25], "widths": [20, 40]}, lambda run: {})
    (d.path / "status.json").write_text("{not json")  # damaged
    return root, {"a": a, "b": b, "failed": c, "corrupt": d}


def test_list_runs_reads_every_run_and_survives_a_damaged_one(store):
    root, runs = store
    listed = smallinit.list_runs(root)
    assert {r.key for r in listed} == {r.key for r in runs.values()}
    by_key = {r.key: r for r in listed}
    assert by_key[runs["a"].key].state == "done"
    assert by_key[runs["failed"].key].state == "failed"
    assert by_key[runs["failed"].key].reason == "loss became NaN at step 3"
    corrupt = by_key[runs["corrupt"].key]
    assert corrupt.state == "corrupt" and "status.json is corrupt" in corrupt.reason
    only = smallinit.list_runs(root, kind="toy-scan")
    assert {r.kind for r in only} == {"toy-scan"} and len(only) == 2
    with pytest.raises(ConfigError, match="run kind 'nope' has no runs .*llm-train, toy-scan"):
        smallinit.list_runs(root, kind="nope")
    assert smallinit.list_runs(root / "empty") == []


def test_record_summarizes_config_and_main_metrics(store):
    root, runs = store
    rec = smallinit.load_run(runs["a"].key, runs_dir=root).record()
    assert json.loads(json.dumps(rec)) == rec  # plain JSON
    assert rec["kind"] == "llm-train" and rec["state"] == "done"
    assert rec["config_summary"].startswith("init=gamma:0.5 model.d_model=32")
    assert rec["config"] == smallinit.load_run(runs["a"].key, runs_dir=root).config
    assert rec["metrics"] == {"val_loss": 0.25, "train_loss": 0.2, "steps": 30}
    assert rec["created"]


def test_load_run_by_key_prefix_kind_and_directory(store):
    root, runs = store
    a = runs["a"]
    for ref in (a.key, a.key[:6], f"llm-train/{a.key[:5]}", str(a.path)):
        run = smallinit.load_run(ref, runs_dir=root)
        assert (run.kind, run.key, run.state) == ("llm-train", a.key, "done"), ref
    run = smallinit.load_run(a.key, runs_dir=root)
    assert run.config == {"init": "gamma:0.5", "model": {"d_model": 32}, "seed": 0}
    assert run.summary == {"val_loss": 0.25, "train_loss": 0.2, "steps": 30}
    assert [r["step"] for r in run.metrics()] == [10, 20, 30]
    arrays = run.arrays()
    assert arrays["curve"].dtype == np.float32 and arrays["curve"].shape == (2, 3)
    np.testing.assert_array_equal(arrays["widths"], [8, 16])
    assert {f["path"] for f in run.files()} == {
        "config.json",
        "status.json",
        "metrics.jsonl",
        "arrays.npz",
    }


def test_load_run_refuses_unknown_ambiguous_and_malformed_keys(store):
    root, runs = store
    with pytest.raises(ConfigError, match="RUN 'ffffffff' matches no run under"):
        smallinit.load_run("ffffffff", runs_dir=root)
    with pytest.raises(ConfigError, match=r"RUN '' matches no run: it is neither"):
        smallinit.load_run("", runs_dir=root)
    many = RunStore(root / "many")  # 17 keys: two share a first hex digit (pigeonhole)
    keys = [many.get_or_run("k", {"i": i}, lambda run: {}).key for i in range(17)]
    first = next(c for c in "0123456789abcdef" if sum(k[0] == c for k in keys) >= 2)
    with pytest.raises(ConfigError, match=rf"RUN '{first}' matches \d+ runs \(k/{first}"):
        smallinit.load_run(first, runs_dir=many.root)
    with pytest.raises(ConfigError, match="neither a run directory"):
        smallinit.load_run("../../etc", runs_dir=root)
    with pytest.raises(ConfigError, match="run kind 'x' has no runs"):
        smallinit.load_run("x/abc", runs_dir=root)


def test_metrics_frame_is_a_flat_dataframe(store):
    pandas = pytest.importorskip("pandas")
    root, runs = store
    frame = smallinit.load_run(runs["a"].key, runs_dir=root).metrics_frame()
    assert isinstance(frame, pandas.DataFrame)
    assert list(frame["step"]) == [10, 20, 30]
    assert frame["per_category.reasoning"].tolist() == pytest.approx([0.1, 0.05, 1 / 30])
    assert frame["loss"].iloc[-1] == pytest.approx(0.1)


def test_metrics_frame_without_pandas_says_how_to_get_it(store, monkeypatch):
    root, runs = store
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now fails
    run = smallinit.load_run(runs["a"].key, runs_dir=root)
    with pytest.raises(ConfigError, match=r"needs pandas: pip install 'smallinit\[pandas\]'"):
        run.metrics_frame()
    assert len(run.metrics()) == 3  # the records need nothing


def test_arrays_are_read_without_pickles(store):
    root, runs = store
    run = runs["b"]
    np.savez(run.arrays_path, bad=np.array([{"x": 1}], dtype=object))
    with pytest.raises(StoreError, match="arrays.npz .* manifest"):  # caught by its manifest
        smallinit.load_run(run.key, runs_dir=root).arrays()
    status = run.status()  # ... and with a manifest that lists the pickle, by the reader
    status["manifest"] = build_manifest(run.path)
    run.status_path.write_text(json.dumps(status))
    with pytest.raises(StoreError, match="arrays.npz is corrupt"):
        smallinit.load_run(run.key, runs_dir=root).arrays()


# ----------------------------------------------------------------------------- the CLI
def test_runs_ls_and_show(store, capsys):
    root, runs = store
    assert main(["runs", "ls", "--runs-dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert runs["a"].key in out and "val_loss=0.25" in out and "4 runs" in out
    assert main(["runs", "ls", "--kind", "llm-train", "--json", "--runs-dir", str(root)]) == 0
    records = json.loads(capsys.readouterr().out)
    assert {r["key"] for r in records} == {runs["a"].key, runs["b"].key}
    by_key = {r["key"]: r for r in records}  # the whole config, as an object, not cut short
    assert (
        by_key[runs["a"].key]["config"]
        == json.loads((runs["a"].path / "config.json").read_text())["config"]
    )
    assert by_key[runs["a"].key]["config"]["model"] == {"d_model": 32}
    assert by_key[runs["a"].key]["summary"]["val_loss"] == 0.25
    assert main(["runs", "show", runs["a"].key[:7], "--runs-dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"run llm-train/{runs['a'].key} (done)" in out
    assert 'init = "gamma:0.5"' in out and "3 records" in out and "arrays.npz" in out
    assert main(["runs", "show", runs["a"].key, "--json", "--runs-dir", str(root)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["config"]["model"] == {"d_model": 32}
    assert info["metrics"]["records"] == 3 and info["metrics"]["last"]["step"] == 30
    assert main(["runs", "show", runs["failed"].key, "--runs-dir", str(root)]) == 0
    assert "loss became NaN" in capsys.readouterr().out
    assert main(["runs", "show", "abcdef12", "--runs-dir", str(root)]) == 2
    assert "matches no run" in capsys.readouterr().err


def _commands(parser: argparse.ArgumentParser, prefix=()):
    """(argv prefix, parser) of every command of the CLI."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield prefix, parser
        return
    for name, sub in subs[0].choices.items():
        yield from _commands(sub, (*prefix, name))


def test_one_json_convention_across_commands():
    """Every --json is a flag (no FILE argument) and every command that prints JSON has it;
    --format survives only as init-table's alias (--format json = --json, plus csv)."""
    with_json = []
    for argv, parser in _commands(build_parser()):
        for action in parser._actions:
            if "--json" in action.option_strings:
                assert action.nargs == 0, argv  # store_true
                with_json.append(" ".join(argv))
            if "--format" in action.option_strings:
                assert argv == ("llm", "init-table"), argv
    for command in (
        "theory classify",
        "toy scan",
        "compare",
        "figs",
        "runs ls",
        "runs show",
        "llm init-table",
        "llm anchor-scan",
        "llm train",
        "llm downstream-data",
    ):
        assert command in with_json, command


def test_print_config_prints_toml_and_runs_nothing(tmp_path, capsys):
    runs = tmp_path / "runs"
    store = ["--runs-dir", str(runs)]
    cases = [
        ["llm", "train", "--config", "quick", "init=gamma:0.75", *store],
        ["llm", "init-table", "--init", "nanogpt"],
        ["llm", "anchor", "init=gamma:0.5", *store],
        ["llm", "anchor-scan", *store],
        ["compare", "gammas=0.5,1", *store],
        ["toy", "scan", "gammas=0.5", *store],
        ["toy", "condense", *store],
        ["toy", "diagonal", *store],
        ["toy", "escape", *store],
    ]
    for argv in cases:
        assert main([*argv, "--print-config"]) == 0, argv
        data = tomllib.loads(capsys.readouterr().out)
        assert data, argv
    assert not runs.exists()  # nothing ran
    assert main(["llm", "train", "--config", "quick", "init=gamma:0.75", "--print-config"]) == 0
    text = capsys.readouterr().out
    assert tomllib.loads(text)["init"] == "gamma:0.75"
    # the printed config is a config file: read back, it resolves to the same text
    path = tmp_path / "train.toml"
    path.write_text(text)
    assert main(["llm", "train", "--config", str(path), "--print-config"]) == 0
    assert capsys.readouterr().out == text
    assert main(["llm", "anchor-scan", "scan.gammas=[0.5]", "--print-config"]) == 0
    assert tomllib.loads(capsys.readouterr().out)["scan"]["gammas"] == [0.5]


def test_classify_tolerance_makes_derived_floats_stable(capsys):
    from smallinit.theory import phase

    derived = 1.1 - 1  # 0.10000000000000009
    assert phase.classify(1.1, derived) == "critical"  # Δ = −9e-17 is rounding noise
    assert phase.classify(1.1, derived, tol=0) == "linear"  # exact reading of the float
    assert phase.classify(1.1, 0.1, tol=0) == "critical"
    assert phase.classify(1.0 + 1e-6, 0) == "condensed"  # a real Δ is above the tolerance
    assert phase.slope_interval(1.1, derived) == (0, 0)
    with pytest.raises(ValueError, match="tol=-1 is not allowed"):
        phase.classify(1, 0, tol=-1)
    argv = ["theory", "classify", "--gamma", "1.1", "--gamma-prime", repr(derived)]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["regime"] == "critical" and data["tol"] == phase.DEFAULT_TOL
    assert main([*argv, "--tol", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["regime"] == "linear"
    assert main([*argv, "--tol", "1e-20"]) == 0
    assert "regime: linear" in capsys.readouterr().out
    # the help states the default, which is theory's
    classify = dict(_commands(build_parser()))[("theory", "classify")]
    tol_help = next(a.help for a in classify._actions if "--tol" in a.option_strings)
    assert f"default: {phase.DEFAULT_TOL!r}" in tol_help


# ----------------------------------------------------------------------------- Python surfaces
@pytest.mark.parametrize("name", ["theory", "toy", "llm"])
def test_components_have_a_documented_public_surface(name):
    module = getattr(smallinit, name)
    assert module.__name__ == f"smallinit.{name}"
    assert module.__all__ and module.__doc__
    for public in module.__all__:
        assert getattr(module, public) is not None, public
        assert public in module.__doc__, f"{name}.{public} is not in the docstring"


def test_llm_train_is_the_function_and_the_module_stays_importable():
    from smallinit.llm import train
    from smallinit.llm.training.train import Trainer

    assert inspect.isfunction(train) and train.__name__ == "train"
    assert "cfg" in inspect.signature(train).parameters
    import smallinit.llm.training.train as module  # noqa: F401

    assert smallinit.llm.train is train and inspect.isclass(Trainer)
    assert inspect.ismodule(sys.modules["smallinit.llm.training.train"])


def test_import_smallinit_is_light_and_typed():
    code = (
        "import sys, smallinit\nfrom smallinit import theory, toy, llm\n"
        "heavy = [m for m in ('torch', 'jax', 'sympy') if m in sys.modules]\n"
        "print(heavy, smallinit.load_run.__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["[]", "smallinit.core.results"]
    typed = Path(smallinit.__file__).with_name("py.typed")
    assert typed.is_file()
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["smallinit"]
