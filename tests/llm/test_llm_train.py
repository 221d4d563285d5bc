"""Training: loss goes down, a killed run resumes to the same numbers, NaN runs fail, DDP
matches one process, and the CLI drives all of it."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from launch import run_torchrun

from smallinit.cli import main
from smallinit.core.config import load_config
from smallinit.llm.run_config import RunConfig
from smallinit.llm.training.probes import probe_steps
from smallinit.llm.training.train import lr_at, train

TINY = [
    "model.vocab_size=512",
    "model.context=48",
    "model.d_model=48",
    "model.n_layers=2",
    "model.n_heads=4",
    "data.synthetic_items=3000",
    "data.synthetic_val_items=300",
    "data.synthetic_facts=40",
    "train.batch_size=8",
    "train.lr=3e-3",
    "train.warmup=5",
    "train.threads=1",
    "train.log_every=5",
    "train.eval_every=20",
    "train.eval_batches=2",
    "eval.answer_items=30",
    "eval.token_windows=8",
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("llm-cache"))


def tiny(cache: str, *extra: str) -> RunConfig:
    return load_config(RunConfig, None, [*TINY, f"data.cache_dir={cache}", *extra])


def losses(run) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in run.metrics() if "loss" in r]


def test_training_reduces_loss_on_synthetic(cache, tmp_path):
    cfg = tiny(cache, "train.steps=80", "train.checkpoint_every=0", "init=gamma:0.5")
    run = train(cfg, runs_dir=tmp_path)
    assert run.state == "done"
    curve = losses(run)
    first, last = curve[0][1], curve[-1][1]
    summary = run.summary
    # at step 5 the model is near ln(vocab used); after 80 steps it has learned the format
    assert first > 4.0
    assert last < first - 2.5
    assert summary["val_loss"] < first - 2.5
    assert summary["loss_fact"] > 0 and summary["acc_reasoning"] >= 0
    arrays = run.arrays()
    assert arrays["losses"].shape == (8, 48)
    assert math.isclose(float(arrays["losses"].mean()), summary["loss"], rel_tol=1e-5)
    # the same config again reuses the finished run
    again = train(cfg, runs_dir=tmp_path)
    assert again.path == run.path and losses(again) == curve


def test_warmup_cosine_schedule():
    cfg = load_config(
        RunConfig,
        None,
        ["train.steps=110", "train.warmup=10", "train.lr=1.0", "train.min_lr_ratio=0.1"],
    )
    assert lr_at(5, cfg) == pytest.approx(0.5)
    assert lr_at(10, cfg) == pytest.approx(1.0)
    assert lr_at(60, cfg) == pytest.approx(0.55)
    assert lr_at(110, cfg) == pytest.approx(0.1)


KILLER = textwrap.dedent("""
    import os, sys
    from smallinit.core.config import load_config
    from smallinit.llm.training import callbacks as C
    from smallinit.llm.training.train import train
    from smallinit.llm.run_config import RunConfig
    original = C.save_checkpoint
    def save_then_die(run, step, model, optimizer):
        path = original(run, step, model, optimizer)
        if step == int(sys.argv[2]):
            os._exit(9)  # a hard kill: no cleanup, the run stays 'running' with a dead pid
        return path
    C.save_checkpoint = save_then_die
    cfg = load_config(RunConfig, None, sys.argv[3:])
    train(cfg, runs_dir=sys.argv[1])
