"""The run store replayed into the log sinks: ``smallinit runs log`` writes a stored run's
config, every stored metric, its hyperparameters and final evaluation into TensorBoard (read
back with TensorBoard's own reader) and W&B (offline); readable run names with the key as a
tag; hyperparameters at the start of a live run; a sink that failed to start is retried on
the run's next use."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from smallinit.core.results import load_run
from smallinit.llm.training import sinks as sinks_mod
from smallinit.llm.training.train import KIND, train
from tests.llm.test_llm_logging import TINY, _items, tiny, wandb_records

STEPS = ["train.steps=6", "train.checkpoint_every=0"]


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A small real run of ``llm train``, stored in its own run store (no sink)."""
    root = tmp_path_factory.mktemp("replay")
    cache = str(root / "cache")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (sinks_mod.TENSORBOARD_ENV, sinks_mod.WANDB_ENV)
    }
    argv = [
        sys.executable,
        "-m",
        "smallinit",
        "llm",
        "train",
        *TINY,
        f"data.cache_dir={cache}",
        *STEPS,
        "--runs-dir",
        str(root / "runs"),
        "--json",
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    (run,) = [r for r in (root / "runs" / KIND).iterdir()]
    return root, cache, load_run(run)


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {
        k: v
        for k, v in os.environ.items()
        if k not in (sinks_mod.TENSORBOARD_ENV, sinks_mod.WANDB_ENV)
    }
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "smallinit", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=full,
    )


