"""``smallinit runs ls`` filters and sorts (--kind, --profile, --where, --sort) and
``smallinit runs export-csv`` writes one flat row per run that pandas reads back."""

from __future__ import annotations

import csv
import io
import json

import pytest

from smallinit.cli import main
from smallinit.core.store import RunStore

CONFIGS = [  # (kind, config, summary): three transformer-like runs and a toy one
    (
        "llm-train",
        {"init": "gamma:0.5", "model": {"d_model": 32, "n_layers": 2}, "seed": 0},
        {"val_loss": 2.5, "steps": 30},
    ),
    (
        "llm-train",
        {"init": "gamma:1.0", "model": {"d_model": 64, "n_layers": 2}, "seed": 0},
        {"val_loss": 2.1, "steps": 30},
    ),
    (
        "llm-train",
        {"init": "gamma:1.0", "model": {"d_model": 32, "n_layers": 2}, "seed": 1},
        {"val_loss": 2.3, "steps": 30},
    ),
    ("toy-scan", {"gammas": [0.5, 1.0], "widths": [20, 40]}, {"converged": True}),
]


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "runs"
    s = RunStore(root)
    keys = []
    for kind, config, summary in CONFIGS:

        def body(run, summary=summary):
            run.log({"step": 1, "loss": 1.0})
            return summary

        keys.append(s.get_or_run(kind, config, body).key)
    return root, keys


def ls_json(capsys, root, *args: str) -> list[dict]:
    capsys.readouterr()
    assert main(["runs", "ls", "--json", "--runs-dir", str(root), *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_ls_filters_by_kind_and_dotted_config_keys(store, capsys):
    root, keys = store
    assert [r["key"] for r in ls_json(capsys, root, "--kind", "toy-scan")] == [keys[3]]
    got = ls_json(capsys, root, "--where", "model.d_model=32")
    assert sorted(r["key"] for r in got) == sorted([keys[0], keys[2]])
    got = ls_json(capsys, root, "--where", "model.d_model=32", "--where", "init=gamma:1.0")
    assert [r["key"] for r in got] == [keys[2]]
    got = ls_json(capsys, root, "--where", "model.d_model=32.0", "--where", "seed=1")
    assert [r["key"] for r in got] == [keys[2]]  # numbers by value
    assert ls_json(capsys, root, "--where", "widths=[20, 40]")[0]["key"] == keys[3]


def test_ls_sorts_by_a_summary_entry_or_a_config_key_missing_ones_last(store, capsys):
    root, keys = store
    got = [r["key"] for r in ls_json(capsys, root, "--sort", "val_loss")]
    assert got == [keys[1], keys[2], keys[0], keys[3]]  # the toy run has no val_loss: last
    got = [r["key"] for r in ls_json(capsys, root, "--sort", "val_loss", "--reverse")]
    assert got == [keys[0], keys[2], keys[1], keys[3]]
    got = [
        r["key"]
        for r in ls_json(
            capsys, root, "--kind", "llm-train", "--sort", "model.d_model", "--reverse"
        )
    ]
    assert got[0] == keys[1] and sorted(got[1:]) == sorted([keys[0], keys[2]])


@pytest.mark.parametrize(
    "args,says",
    [
        (["--where", "model.d_model"], "--where 'model.d_model' is not a filter"),
        (["--where", "=3"], "is not a filter"),
        (["--where", "model.d_modle=32"], "'model.d_modle' is no config key"),
        (["--sort", "val_los"], "--sort 'val_los' is no field"),
        (["--profile", "nosuch"], "profile 'nosuch' is not allowed"),
        (["--kind", "nosuch"], "run kind 'nosuch' has no runs"),
    ],
)
def test_bad_filters_are_one_line_and_exit_2(store, capsys, args, says):
    root, _keys = store
    try:
        code = main(["runs", "ls", "--runs-dir", str(root), *args])
    except SystemExit as exit_:  # argparse's own refusals
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err


def test_ls_profile_lists_only_the_runs_of_that_profiles_plan(tmp_path, capsys):
    from smallinit.core.config import config_to_dict
    from smallinit.study.experiments import specs

    root = tmp_path / "runs"
    s = RunStore(root)
    spec = specs("toy-scan", "quick")[0]
    planned = s.get_or_run(
        spec.kind, config_to_dict(spec.config), lambda run: {}, version=spec.version
    )
    assert planned.key == spec.key
    s.get_or_run(spec.kind, {"not": "planned"}, lambda run: {}, version=spec.version)
    assert [r["key"] for r in ls_json(capsys, root, "--profile", "quick")] == [spec.key]
    assert len(ls_json(capsys, root)) == 2


def test_export_csv_is_one_flat_row_per_run_that_pandas_reads(store, tmp_path, capsys):
    root, keys = store
    out = tmp_path / "runs.csv"
    assert main(["runs", "export-csv", "--out", str(out), "--runs-dir", str(root)]) == 0
    assert "4 runs" in capsys.readouterr().err
    pandas = pytest.importorskip("pandas")
    frame = pandas.read_csv(out)
    assert list(frame.columns[:6]) == ["kind", "key", "state", "created", "finished", "version"]
    assert sorted(frame["key"]) == sorted(keys) and set(frame["state"]) == {"done"}
    llm = frame[frame["kind"] == "llm-train"].set_index("key")
    for (_kind, config, summary), key in zip(CONFIGS[:3], keys[:3], strict=True):
        assert llm.loc[key, "config.model.d_model"] == config["model"]["d_model"]
        assert llm.loc[key, "config.init"] == config["init"]
        assert llm.loc[key, "summary.val_loss"] == summary["val_loss"]
    assert frame["config.model.d_model"].dtype.kind == "f"  # numbers (NaN for the toy run)
    toy = frame[frame["kind"] == "toy-scan"].iloc[0]
    assert json.loads(toy["config.widths"]) == [20, 40] and bool(toy["summary.converged"])
    # the same filters as ls, and standard output without --out
    capsys.readouterr()
    assert main(["runs", "export-csv", "--where", "seed=1", "--runs-dir", str(root)]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["key"] for r in rows] == [keys[2]] and rows[0]["config.seed"] == "1"