""")


def test_killed_run_resumes_to_the_same_numbers(cache, tmp_path):
    extra = ["train.steps=40", "train.checkpoint_every=10", "train.eval_every=15"]
    cfg = tiny(cache, *extra)
    straight = train(cfg, runs_dir=tmp_path / "straight")
    args = [*TINY, f"data.cache_dir={cache}", *extra]
    killed = subprocess.run(
        [sys.executable, "-c", KILLER, str(tmp_path / "killed"), "20", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == 9, killed.stderr
    from smallinit.core.store import RunStore
    from smallinit.llm.training.train import KIND, VERSION

    half = RunStore(tmp_path / "killed").run(KIND, cfg, version=VERSION)
    assert half.state == "stale"
    assert max(s for s, _ in losses(half)) == 20
    resumed = train(cfg, runs_dir=tmp_path / "killed")
    assert resumed.state == "done"
    assert losses(resumed) == losses(straight)  # exact, not approximate
    assert [r for r in resumed.metrics() if "val_loss" in r] == [
        r for r in straight.metrics() if "val_loss" in r
    ]
    for key in ("val_loss", "loss", "acc_reasoning", "acc_fact"):
        assert resumed.summary[key] == straight.summary[key]


def test_nan_run_is_recorded_as_failed(cache, tmp_path):
    cfg = tiny(cache, "train.steps=20", "init=fixed:1e30", "train.checkpoint_every=0")
    run = train(cfg, runs_dir=tmp_path)
    status = run.status()
    assert status["state"] == "failed" and status["final"]
    assert "non-finite training loss" in status["reason"] and "step 5" in status["reason"]
    assert losses(run)[-1][1] is None  # the NaN loss is logged as JSON null
    # a final failure is the run's outcome: asking again does not retrain
    assert train(cfg, runs_dir=tmp_path).status()["finished"] == status["finished"]


def test_two_process_ddp_matches_one_process(cache, tmp_path):
    extra = ["train.steps=20", "train.checkpoint_every=10", "train.eval_every=0"]
    single = train(tiny(cache, *extra), runs_dir=tmp_path / "one")
    run_torchrun(
        [
            "--standalone",
            "--nproc_per_node",
            "2",
            "-m",
            "smallinit",
            "-q",
            "llm",
            "train",
            "--runs-dir",
            str(tmp_path / "two"),
            *TINY,
            f"data.cache_dir={cache}",
            *extra,
        ]
    )
    from smallinit.core.store import RunStore
    from smallinit.llm.training.train import KIND, VERSION

    two = RunStore(tmp_path / "two").run(KIND, tiny(cache, *extra), version=VERSION)
    assert two.state == "done"
    a, b = losses(single), losses(two)
    assert [s for s, _ in a] == [s for s, _ in b]
    for (_, la), (_, lb) in zip(a, b, strict=True):
        assert abs(la - lb) < 1e-3 * la  # same global batches; only reduction order differs
    assert abs(two.summary["val_loss"] - single.summary["val_loss"]) < 1e-3


def test_cli_train_eval_and_init_table(cache, tmp_path, capsys):
    runs = str(tmp_path / "runs")
    args = [*TINY, f"data.cache_dir={cache}", "train.steps=10", "train.checkpoint_every=0"]
    assert main(["-q", "llm", "train", "--json", "--runs-dir", runs, *args]) == 0
    printed = json.loads(capsys.readouterr().out)
    run_dir, summary = printed["run"], printed["summary"]
    assert main(["-q", "llm", "eval", run_dir]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["loss"] == pytest.approx(summary["loss"], rel=1e-5)
    assert metrics["acc_fact"] == summary["acc_fact"]
    assert main(["-q", "llm", "eval", "--runs-dir", runs, Path(run_dir).name[:6]]) == 0
    capsys.readouterr()

    assert main(["llm", "init-table", "--config", "quick", "--init", "nanogpt"]) == 0
    table = capsys.readouterr().out
    assert "blocks.3.mlp.down.weight" in table and "mlp_out" in table
    assert (
        main(
            [
                "llm",
                "init-table",
                "--format",
                "json",
                "--model",
                "gpt2",
                "--init",
                "gamma:1.0",
                "model.d_model=64",
                "model.n_heads=4",
                "model.n_layers=2",
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert all(r["gamma_eff"] == pytest.approx(1.0) for r in rows)
    assert {r["part"] for r in rows} == {"embedding", "qk", "vo", "mlp", "mlp_out"}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["llm", "train", "model.n_heads=5"], "not divisible by model.n_heads=5"),
        (["llm", "train", "--config", "nosuch"], "neither a file nor a packaged config"),
        (["llm", "train", "train.stepz=3"], "unknown key config.train.stepz"),
        (["llm", "init-table", "--init", "gamma:x"], "gamma 'x'"),
        (["llm", "eval", "/nonexistent/run"], "matches no run"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(argv, message, capsys, tmp_path):
    assert (
        main(
            [
                *argv[:2],
                *(["--runs-dir", str(tmp_path)] if argv[1] != "init-table" else []),
                *argv[2:],
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


# ----------------------------------------------------------------------------- pinned numbers
PINNED_ARGS = ["train.steps=30", "train.checkpoint_every=15", "train.eval_every=10"]
# Measured for the graded synthetic data (trainer VERSION 2: its corpus and per-task-level
# scores), config TINY + PINNED_ARGS on CPU; ``tok_per_s`` (wall-clock) left out.
# float32 training: other BLAS/SIMD kernels move these by up to 1.6e-6 (4e-7 relative;
# measured with MKL_ENABLE_INSTRUCTIONS=SSE4_2 and ATEN_CPU_CAPABILITY=default or avx2), a
# few float32 ulps of a loss near 4. rel 1e-5 leaves a margin of 25 and still fails when the
# batches, the loss, clipping or the schedule change.
PINNED_REL = 1e-5
PINNED_METRICS = [
    {"loss": 6.4443864822387695, "lr": 0.003, "step": 5, "tokens": 1920},
    {"loss": 5.321763515472412, "lr": 0.0027421729424061793, "step": 10, "tokens": 3840},
    {"step": 10, "val_loss": 4.832913637161255},
    {"loss": 4.669773101806641, "lr": 0.002067172942406179, "step": 15, "tokens": 5760},
    {"loss": 4.286085605621338, "lr": 0.0012328270575938211, "step": 20, "tokens": 7680},
    {"step": 20, "val_loss": 4.134267091751099},
    {"loss": 4.021084785461426, "lr": 0.0005578270575938211, "step": 25, "tokens": 9600},
    {"loss": 4.014583110809326, "lr": 0.00030000000000000003, "step": 30, "tokens": 11520},
    {"step": 30, "val_loss": 3.939316153526306},
]
PINNED_SUMMARY = {
    "acc_anchor": 0.0,
    "acc_anchor_d1": 0.0,
    "acc_anchor_d2": 0.0,
    "acc_anchor_d3": 0.0,
    "acc_arith": 0.0,
    "acc_arith_d1": 0.0,
    "acc_arith_d2": 0.0,
    "acc_arith_d3": 0.0,
    "acc_fact": 0.0,
    "acc_logic": 0.0,
    "acc_logic_d1": 0.0,
    "acc_logic_d2": 0.0,
    "acc_logic_d3": 0.0,
    "acc_reasoning": 0.0,
    "answer_loss_anchor": 4.2913899421691895,
    "answer_loss_anchor_d1": 3.9425698085264727,
    "answer_loss_anchor_d2": 3.9559258853687957,
    "answer_loss_anchor_d3": 4.0003844774686375,
    "answer_loss_arith": 3.8759987354278564,
    "answer_loss_arith_d1": 3.382324446331371,
    "answer_loss_arith_d2": 3.4490085388052054,
    "answer_loss_arith_d3": 3.5647361477216086,
    "answer_loss_fact": 3.6341898441314697,
    "answer_loss_logic": 3.6246821880340576,
    "answer_loss_logic_d1": 4.325136457170759,
    "answer_loss_logic_d2": 4.025157747268676,
    "answer_loss_logic_d3": 3.941296652743691,
    "chance_anchor": 0.01728920118343195,
    "chance_anchor_d1": 0.02564102564102564,
    "chance_anchor_d2": 0.013157894736842105,
    "chance_anchor_d3": 0.0125,
    "chance_arith": 0.05258823529411765,
    "chance_arith_d1": 0.058823529411764705,
    "chance_arith_d2": 0.05,
    "chance_arith_d3": 0.05,
    "chance_logic": 0.038461538461538464,
    "chance_logic_d1": 0.038461538461538464,
    "chance_logic_d2": 0.038461538461538464,
    "chance_logic_d3": 0.038461538461538464,
    "loss": 3.912895441055298,
    "loss_anchor": 4.361438274383545,
    "loss_arith": 3.70695424079895,
    "loss_fact": 3.6408896446228027,
    "loss_logic": 4.092472076416016,
    "majority_anchor_d1": 0.05555555555555555,
    "majority_anchor_d2": 0.05263157894736842,
    "majority_anchor_d3": 0.06666666666666667,
    "majority_arith_d1": 0.09090909090909091,
    "majority_arith_d2": 0.06896551724137931,
    "majority_arith_d3": 0.08333333333333333,
    "majority_logic_d1": 0.07142857142857142,
    "majority_logic_d2": 0.04,
    "majority_logic_d3": 0.05263157894736842,
    "n_anchor_d1": 18,
    "n_anchor_d2": 19,
    "n_anchor_d3": 15,
    "n_arith_d1": 22,
    "n_arith_d2": 29,
    "n_arith_d3": 24,
    "n_logic_d1": 14,
    "n_logic_d2": 25,
    "n_logic_d3": 19,
    "params": 104688,
    "steps": 30,
    "tokens": 11520,
    "train_loss": 4.014583110809326,
    "val_loss": 3.939316153526306,
}


@pytest.mark.kernel_sensitive
def test_numbers_are_pinned(cache, tmp_path):
    """Same config, same numbers as pinned: batches, loss, clipping, schedule, checkpoint
    cadence and final evaluation (the probes, logged beside them, change none of them)."""
    run = train(tiny(cache, *PINNED_ARGS), runs_dir=tmp_path)
    got = [
        {k: v for k, v in r.items() if k != "tok_per_s"} for r in run.metrics() if "probe" not in r
    ]
    assert {r["step"] for r in run.metrics() if "probe" in r} == set(probe_steps(30))
    assert [sorted(r) for r in got] == [sorted(r) for r in PINNED_METRICS]
    for g, w in zip(got, PINNED_METRICS, strict=True):
        assert g == pytest.approx(w, rel=PINNED_REL)
    summary = {k: v for k, v in run.summary.items() if k != "corpus"}
    assert summary == pytest.approx(PINNED_SUMMARY, rel=PINNED_REL)
    assert not list((run.path / "checkpoints").glob("step-*.pt"))  # superseded by model.pt
    assert (run.path / "model.pt").is_file()


# ----------------------------------------------------------------------------- damaged files
class Interrupted(Exception):
    """Stands for a crash right after a checkpoint (the store records a retryable failure)."""


def interrupt_after_checkpoint(monkeypatch, step: int) -> None:
    """Make the trainer stop with :class:`Interrupted` once checkpoint ``step`` is on disk."""
    from smallinit.llm.training import callbacks as T

    original = T.save_checkpoint

    def save_then_stop(run, at, model, optimizer):
        path = original(run, at, model, optimizer)
        if at == step:
            raise Interrupted(f"stopped after checkpoint {at}")
        return path

    monkeypatch.setattr(T, "save_checkpoint", save_then_stop)


def interrupted_after(cfg: RunConfig, step: int, runs_dir: Path, monkeypatch):
    """The run of ``cfg`` under ``runs_dir``, stopped once checkpoint ``step`` is on disk."""
    from smallinit.core.store import RunStore
    from smallinit.llm.training.train import KIND, VERSION

    with monkeypatch.context() as patch:
        interrupt_after_checkpoint(patch, step)
        with pytest.raises(Interrupted):
            train(cfg, runs_dir=runs_dir)
    return RunStore(runs_dir).run(KIND, cfg, version=VERSION)


@pytest.mark.parametrize(
    "damage", ["truncated", "empty", "a tensor scaled by 1.5", "a NaN planted"]
)
def test_damaged_newest_checkpoint_falls_back_to_the_older_one(
    cache, tmp_path, monkeypatch, caplog, damage
):
    extra = ["train.steps=40", "train.checkpoint_every=10", "train.eval_every=15"]
    cfg = tiny(cache, *extra)
    straight = train(cfg, runs_dir=tmp_path / "straight")
    half = interrupted_after(cfg, 30, tmp_path / "broken", monkeypatch)
    newest = half.path / "checkpoints" / "step-00000030.pt"
    assert sorted(p.name for p in newest.parent.glob("step-*.pt")) == [
        "step-00000020.pt",
        newest.name,
    ]
    if damage in ("truncated", "empty"):
        data = newest.read_bytes()
        newest.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"")
    else:  # a checkpoint that loads and is consistent, but is not what was saved
        state = torch.load(newest, weights_only=True)
        weight = state["model"]["tok_emb.weight"]
        if damage == "a NaN planted":
            weight[0, 0] = float("nan")
        else:
            weight.mul_(1.5)
        torch.save(state, newest)
    with caplog.at_level("WARNING"):
        resumed = train(cfg, runs_dir=tmp_path / "broken")
    assert resumed.state == "done"
    assert any("step-00000030.pt" in r.getMessage() for r in caplog.records)
    assert (newest.parent / "step-00000030.pt.damaged").is_file()  # set aside, not retried
    assert losses(resumed) == losses(straight)  # resumed from step 20: exact, not approximate
    assert [r for r in resumed.metrics() if "val_loss" in r] == [
        r for r in straight.metrics() if "val_loss" in r
    ]
    for key in ("val_loss", "loss", "acc_reasoning", "acc_fact"):
        assert resumed.summary[key] == straight.summary[key]


def test_a_damaged_only_checkpoint_restarts_the_run_instead_of_failing_it(
    cache, tmp_path, monkeypatch
):
    """A NaN planted in the one checkpoint there is: the resume sets it aside and trains from
    scratch to the straight run's numbers, rather than resuming into a NaN loss that would
    be stored as a final failure and reused."""
    cfg = tiny(cache, "train.steps=20", "train.checkpoint_every=10", "train.eval_every=0")
    straight = train(cfg, runs_dir=tmp_path / "straight")
    half = interrupted_after(cfg, 10, tmp_path / "broken", monkeypatch)
    (only,) = (half.path / "checkpoints").glob("step-*.pt")
    state = torch.load(only, weights_only=True)
    state["model"]["tok_emb.weight"][0, 0] = float("nan")
    torch.save(state, only)
    resumed = train(cfg, runs_dir=tmp_path / "broken")
    assert resumed.state == "done" and losses(resumed) == losses(straight)
    assert (only.parent / f"{only.name}.damaged").is_file()


class _Payload:
    """A pickle that creates a file when it is unpickled (what a planted file could do)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_planted_pickle_checkpoint_is_refused_and_never_run(cache, tmp_path, caplog):
    import torch

    from smallinit.core.store import RunStore
    from smallinit.llm.training.train import KIND, VERSION

    # the payload is live: an unsafe load runs it
    probe = tmp_path / "probe.pt"
    torch.save({"step": 10, "model": _Payload(tmp_path / "unsafe-load-ran")}, probe)
    torch.load(probe, weights_only=False)
    assert (tmp_path / "unsafe-load-ran").exists()

    extra = ["train.steps=20", "train.checkpoint_every=10", "train.eval_every=0"]
    cfg = tiny(cache, *extra)
    straight = train(cfg, runs_dir=tmp_path / "straight")
    marker = tmp_path / "planted-code-ran"
    run = RunStore(tmp_path / "planted").run(KIND, cfg, version=VERSION)
    (run.path / "checkpoints").mkdir(parents=True)
    torch.save(
        {"step": 10, "model": _Payload(marker)}, run.path / "checkpoints" / "step-00000010.pt"
    )
    with caplog.at_level("WARNING"):
        planted = train(cfg, runs_dir=tmp_path / "planted")
    assert not marker.exists()
    assert any(
        "step-00000010.pt" in r.getMessage() and "unsafe" in r.getMessage() for r in caplog.records
    )
    assert planted.state == "done"  # ignored: trained from scratch, same numbers
    assert losses(planted) == losses(straight)
    assert planted.summary["val_loss"] == straight.summary["val_loss"]


