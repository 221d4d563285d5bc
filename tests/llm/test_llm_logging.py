"""Logging where users look: a plain log line per log step when output is not a terminal,
TensorBoard scalars on request, sinks seeing what ``metrics.jsonl`` and ``on_step`` see,
and none of it in the run key."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from smallinit.core.config import load_config
from smallinit.core.progress import bars_shown, step_line
from smallinit.core.runs import config_key
from smallinit.core.store import RunStore
from smallinit.llm.run_config import RunConfig
from smallinit.llm.training import sinks as sinks_mod
from smallinit.llm.training.callbacks import Callback
from smallinit.llm.training.train import KIND, VERSION, Dist, Trainer, train

TINY = [
    "model.vocab_size=300",
    "model.context=16",
    "model.d_model=16",
    "model.n_layers=1",
    "model.n_heads=2",
    "data.synthetic_items=300",
    "data.synthetic_val_items=50",
    "data.synthetic_facts=20",
    "train.batch_size=4",
    "train.threads=1",
    "train.warmup=0",
    "train.log_every=2",
    "train.eval_every=0",
    "train.eval_batches=1",
    "eval.answer_items=4",
    "eval.token_windows=2",
]
LINE = re.compile(r"train step (\d+)/(\d+) loss (\S+) lr (\S+) tok/s (\d+) elapsed (\S+)s$")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("llm-cache"))


def tiny(cache: str, *extra: str) -> RunConfig:
    return load_config(RunConfig, None, [*TINY, f"data.cache_dir={cache}", *extra])


def loss_records(run) -> list[dict]:
    return [r for r in run.metrics() if "loss" in r]


def tb_folder(root: Path, run) -> Path:
    """Where the TensorBoard sink in ``root`` logs ``run``: its readable name, then its key."""
    return root / sinks_mod.readable_name(KIND, run.config) / run.key


def tb_scalars(folder: Path, tag: str) -> list[tuple[int, float]]:
    """(step, value) of every event of ``tag`` in the TensorBoard folder, as TensorBoard's
    own reader sees them (orphaned events of a resumed run purged)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


class ListSink(Callback):
    """Records every point it is called at, as a log sink would see them."""

    optional = True

    def __init__(self):
        self.opened, self.records, self.steps, self.closed = [], [], [], 0

    def on_start(self, trainer, run, step):
        self.opened.append((Path(run.path).name, step, trainer.cfg.train.steps))

    def on_record(self, record):
        self.records.append(record)

    def on_step(self, trainer, run, step, record):
        self.steps.append(record)

    def on_end(self, trainer, run):
        self.closed += 1


# ----------------------------------------------------------------------------- log lines
def test_step_line_format():
    line = step_line(
        "train", 20, 200, {"loss": 5.81234567, "lr": 0.003, "tok_per_s": 41234.6}, 3.21
    )
    assert line == "train step 20/200 loss 5.8123 lr 0.003 tok/s 41235 elapsed 3.2s"
    assert step_line("x", 3, 0, {"lr": 2.5e-5}, 0.04) == "x step 3 lr 2.500e-05 elapsed 0.0s"


