"""Checkpoint files: atomic, unique temp names, proven by their SHA-256, weights-only loads;
and the rule that llm/ has exactly one training loop (one place where a transformer takes a
step)."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest
import torch

from smallinit.llm.training.checkpoint import (
    atomic_torch_save,
    latest_loadable,
    safe_load,
    write_checkpoint,
)

LLM = Path(__file__).resolve().parents[2] / "llm"


def test_atomic_save_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "model.pt"
    atomic_torch_save({"w": torch.ones(3)}, path)
    with pytest.raises(Exception):  # noqa: B017  (a lambda does not pickle)
        atomic_torch_save({"w": lambda: 0}, path)
    assert torch.equal(safe_load(path)["w"], torch.ones(3))
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]  # no temp file left


def test_concurrent_writers_never_share_a_temp_file(tmp_path):
    path = tmp_path / "model.pt"
    errors = []

    def write(i: int) -> None:
        try:
            for _ in range(5):
                atomic_torch_save({"w": torch.full((5000,), float(i))}, path)
        except Exception as err:  # a shared temp name makes one writer's rename fail
            errors.append(err)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    w = safe_load(path)["w"]
    assert float(w[0]) in {0.0, 1.0, 2.0, 3.0} and bool((w == w[0]).all())  # one whole file
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]


def test_latest_loadable_skips_damaged_files_newest_first(tmp_path, caplog):
    ckpt = tmp_path / "checkpoints"
    for step in (10, 20):
        write_checkpoint({"step": step, "x": torch.tensor(step)}, ckpt / f"step-{step:08d}.pt")
    (ckpt / "step-00000030.pt").write_bytes(b"not a zip")  # and no record of its SHA-256
    write_checkpoint({"step": 20}, ckpt / "step-00000040.pt")  # content disagrees with name
    write_checkpoint({"step": 50, "x": torch.tensor(50)}, ckpt / "step-00000050.pt")
    atomic_torch_save({"step": 50, "x": torch.tensor(75)}, ckpt / "step-00000050.pt")  # loads,
    # is consistent, and is not what was recorded
    with caplog.at_level("WARNING"):
        step, state = latest_loadable(tmp_path)
    assert step == 20 and int(state["x"]) == 20
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert all(f"step-000000{s}0.pt" in warned for s in (3, 4, 5))
    assert "step-00000050.pt does not match its manifest (its SHA-256 differs" in warned
    assert sorted(p.name for p in ckpt.iterdir()) == [
        "step-00000010.pt",
        "step-00000010.pt.json",
        "step-00000020.pt",
        "step-00000020.pt.json",
        "step-00000030.pt.damaged",
        "step-00000040.pt.damaged",
        "step-00000040.pt.json.damaged",
        "step-00000050.pt.damaged",
        "step-00000050.pt.json.damaged",
    ]
    for p in ckpt.glob("step-000000[12]0.pt"):
        p.write_bytes(b"")
    assert latest_loadable(tmp_path) == (0, None)  # nothing intact: a fresh start


def _code_lines(path: Path):
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        code = line.split("#", 1)[0]
        if code.strip() and not code.strip().startswith(('"', "'", "*", ":")):
            yield number, code


def test_llm_has_exactly_one_training_loop():
    """Every transformer experiment trains through smallinit.llm.training.train.Trainer:
    one ``.backward()`` and one optimizer ``.step()`` in all of llm/."""
    backward, step = [], []
    for path in sorted(LLM.rglob("*.py")):
        for number, code in _code_lines(path):
            where = f"{path.relative_to(LLM.parent)}:{number}"
            if re.search(r"\.backward\(", code):
                backward.append(where)
            if re.search(r"\b\w*(opt|optim|optimizer)\w*\.step\(", code) or re.search(
                r"\.step\(\s*\)", code
            ):
                step.append(where)
    assert len(backward) == 1 and backward[0].startswith("llm/training/train.py:"), backward
    assert len(step) == 1 and step[0].startswith("llm/training/train.py:"), step
    assert "optimizer.step()" in (LLM.parent / step[0].split(":")[0]).read_text()


def test_every_torch_load_in_llm_is_weights_only():
    loads = []
    for path in sorted(LLM.rglob("*.py")):
        for number, code in _code_lines(path):
            if "torch.load(" in code:
                loads.append((f"{path.relative_to(LLM.parent)}:{number}", code))
    assert loads  # the checkpoint module's safe_load at least
    assert all("weights_only=True" in code for _, code in loads), loads
