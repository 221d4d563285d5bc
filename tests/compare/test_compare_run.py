"""A tiny end-to-end comparison (two γ, two widths, few steps) through the CLI: it runs,
writes its table files, is reused the second time, and feeds fig 5's measured layer."""

from __future__ import annotations

import csv
import json
import shutil

import pytest

from smallinit.cli import main
from smallinit.core.atomic import read_json
from smallinit.core.config import config_from_dict
from smallinit.kernels import relative_distance
from smallinit.llm.analysis.ffn import initial_model, trained_model
from smallinit.llm.run_config import RunConfig

TINY = [
    "head_dim=16",
    "toy_widths=50,100",
    "toy_seeds=1",
    "condense_width=100",
    "toy_max_steps=5000",
    "llm.model.context=32",
    "llm.model.vocab_size=320",
    "llm.train.steps=20",
    "llm.train.warmup=2",
    "llm.train.batch_size=8",
    "llm.train.log_every=10",
    "llm.train.checkpoint_every=0",
    "llm.data.synthetic_items=1500",
    "llm.data.synthetic_val_items=150",
    "llm.data.synthetic_facts=20",
]


@pytest.fixture(scope="module")
def tiny_compare(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    args = [
        "compare",
        "gammas=0.5,1.0",
        "widths=16,32",
        "--runs-dir",
        str(root / "runs"),
        *TINY,
        f"llm.data.cache_dir={root / 'cache'}",
    ]
    return root, args


def test_tiny_compare_end_to_end(tiny_compare, capsys):
    root, args = tiny_compare
    assert main(["--quiet", *args]) == 0
    out = capsys.readouterr().out
    assert "transformer agrees with theory" in out
    (run_dir,) = (root / "runs" / "compare").iterdir()
    assert f"table: {run_dir / 'table.csv'}" in out

    rows = list(csv.DictReader((run_dir / "table.csv").open()))
    assert [(float(r["gamma"]), float(r["gamma_toy"]), r["regime"]) for r in rows] == [
        (0.5, 1.0, "critical"),
        (1.0, 2.0, "condensed"),
    ]
    table = json.loads((run_dir / "table.json").read_text())
    records = table["records"]
    assert len(records) == 2 and all(len(r["llm_S_w"]) == 2 for r in records)
    for r in records:  # every number the table shows was measured
        assert r["toy_S_w"] is not None and r["toy_score"] is not None
        assert all(s is not None for s in r["llm_S_w"] + r["llm_S_w_qk"] + r["llm_score"])
        assert r["agree"] in (True, False)

    # the stored RD is the distance between the run's weights and its re-created θ(0)
    meas = json.loads((run_dir / "measurements.json").read_text())
    assert len(meas) == 4 and {e["state"] for e in meas} == {"done"}
    entry = meas[-1]
    cfg = config_from_dict(RunConfig, read_json(f"{entry['run']}/config.json")["config"])
    assert (cfg.model.d_model, cfg.model.ffn_dim, cfg.init) == (32, 128, "gamma:1")
    w = trained_model(cfg, entry["run"]).blocks[1].mlp.up.weight
    w0 = initial_model(cfg).blocks[1].mlp.up.weight
    assert entry["layers"][1]["rd_ffn"] == pytest.approx(relative_distance(w, w0))
    assert entry["layers"][1]["rd_ffn"] > 0

    # JSON mode reuses the finished comparison and prints the same records
    assert main(["--quiet", *args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == records


def test_fig5_measured_layer_draws_the_slopes(tiny_compare):
    import matplotlib.pyplot as plt

    from smallinit.paper_figs import fig05_transformer_phase as fig05

    root, _ = tiny_compare
    records = [
        {"gamma": 0.5, "toy_S_w": -0.1, "llm_S_w": [0.3, 0.4], "llm_S_w_qk": [0.5, None]},
        {"gamma": 1.0, "toy_S_w": 0.6, "llm_S_w": [2.5, 0.9], "llm_S_w_qk": [1.0, 1.1]},
    ]
    fig, ax = plt.subplots()
    fig05.draw_measured_layer(ax, records)
    lines = {line.get_label(): line for line in ax.get_lines()}
    toy = lines["toy two-layer net at (2γ, 0)"]
    assert list(toy.get_ydata()) == [-0.1, 0.6]
    ffn1 = lines["transformer FFN W_up, layer 1"]
    assert list(ffn1.get_ydata()) == [0.4, 0.9]
    # the y range grows to show a slope beyond the theory panel's ±1.5
    assert ax.get_ylim()[1] >= 2.5
    plt.close(fig)


def test_compare_cli_errors(capsys):
    assert main(["compare", "widths=16,abc"]) == 2
    assert "widths[1]='abc' is not allowed; it must be an integer" in capsys.readouterr().err
    assert main(["compare", "widths=64"]) == 2
    assert "at least two widths" in capsys.readouterr().err
    assert main(["compare", "nosuchkey=1"]) == 2
    assert "unknown key config.nosuchkey" in capsys.readouterr().err


def test_a_transformer_refused_for_a_damaged_corpus_leaves_the_comparison_unrecorded(
    tmp_path, capsys
):
    """A transformer that fails for damaged input (a rolled ``train.bin``) is no outcome: the
    comparison ends in one line and is recorded as retryable, so once the corpus is rebuilt
    the next call trains the transformers instead of reusing a table without them."""
    import numpy as np

    from smallinit.compare.comparison import CompareConfig
    from smallinit.compare.run import KIND, VERSION
    from smallinit.core.config import load_config
    from smallinit.core.store import RunStore
    from smallinit.llm.data import corpus as corpus_mod

    overrides = ["gammas=0.5", "widths=16,32", *TINY, f"llm.data.cache_dir={tmp_path / 'c'}"]
    cfg = load_config(CompareConfig, None, overrides)
    data = cfg.llm_run(0.5, 16).data
    folder = corpus_mod.prepare(data, cfg.llm.model.vocab_size)
    np.roll(np.fromfile(folder / "train.bin", np.uint16), 1).tofile(folder / "train.bin")
    args = ["--quiet", "compare", *overrides, "--runs-dir", str(tmp_path / "runs")]
    capsys.readouterr()
    assert main(args) == 2
    err = [
        ln
        for ln in capsys.readouterr().err.splitlines()  # log records of the
        if ln.strip() and not ln.startswith(("ERROR ", "WARNING "))
    ]  # job driver aside
    assert len(err) == 1 and "is damaged" in err[0], err
    compare = RunStore(tmp_path / "runs").run(KIND, cfg, version=VERSION)
    assert compare.state == "failed" and not compare.failed_for_good

    shutil.rmtree(folder)  # rebuilt by the next call
    assert main(args) == 0
    assert compare.state == "done" and compare.summary["llm_failed"] == 0