def test_callbacks_get_every_step_and_its_log_record(cache, tmp_path):
    from smallinit.core.store import RunStore
    from smallinit.llm.training.callbacks import Callback
    from smallinit.llm.training.train import KIND, VERSION, Dist, Trainer

    seen = []

    class Recording(Callback):
        def on_step(self, trainer, run, step, record):
            seen.append((step, record))

    cfg = tiny(cache, "train.steps=12", "train.checkpoint_every=0", "train.eval_every=0")
    run = RunStore(tmp_path).get_or_run(
        KIND, cfg, lambda r: Trainer(cfg, Dist(), callbacks=[Recording()]).fit(r), version=VERSION
    )
    assert [s for s, _ in seen] == list(range(1, 13))
    logged = [r for r in run.metrics() if "loss" in r]
    assert [m for _, m in seen if m is not None] == logged  # steps 5, 10 and the last, 12
    assert [s for s, m in seen if m is not None] == [5, 10, 12]


def test_probes_change_nothing_that_is_trained(cache, tmp_path):
    """The same run with the pretraining task's probes and without them: the same weights
    bit for bit and the same training records (what makes a probed run and a plain run of
    one config one run)."""
    from smallinit.core.store import RunStore
    from smallinit.llm.training.train import KIND, VERSION, Dist, LMTask, Trainer

    class Unprobed(LMTask):
        def callbacks(self):
            return []

    cfg = tiny(cache, "train.steps=12", "train.checkpoint_every=5", "train.eval_every=6")
    probed = RunStore(tmp_path / "a").get_or_run(
        KIND, cfg, lambda r: Trainer(cfg, Dist()).fit(r), version=VERSION
    )
    plain = RunStore(tmp_path / "b").get_or_run(
        KIND, cfg, lambda r: Trainer(cfg, Dist(), Unprobed).fit(r), version=VERSION
    )
    assert any("probe" in r for r in probed.metrics())
    assert not any("probe" in r for r in plain.metrics())
    wall = ("tok_per_s",)
    strip = [
        {k: v for k, v in r.items() if k not in wall} for r in probed.metrics() if "probe" not in r
    ]
    assert strip == [{k: v for k, v in r.items() if k not in wall} for r in plain.metrics()]
    a = torch.load(probed.path / "model.pt", weights_only=True)
    b = torch.load(plain.path / "model.pt", weights_only=True)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert probed.summary == plain.summary