def accumulator(folder: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def hparams_of(acc) -> tuple[dict, set | None]:
    """(hyperparameters at the session start, metric tags of the experiment; None before
    the run's end wrote it) of a run's TensorBoard folder, as TensorBoard's HParams plugin
    reads them."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    content = acc.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(
        content["_hparams_/session_start_info"]
    ).session_start_info
    values = {
        k: v.number_value if v.HasField("number_value") else v.string_value
        for k, v in start.hparams.items()
    }
    if "_hparams_/experiment" not in content:
        return values, None
    experiment = plugin_data_pb2.HParamsPluginData.FromString(
        content["_hparams_/experiment"]
    ).experiment
    return values, {m.name.tag for m in experiment.metric_infos}


def test_runs_log_replays_every_stored_metric_into_tensorboard(stored, tmp_path):
    pytest.importorskip("tensorboard")
    root, _cache, run = stored
    proc = cli(
        "runs",
        "log",
        run.key[:8],
        "--tensorboard",
        str(tmp_path / "tb"),
        "--runs-dir",
        str(root / "runs"),
    )
    assert proc.returncode == 0, proc.stderr
    name = sinks_mod.readable_name(KIND, run.config)
    assert name == f"{KIND}/γ0.5/synthetic/d16/L1/lr0.003/seed0"  # TINY's config
    folder = tmp_path / "tb" / name / run.key
    assert str(folder) in proc.stdout
    acc = accumulator(folder)
    records = run.metrics()
    expected: dict[str, dict[int, float]] = {}  # tag -> step -> value (one per step)
    for record in records:
        for tag, value in sinks_mod.grouped(record).items():
            expected.setdefault(tag, {}).setdefault(record["step"], value)
    final = sinks_mod.final_evaluation(run.summary)
    assert final and len(records) > 3 and any(t.startswith("probe/") for t in expected)
    for tag, value in final.items():  # at the last step; the same as eval/val_loss there
        assert expected.setdefault(tag, {}).setdefault(6, value) == value
    assert set(acc.Tags()["scalars"]) == set(expected)
    for tag, points in expected.items():  # every stored number, at its step (float32)
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        assert got == [(s, pytest.approx(v, rel=1e-6)) for s, v in points.items()], tag
    hparams, metrics = hparams_of(acc)
    assert hparams["model.d_model"] == 16 and hparams["init"] == run.config["init"]
    assert hparams["run_key"] == run.key and metrics == set(final)
    # again: the replay replaces the first one (one value per tag and step)
    assert (
        cli(
            "runs",
            "log",
            run.key,
            "--tensorboard",
            str(tmp_path / "tb"),
            "--runs-dir",
            str(root / "runs"),
        ).returncode
        == 0
    )
    again = accumulator(folder)
    assert [e.step for e in again.Scalars("train/loss")] == list(expected["train/loss"])


def test_runs_log_refuses_without_a_sink_and_for_unknown_runs(stored, tmp_path):
    root, _cache, run = stored
    proc = cli("runs", "log", run.key, "--runs-dir", str(root / "runs"))
    assert proc.returncode == 2 and "needs a sink" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = cli(
        "runs", "log", "ffff", "--tensorboard", str(tmp_path), "--runs-dir", str(root / "runs")
    )
    assert proc.returncode == 2 and "ffff" in proc.stderr and "Traceback" not in proc.stderr


def test_runs_log_into_wandb_offline_with_a_readable_name_and_the_key_as_tag(
    stored, tmp_path, monkeypatch
):
    pytest.importorskip("wandb")
    root, _cache, run = stored
    proc = cli(
        "runs",
        "log",
        run.key,
        "--wandb",
        "replay-test",
        "--runs-dir",
        str(root / "runs"),
        env={"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true"},
    )
    assert proc.returncode == 0, proc.stderr
    (records,) = wandb_records(tmp_path)
    (head,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert head.display_name == sinks_mod.readable_name(KIND, run.config)
    assert list(head.tags) == [run.key] and head.run_group == run.key
    assert _items(head.config.update)["model.d_model"] == 16
    history = [_items(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]
    losses = [(h["_step"], h["train/loss"]) for h in history if "train/loss" in h]
    assert losses == [(r["step"], pytest.approx(r["loss"])) for r in run.metrics() if "loss" in r]


def test_readable_names_from_tags_and_from_configs():
    tags = {"size": 128, "init": "gamma:1.0", "gamma": 1.0, "seed": 3}
    assert (
        sinks_mod.readable_name("llm-train", {}, tags, prefix="fair/fig7")
        == "fair/fig7/d128/γ1/seed3"
    )
    assert (
        sinks_mod.readable_name("toy-scan", {"gamma": 0.5, "width": 64, "depth": 2, "flag": True})
        == "toy-scan/m64/L2/γ0.5"
    )


class Refusing(sinks_mod.TensorBoard):
    """A TensorBoard sink whose start fails (as a W&B start without its service does)."""

    def open(self, *args, **kwargs):
        raise RuntimeError("service unreachable")


def test_a_failed_sink_start_is_retried_on_the_runs_next_use(stored, tmp_path, monkeypatch, caplog):
    """A sink that cannot start is dropped while the run trains, and recorded in the run;
    the next use of the run (reused from the store) logs the stored run into the sink and
    says so; the use after that has nothing left to retry."""
    pytest.importorskip("tensorboard")
    monkeypatch.delenv(sinks_mod.TENSORBOARD_ENV, raising=False)
    monkeypatch.delenv(sinks_mod.WANDB_ENV, raising=False)
    _root, cache, _run = stored
    cfg = tiny(cache, *STEPS, "seed=1")
    runs = tmp_path / "runs"
    with caplog.at_level(logging.WARNING):
        run = train(cfg, runs_dir=runs, callbacks=[Refusing(tmp_path / "tb")])
    assert "Refusing failed at on_start" in caplog.text
    assert sinks_mod.pending(run.path)["tensorboard"]["reason"].endswith("service unreachable")
    caplog.clear()
    sink = sinks_mod.TensorBoard(tmp_path / "tb")
    with caplog.at_level(logging.WARNING):
        again = train(cfg, runs_dir=runs, callbacks=[sink])
    assert again.path == run.path  # reused, not trained again
    assert "failed to start when it trained" in caplog.text and str(tmp_path / "tb") in caplog.text
    assert sinks_mod.pending(run.path) == {}
    folder = tmp_path / "tb" / sinks_mod.readable_name(KIND, load_run(run.path).config) / run.key
    steps = [e.step for e in accumulator(folder).Scalars("train/loss")]
    assert steps == [r["step"] for r in run.metrics() if "loss" in r]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        train(cfg, runs_dir=runs, callbacks=[sinks_mod.TensorBoard(tmp_path / "tb2")])
    assert "failed to start" not in caplog.text and not (tmp_path / "tb2").exists()
    assert load_run(run.path).state == "done"  # the record is no part of the run's files


def test_live_tensorboard_has_the_hyperparameters_before_the_run_ends(
    stored, tmp_path, monkeypatch
):
    """While the run trains (as a run killed then would leave it), its TensorBoard folder
    already holds the hyperparameters; the experiment with its metrics comes at the end."""
    pytest.importorskip("tensorboard")
    monkeypatch.delenv(sinks_mod.TENSORBOARD_ENV, raising=False)
    _root, cache, _run = stored
    sink = sinks_mod.TensorBoard(tmp_path / "tb")
    seen = []

    class Looks(sinks_mod.Callback):
        def on_step(self, trainer, run, step, record):
            if step == 2:
                seen.append(hparams_of(accumulator(sink.log_dir)))

    cfg = tiny(cache, *STEPS, "seed=2")
    run = train(cfg, runs_dir=tmp_path / "runs", callbacks=[sink, Looks()])
    ((hparams, metrics),) = seen
    assert hparams["seed"] == 2 and hparams["model.d_model"] == 16 and metrics is None
    assert hparams_of(accumulator(sink.log_dir))[1] == set(sinks_mod.final_evaluation(run.summary))