def test_bars_hidden_when_stderr_is_not_a_terminal(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    from smallinit.core import progress

    monkeypatch.setattr(progress, "_quiet", False)  # an earlier CLI test may have set it
    monkeypatch.setattr(sys, "stderr", Tty())
    assert bars_shown()
    monkeypatch.setattr(progress, "_quiet", True)  # --quiet hides them on a terminal too
    assert not bars_shown()
    monkeypatch.setattr(progress, "_quiet", False)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not bars_shown()


def test_captured_run_logs_one_line_per_log_step_with_its_loss(
    cache, tmp_path, monkeypatch, caplog
):
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # what a batch job's log file is
    monkeypatch.delenv(sinks_mod.TENSORBOARD_ENV, raising=False)
    cfg = tiny(cache, "train.steps=7", "train.checkpoint_every=0")
    with caplog.at_level(logging.INFO, logger="smallinit.llm.training.sinks"):
        run = train(cfg, runs_dir=tmp_path)
    lines = [r.getMessage() for r in caplog.records if r.name == sinks_mod.log.name]
    train_lines = [m for m in lines if LINE.match(m)]
    logged = loss_records(run)
    assert [r["step"] for r in logged] == [2, 4, 6, 7]  # every log_every steps and the last
    assert len(train_lines) == len(logged)
    for message, record in zip(train_lines, logged, strict=True):
        step, total, loss, lr, tok_s, elapsed = LINE.match(message).groups()
        assert (int(step), int(total)) == (record["step"], 7)
        assert float(loss) == pytest.approx(record["loss"], rel=1e-4)
        assert float(lr) == pytest.approx(record["lr"], rel=1e-4)
        assert int(tok_s) == round(record["tok_per_s"])
        assert float(elapsed) >= 0
    # the final held-out loss has its own line
    assert any(m.startswith("train step 7/7 val_loss ") for m in lines)


def test_no_log_lines_while_the_bar_is_shown(cache, tmp_path, monkeypatch, caplog):
    from smallinit.llm.training import train as T

    monkeypatch.setattr(T, "bars_shown", lambda: True)
    monkeypatch.delenv(sinks_mod.TENSORBOARD_ENV, raising=False)
    cfg = tiny(cache, "train.steps=4", "train.checkpoint_every=0")
    with caplog.at_level(logging.INFO, logger="smallinit.llm.training.sinks"):
        train(cfg, runs_dir=tmp_path)
    assert not [r for r in caplog.records if r.name == sinks_mod.log.name]


def test_cli_train_with_output_piped_logs_lines_and_tensorboard(cache, tmp_path):
    """The real thing: ``smallinit llm train`` with stdout and stderr piped (not a TTY)
    prints a line per log step while it runs, and --tensorboard writes the scalars."""
    pytest.importorskip("tensorboard")
    argv = [
        sys.executable,
        "-m",
        "smallinit",
        "llm",
        "train",
        *TINY,
        f"data.cache_dir={cache}",
        "train.steps=6",
        "train.checkpoint_every=0",
        "--runs-dir",
        str(tmp_path / "runs"),
        "--tensorboard",
        str(tmp_path / "tb"),
    ]
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SMALLINIT_QUIET", sinks_mod.TENSORBOARD_ENV)
    }
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = [
        ln.split(": ", 1)[1]
        for ln in proc.stderr.splitlines()
        if ln.startswith("INFO smallinit.llm.training.sinks: ")
    ]
    steps = [int(LINE.match(m).group(1)) for m in lines if LINE.match(m)]
    assert steps == [2, 4, 6]
    run = RunStore(tmp_path / "runs").run(
        KIND, tiny(cache, "train.steps=6", "train.checkpoint_every=0"), version=VERSION
    )
    assert run.state == "done"
    folder = tb_folder(tmp_path / "tb", run)
    logged = loss_records(run)
    assert tb_scalars(folder, "train/loss") == [
        (r["step"], pytest.approx(r["loss"], rel=1e-6)) for r in logged
    ]
    assert [s for s, _ in tb_scalars(folder, "train/lr")] == [2, 4, 6]
    assert tb_scalars(folder, "eval/val_loss") == [
        (6, pytest.approx(run.summary["val_loss"], rel=1e-6))
    ]


# ----------------------------------------------------------------------------- sinks
def test_callbacks_see_the_stored_records_and_on_step_the_same_ones(cache, tmp_path, monkeypatch):
    monkeypatch.delenv(sinks_mod.TENSORBOARD_ENV, raising=False)
    sink = ListSink()
    cfg = tiny(cache, "train.steps=6", "train.checkpoint_every=0", "train.eval_every=4")
    run = RunStore(tmp_path).get_or_run(
        KIND, cfg, lambda r: Trainer(cfg, Dist(), callbacks=[sink]).fit(r), version=VERSION
    )
    assert sink.records == run.metrics()  # the whole stream: held-out records, probes
    assert any("val_loss" in r for r in sink.records)
    assert any("probe" in r for r in sink.records)
    assert [m for m in sink.steps if m is not None] == loss_records(run)
    assert len(sink.steps) == 6  # every step
    assert sink.opened == [(run.key, 0, 6)] and sink.closed == 1