def test_a_symlinked_checkpoints_folder_is_refused_and_nothing_outside_changes(
    cache, tmp_path, monkeypatch
):
    from smallinit.core.errors import StoreError
    from smallinit.core.store import RunStore
    from smallinit.llm.training.train import KIND, VERSION

    cfg = tiny(cache, "train.steps=40", "train.checkpoint_every=10", "train.eval_every=0")
    with monkeypatch.context() as patch:
        interrupt_after_checkpoint(patch, 30)
        with pytest.raises(Interrupted):
            train(cfg, runs_dir=tmp_path / "store")
    run = RunStore(tmp_path / "store").run(KIND, cfg, version=VERSION)
    outside = tmp_path / "outside"
    (run.path / "checkpoints").rename(outside)  # what a resume would read, delete and write
    (outside / "step-00000001.pt").write_bytes(b"not a checkpoint: a file of someone else")
    (run.path / "checkpoints").symlink_to(outside, target_is_directory=True)
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    with pytest.raises(StoreError) as err:
        train(cfg, runs_dir=tmp_path / "store")
    assert str(err.value).startswith(f"{run.path / 'checkpoints'} is a symbolic link")
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before


def test_a_damaged_corpus_is_refused_and_the_refusal_is_not_kept(tmp_path, capsys):
    """A rolled ``val.bin`` does not evaluate and a rolled ``train.bin`` does not train; the
    refused run is not recorded as its outcome: with the cache rebuilt it trains, without
    --force, to the numbers of a run on the intact corpus."""
    import numpy as np

    from smallinit.core.store import RunStore
    from smallinit.llm.data import corpus as corpus_mod
    from smallinit.llm.training.train import KIND, VERSION

    cfg = tiny(
        str(tmp_path / "cache"), "train.steps=10", "train.checkpoint_every=0", "train.eval_every=0"
    )
    straight = train(cfg, runs_dir=tmp_path / "straight")
    folder = corpus_mod.prepare(cfg.data, cfg.model.vocab_size)
    for name in ("val.bin", "train.bin"):
        np.roll(np.fromfile(folder / name, np.uint16), 1).tofile(folder / name)
        capsys.readouterr()
        if name == "val.bin":
            argv = ["-q", "llm", "eval", "--runs-dir", str(tmp_path / "straight"), straight.key]
        else:
            argv = [
                "-q",
                "llm",
                "train",
                "--runs-dir",
                str(tmp_path / "again"),
                *TINY,
                f"data.cache_dir={tmp_path / 'cache'}",
                "train.steps=10",
                "train.checkpoint_every=0",
                "train.eval_every=0",
            ]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{folder / name} is damaged (it does not match" in err[0]
        assert f"delete the folder {folder} and run again" in err[0]
    refused = RunStore(tmp_path / "again").run(KIND, cfg, version=VERSION)
    assert refused.state == "failed" and not refused.failed_for_good
    shutil.rmtree(folder)
    again = train(cfg, runs_dir=tmp_path / "again")
    assert again.state == "done" and losses(again) == losses(straight)
