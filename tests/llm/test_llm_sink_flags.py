"""``--tensorboard DIR`` and ``--wandb PROJECT`` on every command that trains transformer
runs (``llm train``, ``llm anchor``, ``llm anchor-scan``, ``llm sweep``, ``figs``,
``compare``), defined once; the runs a multi-run command trains, in worker processes too,
land in the sink under the readable names of their plan, with every metric their
``metrics.jsonl`` holds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_llm_anchor_train import TINY
from test_llm_replay import accumulator, hparams_of

from smallinit.cli import build_parser, main
from smallinit.core.store import RunStore
from smallinit.llm.training import sinks as sinks_mod
from smallinit.llm.training.anchor import KIND as ANCHOR

TRAINING = (
    ["llm", "train"],
    ["llm", "anchor"],
    ["llm", "anchor-scan"],
    ["llm", "sweep", "--experiment", "gamma-sweep"],
    ["figs"],
    ["compare"],
)


@pytest.fixture
def no_sink_env(monkeypatch):
    for name in (sinks_mod.TENSORBOARD_ENV, sinks_mod.WANDB_ENV, sinks_mod.NAMES_ENV):
        monkeypatch.delenv(name, raising=False)


def _option_help(words: list[str], flag: str) -> str:
    """The help of ``flag`` on the command ``words`` names (``llm sweep``, ``figs``)."""
    import argparse

    parser = build_parser()
    for word in words[:2] if words[0] == "llm" else words[:1]:
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = sub.choices[word]
    (action,) = [a for a in parser._actions if flag in a.option_strings]
    return action.help


def test_every_training_command_takes_both_sinks_defined_once():
    parser = build_parser()
    for words in TRAINING:
        args = parser.parse_args([*words, "--tensorboard", "tb", "--wandb", "proj"])
        assert (args.tensorboard, args.wandb) == ("tb", "proj"), words
        args = parser.parse_args(words)
        assert (args.tensorboard, args.wandb) == (None, None), words
    for flag in ("--tensorboard", "--wandb"):
        helps = {_option_help(words, flag) for words in TRAINING}
        assert len(helps) == 1, helps  # one definition (smallinit.cli.util)


def test_anchor_scan_logs_every_cell_under_its_plan_name(tmp_path, no_sink_env):
    """Two cells trained in this process: each in DIR/anchor-scan/<its tags>/<key> with
    train/loss at every logged step of its metrics.jsonl, the held-out evaluations and the
    hyperparameters; the environment is as it was after the command."""
    pytest.importorskip("tensorboard")
    runs, tb = tmp_path / "runs", tmp_path / "tb"
    status = main(
        [
            "llm",
            "anchor-scan",
            "--runs-dir",
            str(runs),
            "--tensorboard",
            str(tb),
            "--workers",
            "1",
            *TINY,
            "scan.gammas=0.5,1",
            "scan.layers=1",
            "scan.weight_decays=0.01",
            "scan.wd_layers=1",
            "scan.seeds=[0]",
        ]
    )
    assert status == 0
    assert sinks_mod.TENSORBOARD_ENV not in os.environ
    assert sinks_mod.NAMES_ENV not in os.environ
    stored = list(RunStore(runs).runs(ANCHOR))
    assert len(stored) == 2
    for run in stored:
        gamma = "γ0.5" if run.config["init"] == "gamma:0.5" else "γ1"
        folder = (
            tb
            / "anchor-scan"
            / gamma
            / "layers1"
            / "weight_decay0.01"
            / "seed0"
            / "depth"
            / run.key
        )
        assert folder.is_dir(), sorted(p.relative_to(tb) for p in tb.rglob("*"))
        acc = accumulator(folder)
        records = run.metrics()
        losses = [(r["step"], r["loss"]) for r in records if "loss" in r]
        logged = [(e.step, e.value) for e in acc.Scalars("train/loss")]
        assert [s for s, _ in logged] == [s for s, _ in losses]
        assert [v for _, v in logged] == pytest.approx([v for _, v in losses], rel=1e-6)
        evals = {r["step"]: r["acc_seen_test"] for r in records if "acc_seen_test" in r}
        assert evals and {
            e.step: e.value for e in acc.Scalars("eval/acc_seen_test") if e.step in evals
        } == pytest.approx(evals)
        hparams, _metrics = hparams_of(acc)
        assert hparams["run_key"] == run.key and hparams["init"] == run.config["init"]


def test_a_bad_sink_is_one_line_before_any_run(tmp_path, no_sink_env, capsys):
    file = tmp_path / "tb"
    file.write_text("not a folder")
    runs = tmp_path / "runs"
    status = main(
        [
            "llm",
            "anchor-scan",
            "--runs-dir",
            str(runs),
            "--tensorboard",
            str(file),
            *TINY,
            "scan.gammas=0.5",
            "scan.layers=1",
            "scan.weight_decays=0.01",
            "scan.wd_layers=1",
            "scan.seeds=[0]",
        ]
    )
    err = capsys.readouterr().err
    assert status == 2
    assert err.strip().splitlines() == [
        f"smallinit: error: TensorBoard folder {str(file)!r} is a file; give a folder"
    ]
    assert not list(RunStore(runs).runs(ANCHOR))


def test_given_names_come_from_the_file_the_environment_names(tmp_path, monkeypatch):
    monkeypatch.delenv(sinks_mod.TENSORBOARD_ENV, raising=False)
    with sinks_mod.sink_environment(
        str(tmp_path / "tb"), None, lambda: {("llm-train", "abc"): "quick/fig7/d16/seed0"}
    ):
        assert os.environ[sinks_mod.TENSORBOARD_ENV] == str(tmp_path / "tb")
        assert sinks_mod.given_names() == {"llm-train/abc": "quick/fig7/d16/seed0"}
        names_file = Path(os.environ[sinks_mod.NAMES_ENV])

        class Run:
            path = tmp_path / "runs" / "llm-train" / "abc"

        assert sinks_mod.run_title(Run(), {"seed": 1}) == (
            "llm-train",
            "abc",
            "quick/fig7/d16/seed0",
        )
    assert not names_file.exists() and sinks_mod.given_names() == {}
    with sinks_mod.sink_environment(None, None, lambda: pytest.fail("no sink: no names")):
        assert sinks_mod.NAMES_ENV not in os.environ


FIG6 = [
    "anchor.task.n_train=2000",
    "anchor.task.n_test=200",
    "anchor.model.d_model=16",
    "anchor.model.n_layers=1",
    "anchor.model.n_heads=2",
    "anchor.train.steps=20",
    "anchor.train.batch_size=32",
    "anchor.train.log_every=10",
    "anchor.train.eval_every=10",
    "anchor.scan.gammas=[0.5,1.0]",
    "anchor.scan.layers=[1]",
    "anchor.scan.weight_decays=[0.01]",
    "anchor.scan.wd_layers=1",
]


@pytest.mark.slow
def test_figs_logs_the_runs_its_workers_train_under_the_plans_names(tmp_path):
    """`figs --only 6` on a tiny overlay, two worker processes: each run of the figure is
    in TensorBoard under <profile>/fig6/<its tags>/<key>, holding its training losses
    (about 80 s on two busy cores: marked slow)."""
    pytest.importorskip("tensorboard")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (sinks_mod.TENSORBOARD_ENV, sinks_mod.WANDB_ENV, sinks_mod.NAMES_ENV)
    }
    runs, tb = tmp_path / "runs", tmp_path / "tb"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "smallinit",
            "figs",
            "--only",
            "6",
            "--runs-dir",
            str(runs),
            "--out",
            str(tmp_path / "out"),
            "--tensorboard",
            str(tb),
            "--workers",
            "2",
            *FIG6,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    stored = list(RunStore(runs).runs(ANCHOR))
    assert len(stored) == 2
    for run in stored:
        (folder,) = [p for p in tb.rglob(run.key) if p.is_dir()]
        parts = folder.relative_to(tb).parts
        assert parts[0].startswith("quick+") and parts[1] == "fig6", parts
        assert parts[2] == ("γ0.5" if run.config["init"] == "gamma:0.5" else "γ1")
        losses = [(r["step"], r["loss"]) for r in run.metrics() if "loss" in r]
        logged = [(e.step, e.value) for e in accumulator(folder).Scalars("train/loss")]
        assert dict(logged) == pytest.approx(dict(losses)) and len(logged) == len(losses)


#: tests/compare/test_compare_run.py's tiny comparison
COMPARE = [
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


@pytest.mark.slow
def test_compare_logs_its_transformers_under_their_gamma_and_width(tmp_path, no_sink_env):
    """`compare --tensorboard` on the tiny comparison (about 90 s: marked slow): each of its
    four transformers in DIR/compare/γ<γ>/m<width>/<key> with its training losses."""
    pytest.importorskip("tensorboard")
    from smallinit.llm.training.train import KIND

    runs, tb = tmp_path / "runs", tmp_path / "tb"
    assert (
        main(
            [
                "--quiet",
                "compare",
                "gammas=0.5,1.0",
                "widths=16,32",
                "--runs-dir",
                str(runs),
                *COMPARE,
                f"llm.data.cache_dir={tmp_path / 'cache'}",
                "--tensorboard",
                str(tb),
            ]
        )
        == 0
    )
    stored = list(RunStore(runs).runs(KIND))
    assert len(stored) == 4
    for run in stored:
        gamma = "γ0.5" if run.config["init"] == "gamma:0.5" else "γ1"
        folder = tb / "compare" / gamma / f"m{run.config['model']['d_model']}" / run.key
        losses = {r["step"]: r["loss"] for r in run.metrics() if "loss" in r}
        logged = {e.step: e.value for e in accumulator(folder).Scalars("train/loss")}
        assert losses and logged == pytest.approx(losses)