def test_sinks_leave_the_run_key_alone(cache, tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    monkeypatch.delenv(sinks_mod.TENSORBOARD_ENV, raising=False)
    cfg = tiny(cache, "train.steps=4", "train.checkpoint_every=0")
    with_tb = train(cfg, runs_dir=tmp_path / "runs", callbacks=[sinks_mod.TensorBoard(tmp_path)])
    assert with_tb.key == config_key(KIND, cfg, VERSION)
    plain = train(cfg, runs_dir=tmp_path / "runs")  # no sink: the same run, reused
    assert plain.path == with_tb.path and plain.metrics() == with_tb.metrics()
    # from the environment too (what sweep workers inherit)
    monkeypatch.setenv(sinks_mod.TENSORBOARD_ENV, str(tmp_path / "env-tb"))
    assert [type(s) for s in sinks_mod.sinks_from_env()] == [sinks_mod.TensorBoard]
    again = train(cfg, runs_dir=tmp_path / "runs2")
    assert again.key == with_tb.key
    env_folder = tb_folder(tmp_path / "env-tb", again)
    assert [s for s, _ in tb_scalars(env_folder, "train/loss")] == [2, 4]


def test_resumed_run_purges_what_the_killed_attempt_logged(cache, tmp_path, monkeypatch):
    """A run stopped after checkpoint 20 whose newest checkpoint is then lost resumes from
    10: metrics.jsonl and TensorBoard both keep one value per step (without the purge,
    TensorBoard would show steps 15 and 20 twice)."""
    pytest.importorskip("tensorboard")
    from test_llm_train import Interrupted, interrupt_after_checkpoint

    monkeypatch.delenv(sinks_mod.TENSORBOARD_ENV, raising=False)
    cfg = tiny(cache, "train.steps=24", "train.checkpoint_every=10", "train.log_every=5")
    tb = sinks_mod.TensorBoard(tmp_path / "tb")
    with monkeypatch.context() as patch:
        interrupt_after_checkpoint(patch, 20)
        with pytest.raises(Interrupted):
            train(cfg, runs_dir=tmp_path / "runs", callbacks=[tb])
    half = RunStore(tmp_path / "runs").run(KIND, cfg, version=VERSION)
    folder = tb_folder(tmp_path / "tb", half)
    assert [s for s, _ in tb_scalars(folder, "train/loss")] == [5, 10, 15, 20]
    (half.path / "checkpoints" / "step-00000020.pt").unlink()  # resume from step 10
    resumed = train(
        cfg, runs_dir=tmp_path / "runs", callbacks=[sinks_mod.TensorBoard(tmp_path / "tb")]
    )
    logged = loss_records(resumed)
    assert [r["step"] for r in logged] == [5, 10, 15, 20, 24]
    assert tb_scalars(folder, "train/loss") == [
        (r["step"], pytest.approx(r["loss"], rel=1e-6)) for r in logged
    ]


def test_a_failing_sink_is_dropped_and_training_goes_on(cache, tmp_path, monkeypatch, caplog):
    monkeypatch.delenv(sinks_mod.TENSORBOARD_ENV, raising=False)

    class Broken(ListSink):
        def on_record(self, record):
            raise OSError("disk full")

    broken = Broken()
    cfg = tiny(cache, "train.steps=4", "train.checkpoint_every=0")
    with caplog.at_level(logging.WARNING):
        run = train(cfg, runs_dir=tmp_path, callbacks=[broken])
    assert run.state == "done"
    assert [
        r
        for r in caplog.records
        if "Broken failed at on_record (OSError: disk full); dropped" in r.getMessage()
    ]


def test_tensorboard_sink_refuses_bad_folders_and_a_missing_package(tmp_path, monkeypatch):
    from smallinit.core.errors import ConfigError

    afile = tmp_path / "f"
    afile.write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        sinks_mod.TensorBoard(afile)
    with pytest.raises(ConfigError, match="folder is empty"):
        sinks_mod.TensorBoard(" ")
    monkeypatch.setattr(sinks_mod, "tensorboard_available", lambda: False)
    with pytest.raises(ConfigError, match=r"pip install 'smallinit\[tb\]'"):
        sinks_mod.TensorBoard(tmp_path)


def test_scalars_flatten_numbers_and_skip_the_rest():
    record = {
        "step": 3,
        "loss": 2.5,
        "ok": True,
        "name": "x",
        "probe": {"sink": 0.25, "w": {"rd": 1}},
    }
    assert sinks_mod.scalars(record) == {"loss": 2.5, "probe/sink": 0.25, "probe/w/rd": 1.0}


# ----------------------------------------------------------------------------- groups, W&B
def test_records_go_under_train_eval_and_probe_groups():
    record = {
        "step": 4,
        "loss": 2.5,
        "lr": 1e-3,
        "tokens": 64,
        "tok_per_s": 9.0,
        "acc_seen_train": 0.5,
        "probe": {"sink": 0.25},
        "bad": float("nan"),
    }
    assert sinks_mod.grouped(record) == {
        "train/loss": 2.5,
        "train/lr": 1e-3,
        "train/tokens": 64.0,
        "train/tok_per_s": 9.0,
        "eval/acc_seen_train": 0.5,
        "probe/sink": 0.25,
    }
    assert sinks_mod.grouped({"step": 4, "val_loss": 3.0}) == {"eval/val_loss": 3.0}
    summary = {
        "train_loss": 2.0,
        "val_loss": 2.1,
        "steps": 4,
        "params": 10,
        "tokens": 64,
        "acc_arith_d1": 0.5,
        "chance_arith_d1": 0.1,
        "n_arith_d1": 4,
        "majority_arith_d1": 0.25,
        "answer_loss_arith_d1": 1.5,
        "corpus": {"x": 1},
    }
    assert sinks_mod.final_evaluation(summary) == {
        "eval/val_loss": 2.1,
        "eval/acc_arith_d1": 0.5,
        "eval/answer_loss_arith_d1": 1.5,
    }


def test_tensorboard_has_groups_hparams_and_the_final_evaluation(cache, tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    monkeypatch.delenv(sinks_mod.TENSORBOARD_ENV, raising=False)
    cfg = tiny(cache, "train.steps=6", "train.checkpoint_every=0")
    run = train(cfg, runs_dir=tmp_path / "runs", callbacks=[sinks_mod.TensorBoard(tmp_path)])
    folder = tb_folder(tmp_path, run)
    acc = EventAccumulator(str(folder))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train/loss", "train/lr", "train/tokens", "train/tok_per_s", "eval/val_loss"} <= tags
    assert any(t.startswith("probe/") for t in tags)
    assert not [t for t in tags if "/" not in t]  # nothing flat any more
    final = sinks_mod.final_evaluation(run.summary)
    assert {
        "eval/acc_arith_d1",
        "eval/answer_loss_arith_d1",
        "eval/acc_fact",
        "eval/acc_reasoning",
    } <= set(final)
    for tag, value in final.items():  # each once, at the last step, as the summary has it
        assert [(e.step, e.value) for e in acc.Scalars(tag)] == [(6, pytest.approx(value))]
    content = acc.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(
        content["_hparams_/session_start_info"]
    ).session_start_info
    assert start.hparams["model.d_model"].number_value == 16
    assert start.hparams["init"].string_value == cfg.init
    assert start.hparams["train.steps"].number_value == 6
    experiment = plugin_data_pb2.HParamsPluginData.FromString(
        content["_hparams_/experiment"]
    ).experiment
    assert {m.name.tag for m in experiment.metric_infos} == set(final)


def wandb_records(folder: Path) -> list:
    """The records of every offline W&B run under ``folder`` (``run-<id>.wandb``: W&B's
    append-only log, 32 KiB blocks of chunks with a 7-byte header, each record a
    ``wandb_internal_pb2.Record``), as W&B would upload them."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    runs = []
    for path in sorted(folder.glob("wandb/offline-run-*/run-*.wandb")):
        data, pos, chunks, records = path.read_bytes(), 7, b"", []
        assert data[:4] == b":W&B"
        while pos + 7 <= len(data):
            left = 32768 - pos % 32768
            if left < 7:
                pos += left
                continue
            _crc, size, kind = struct.unpack("<IHB", data[pos : pos + 7])
            if kind == 0 and size == 0:  # the rest of a block is padding
                pos += left
                continue
            chunk, pos = data[pos + 7 : pos + 7 + size], pos + 7 + size
            chunks = chunk if kind in (1, 2) else chunks + chunk
            if kind in (1, 4):  # a full record, or the last chunk of one
                records.append(pb.Record.FromString(chunks))
        runs.append(records)
    return runs


def _items(items) -> dict:
    import json

    return {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}


def test_wandb_sink_offline_logs_groups_config_and_final_evaluation(cache, tmp_path, monkeypatch):
    """W&B in its offline mode (no network): the run's config as the W&B config, every
    record under its group at its step, the final evaluation in the W&B summary; the run
    key is the same as without the sink."""
    pytest.importorskip("wandb")
    monkeypatch.delenv(sinks_mod.TENSORBOARD_ENV, raising=False)
    monkeypatch.delenv(sinks_mod.WANDB_ENV, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = tiny(cache, "train.steps=6", "train.checkpoint_every=0")
    run = train(cfg, runs_dir=tmp_path / "runs", callbacks=[sinks_mod.WandB("smallinit-test")])
    assert run.key == config_key(KIND, cfg, VERSION)
    assert train(cfg, runs_dir=tmp_path / "runs").path == run.path  # reused, no sink
    (records,) = wandb_records(tmp_path)
    (head,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert head.project == "smallinit-test"
    assert head.display_name == sinks_mod.readable_name(KIND, cfg)  # for people, e.g.
    assert head.display_name == f"{KIND}/γ0.5/synthetic/d16/L1/lr0.003/seed0"  # TINY's
    assert list(head.tags) == [run.key]  # the key as a tag
    assert head.run_group == run.key and head.job_type == KIND
    config = _items(head.config.update)
    assert config["model.d_model"] == 16 and config["init"] == cfg.init
    assert config["run_key"] == run.key and config["resumed_from_step"] == 0
    history = [_items(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]
    losses = [(h["_step"], h["train/loss"]) for h in history if "train/loss" in h]
    assert losses == [(r["step"], pytest.approx(r["loss"])) for r in loss_records(run)]
    last = [h for h in history if h["_step"] == 6][-1]
    assert last["eval/val_loss"] == pytest.approx(run.summary["val_loss"])
    summary = {}
    for r in records:
        if r.WhichOneof("record_type") == "summary":
            summary.update(_items(r.summary.update))
    final = sinks_mod.final_evaluation(run.summary)
    assert final and {k: summary[k] for k in final} == pytest.approx(final)


def test_wandb_switch_from_the_environment_and_its_refusals(tmp_path, monkeypatch):
    from smallinit.core.errors import ConfigError

    monkeypatch.delenv(sinks_mod.TENSORBOARD_ENV, raising=False)
    monkeypatch.setenv(sinks_mod.WANDB_ENV, "my-project")
    if sinks_mod.wandb_available():
        (sink,) = sinks_mod.sinks_from_env()
        assert isinstance(sink, sinks_mod.WandB) and sink.project == "my-project"
        # the command-line option wins over the environment
        (sink,) = sinks_mod.chosen_sinks(wandb="other")
        assert sink.project == "other"
    with pytest.raises(ConfigError, match="W&B project is empty"):
        sinks_mod.WandB(" ")
    monkeypatch.setattr(sinks_mod, "wandb_available", lambda: False)
    with pytest.raises(
        ConfigError,
        match=r"SMALLINIT_WANDB=my-project: .*"
        r"pip install 'smallinit\[wandb\]'",
    ):
        sinks_mod.sinks_from_env()


@pytest.mark.parametrize("wandb", [False, True], ids=["plain", "wandb"])
def test_cli_train_prints_a_short_table_and_logs_to_wandb(cache, tmp_path, wandb):
    """``llm train`` without --json: the run line and a short table of the main results
    (not the ~70-entry summary), with or without a sink; ``--wandb`` in offline mode writes
    the W&B run (where the ``wandb`` extra is installed)."""
    if wandb:
        pytest.importorskip("wandb")
    argv = [
        sys.executable,
        "-m",
        "smallinit",
        "llm",
        "train",
        *TINY,
        f"data.cache_dir={cache}",
        "train.steps=6",
        "train.checkpoint_every=0",
        "--runs-dir",
        str(tmp_path / "runs"),
        *(["--wandb", "cli-test"] if wandb else []),
    ]
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (sinks_mod.TENSORBOARD_ENV, sinks_mod.WANDB_ENV)
    }
    env.update(WANDB_MODE="offline", WANDB_DIR=str(tmp_path), WANDB_SILENT="true")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    run = RunStore(tmp_path / "runs").run(
        KIND, tiny(cache, "train.steps=6", "train.checkpoint_every=0"), version=VERSION
    )
    out = proc.stdout.splitlines()
    assert out[0] == f"run {KIND}/{run.key} (done): {run.path}"
    s = run.summary
    assert out[1] == f"params {s['params']:,}  steps 6  tokens {s['tokens']:,}"
    assert out[2] == f"loss      train {s['train_loss']:.3f}   held-out {s['val_loss']:.3f}"
    assert out[3].split() == ["task", "level", "n", "acc", "baseline", "answer", "loss"]
    rows = [line.split() for line in out[4:] if line.startswith(("arith", "anchor", "logic"))]
    assert [(r[0], int(r[1])) for r in rows] == [
        (t, k) for t in ("anchor", "arith", "logic") for k in (1, 2, 3) if f"acc_{t}_d{k}" in s
    ]
    for task, level, n, acc, _base, loss in rows:
        assert int(n) == s[f"n_{task}_d{level}"]
        assert float(acc) == pytest.approx(s[f"acc_{task}_d{level}"], abs=5e-4)
        assert float(loss) == pytest.approx(s[f"answer_loss_{task}_d{level}"], abs=5e-4)
    assert len(out) < 20 and "{" not in proc.stdout  # a table, not the JSON summary
    if not wandb:
        return
    (records,) = wandb_records(tmp_path)
    assert any(
        r.WhichOneof("record_type") == "run" and r.run.project == "cli-test" for r in records
    )
