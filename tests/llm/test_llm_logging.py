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
    "model.vocab_size=300", "model.context=16", "model.d_model=16", "model.n_layers=1",
    "model.n_heads=2", "data.synthetic_items=300", "data.synthetic_val_items=50",
    "data.synthetic_facts=20", "train.batch_size=4", "train.threads=1", "train.warmup=0",
    "train.log_every=2", "train.eval_every=0", "train.eval_batches=1",
    "eval.answer_items=4", "eval.token_windows=2",
]
LINE = re.compile(r"train step (\d+)/(\d+) loss (\S+) lr (\S+) tok/s (\d+) elapsed (\S+)s$")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("llm-cache"))


def tiny(cache: str, *extra: str) -> RunConfig:
    return load_config(RunConfig, None, [*TINY, f"data.cache_dir={cache}", *extra])


def loss_records(run) -> list[dict]:
    return [r for r in run.metrics() if "loss" in r]


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
    line = step_line("train", 20, 200, {"loss": 5.81234567, "lr": 0.003, "tok_per_s": 41234.6},
                     3.21)
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


def test_captured_run_logs_one_line_per_log_step_with_its_loss(cache, tmp_path, monkeypatch,
                                                               caplog):
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
    argv = [sys.executable, "-m", "smallinit", "llm", "train", *TINY, f"data.cache_dir={cache}",
            "train.steps=6", "train.checkpoint_every=0", "--runs-dir", str(tmp_path / "runs"),
            "--tensorboard", str(tmp_path / "tb")]
    env = {k: v for k, v in os.environ.items() if k not in ("SMALLINIT_QUIET",
                                                              sinks_mod.TENSORBOARD_ENV)}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = [ln.split(": ", 1)[1] for ln in proc.stderr.splitlines()
             if ln.startswith("INFO smallinit.llm.training.sinks: ")]
    steps = [int(LINE.match(m).group(1)) for m in lines if LINE.match(m)]
    assert steps == [2, 4, 6]
    run = RunStore(tmp_path / "runs").run(KIND, tiny(cache, "train.steps=6",
                                                     "train.checkpoint_every=0"),
                                          version=VERSION)
    assert run.state == "done"
    folder = tmp_path / "tb" / KIND / run.key
    logged = loss_records(run)
    assert tb_scalars(folder, "loss") == [
        (r["step"], pytest.approx(r["loss"], rel=1e-6)) for r in logged]
    assert [s for s, _ in tb_scalars(folder, "lr")] == [2, 4, 6]
    assert tb_scalars(folder, "val_loss") == [(6, pytest.approx(run.summary["val_loss"],
                                                                 rel=1e-6))]


# ----------------------------------------------------------------------------- sinks
def test_callbacks_see_the_stored_records_and_on_step_the_same_ones(cache, tmp_path,
                                                                     monkeypatch):
    monkeypatch.delenv(sinks_mod.TENSORBOARD_ENV, raising=False)
    sink = ListSink()
    cfg = tiny(cache, "train.steps=6", "train.checkpoint_every=0", "train.eval_every=4")
    run = RunStore(tmp_path).get_or_run(
        KIND, cfg, lambda r: Trainer(cfg, Dist(), callbacks=[sink]).fit(r), version=VERSION)
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
    assert [s for s, _ in tb_scalars(tmp_path / "env-tb" / KIND / again.key, "loss")] == [2, 4]


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
    folder = tmp_path / "tb" / KIND / half.key
    assert [s for s, _ in tb_scalars(folder, "loss")] == [5, 10, 15, 20]
    (half.path / "checkpoints" / "step-00000020.pt").unlink()  # resume from step 10
    resumed = train(cfg, runs_dir=tmp_path / "runs",
                    callbacks=[sinks_mod.TensorBoard(tmp_path / "tb")])
    logged = loss_records(resumed)
    assert [r["step"] for r in logged] == [5, 10, 15, 20, 24]
    assert tb_scalars(folder, "loss") == [
        (r["step"], pytest.approx(r["loss"], rel=1e-6)) for r in logged]


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
    assert [r for r in caplog.records if "Broken failed at on_record (OSError: disk full); "
            "dropped" in r.getMessage()]


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
    record = {"step": 3, "loss": 2.5, "ok": True, "name": "x", "probe": {"sink": 0.25,
                                                                           "w": {"rd": 1}}}
    assert sinks_mod.scalars(record) == {"loss": 2.5, "probe/sink": 0.25, "probe/w/rd": 1.0}
