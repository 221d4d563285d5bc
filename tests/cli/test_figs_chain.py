"""How far ``smallinit figs --only 7`` is from the one ``optimizer.step()``: a real run
through the real entry point, at a tiny overlay of the quick profile, with the training
step watched from inside ``llm/training/train.py``."""

from __future__ import annotations

import traceback
from pathlib import Path

import smallinit
from smallinit.cli import main
from smallinit.llm.training import train as train_module

ROOT = Path(smallinit.__file__).resolve().parents[1]  # the checkout: every folder is ours
MOST_FILES = 8

TINY = [
    "llm-sweeps.plan.sizes=[32]",
    "llm-sweeps.plan.gammas=[0.5]",
    "llm-sweeps.plan.baselines=[]",
    "llm-sweeps.plan.seeds=[0]",
    "llm-sweeps.base.train.steps=2",
    "llm-sweeps.base.train.warmup=0",
    "llm-sweeps.base.train.checkpoint_every=0",
    "llm-sweeps.base.train.log_every=1",
    "llm-sweeps.base.data.synthetic_items=200",
    "llm-sweeps.base.data.synthetic_val_items=100",
    "llm-sweeps.base.eval.answer_items=10",
    "llm-sweeps.base.eval.token_windows=4",
]


def our_files(stack: traceback.StackSummary) -> list[str]:
    """The distinct files of the package on ``stack``, outermost first (this test left out)."""
    files: list[str] = []
    for frame in stack:
        path = Path(frame.filename).resolve()
        ours = (
            path.is_file()
            and path.is_relative_to(ROOT)
            and path.parts[len(ROOT.parts)] not in ("tests", ".venv")
        )
        if ours:
            name = str(path.relative_to(ROOT))
            if name not in files:
                files.append(name)
    return files


def test_figs_only_7_reaches_the_optimizer_step_through_at_most_8_files(tmp_path, monkeypatch):
    stacks: list[list[str]] = []
    step = train_module.train_step

    def watched(*args, **kwargs):
        stack = traceback.extract_stack()[:-1]  # this function left out
        assert Path(stack[-1].filename).name == "train.py"  # called by the loop itself
        stacks.append(our_files(stack))
        return step(*args, **kwargs)

    monkeypatch.setattr(train_module, "train_step", watched)
    status = main(
        [
            "-q",
            "figs",
            "--profile",
            "quick",
            "--only",
            "7",
            "--workers",
            "1",  # the run trains in this process, where the step is watched
            "--population",
            "off",
            "--runs-dir",
            str(tmp_path / "runs"),
            "--out",
            str(tmp_path / "out"),
            *TINY,
        ]
    )
    assert status == 0
    assert stacks, "no training step was taken"
    chains = {tuple(files) for files in stacks}
    for files in chains:
        listed = "\n  ".join(files)
        assert files[0] == "cli/__init__.py" and "llm/training/train.py" in files, listed
        assert len(files) <= MOST_FILES, (
            f"{len(files)} files from `smallinit figs --only 7` to optimizer.step "
            f"(at most {MOST_FILES}):\n  {listed}"
        )
