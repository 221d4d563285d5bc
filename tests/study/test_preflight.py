"""``smallinit figs --preflight``: every profile's runs checked, its data built and one step
of each distinct configuration trained on the CPU, with nothing stored; and what it finds
when something would fail."""

from __future__ import annotations

import json

import pytest
import torch

from smallinit.cli import main
from smallinit.core.config import override
from smallinit.core.memory import ENV
from smallinit.llm.training import train, train_spec
from smallinit.study import experiments, preflight

#: the full profile's corpora are built at this many training items in the default suite
#: (by the same generator rules; the held-out capacity checked at the profile's 2,000,000)
FULL_ITEMS = 20_000


def _by_stage(checks) -> dict[str, list]:
    out: dict[str, list] = {}
    for c in checks:
        out.setdefault(c.stage, []).append(c)
    return out


def test_the_quick_profile_passes_and_nothing_is_stored(tmp_path, monkeypatch, capsys):
    runs, cache = tmp_path / "runs", tmp_path / "cache"
    monkeypatch.setenv("SMALLINIT_CACHE", str(cache))
    assert main(["figs", "--profile", "quick", "--preflight", "--runs-dir", str(runs)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("preflight of profile quick:") and "nothing would fail" in out[-1]
    assert not runs.exists() and not cache.exists()  # no run directory, no cached corpus
    steps = [line for line in out if line.split()[1:2] == ["step"]]
    assert any("llm-anchor" in line for line in steps) and len(steps) >= 5
    assert all(line.startswith("ok") for line in out[:-1] if line[:4] in ("ok  ", "FAIL"))


def test_the_medium_profile_passes():
    checks = preflight.preflight("medium")
    assert all(c.ok for c in checks), [c.line() for c in checks if not c.ok]
    stages = _by_stage(checks)
    assert {c.name for c in stages["runs"]} >= {"llm-train", "llm-anchor", "toy-scan"}
    assert len(stages["corpus"]) == 3 and len(stages["step"]) >= 6


def test_the_full_profile_passes_with_its_corpora_built_smaller(monkeypatch):
    """Every full-profile run checked against the planned H200's memory, its three corpora
    drawn by their own rules at 20,000 training items (capacity checked at 2,000,000), one
    eager step of each distinct configuration (its compile is the slow test's)."""
    monkeypatch.delenv(ENV, raising=False)
    checks = preflight.preflight("full", max_items=FULL_ITEMS, compile=False)
    assert all(c.ok for c in checks), [c.line() for c in checks if not c.ok]
    stages = _by_stage(checks)
    runs = {c.name: c.detail for c in stages["runs"]}
    assert runs["llm-train"].startswith("183 runs") and "38.5 GiB" in runs["llm-train"]
    assert runs["llm-anchor"].startswith("150 runs")
    corpora = [c.detail for c in stages["corpus"]]
    assert sum(f"{FULL_ITEMS:,} of 2,000,000 training items" in d for d in corpora) == 2
    assert any(f"{FULL_ITEMS:,} of 400,000" in d for d in corpora)
    names = " ".join(c.name for c in stages["step"])
    assert "post-norm" in names and "/gated" in names and "compile skipped" in names


def test_what_would_fail_is_found_and_the_rest_still_checked(monkeypatch, tmp_path):
    """A training step beyond the memory limit, a corpus whose held-out items cannot be
    drawn, a step whose loss is not finite: each a failed check naming it."""
    monkeypatch.setenv(ENV, "15M")  # fig 7's training steps at quick: 14 and 16 MiB
    specs, _ = preflight.profile_specs("quick", [7])
    checks = preflight.check_runs(specs)
    failed = [c for c in checks if not c.ok]
    assert failed and all("more than the limit of 15.0 MiB" in c.detail for c in failed)
    assert any(c.ok and c.name == "llm-train" for c in checks)  # the smaller ones pass
    monkeypatch.delenv(ENV)

    full = experiments.specs("gamma-sweep", "full")[0]
    excluded = train_spec.TrainSpec(override(full.config, {"data.synthetic_held_out": "exclusion"}))
    (corpus,) = preflight.data_checks([excluded], FULL_ITEMS, str(tmp_path))
    assert not corpus.ok and "logic level 1" in corpus.detail

    monkeypatch.setattr(train, "train_step", lambda *a, **k: torch.tensor(float("nan")))
    quick = experiments.specs("gamma-sweep", "quick")[:1]
    (step,) = preflight.step_checks(quick, None, str(tmp_path))
    assert not step.ok and "non-finite training loss" in step.detail


def test_the_cli_says_what_failed_and_exits_1(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(ENV, "15M")
    assert (
        main(
            [
                "figs",
                "--profile",
                "quick",
                "--only",
                "7",
                "--preflight",
                "--json",
                "--runs-dir",
                str(tmp_path),
            ]
        )
        == 1
    )
    report = json.loads(capsys.readouterr().out)
    assert report["failed"] > 0 and "would fail" in report["summary"]
    assert main(["figs", "--preflight-items", "100", "--runs-dir", str(tmp_path)]) == 2
    assert main(["figs", "--plan", "--preflight", "--runs-dir", str(tmp_path)]) == 2


def test_distinct_configurations_are_told_by_their_switches_not_their_numbers():
    specs = experiments.specs("gamma-sweep", "quick") + experiments.specs("eps-gating", "quick")
    signatures = {preflight.signature(s) for s in specs}
    inits = {preflight._NUMBER.sub("", s.config.init) for s in specs}
    gated = {s.config.model.gated_attention for s in specs}
    assert len(signatures) == len(inits) + len(gated) - 1  # gating only under gamma:
    cut = train.cut_config(specs[0].config)
    assert cut.model.d_model <= 64 and cut.train.steps == 1 and cut.model.n_layers <= 2
    assert cut.model.vocab_size == specs[0].config.model.vocab_size


@pytest.mark.slow
def test_the_full_profile_passes_with_its_steps_compiled():
    checks = preflight.preflight("full", max_items=FULL_ITEMS)
    assert all(c.ok for c in checks), [c.line() for c in checks if not c.ok]
    assert all("compiled" in c.detail for c in checks if c.stage == "step")


def test_a_gpu_part_states_its_h200_time_and_a_run_past_one_call_must_resume(monkeypatch):
    """Each figure with runs meant for a GPU is a part: its H200 minutes and memory are
    stated, and a run longer than one device call passes only if it keeps checkpoints."""
    from smallinit.core import profiles
    from smallinit.study import preflight as pf

    assert pf.part_checks("quick", [8]) == []  # quick trains on the CPU: no GPU part
    gpu = profiles.derive("quick", overrides={"llm-sweeps.base.train.device": "cuda"})
    [part] = pf.part_checks(gpu, [8])
    assert part.ok and part.stage == "part" and "H200-min" in part.detail
    monkeypatch.setattr(pf, "PART_LIMIT_S", 1e-6)  # every run now outlasts a call
    [part] = pf.part_checks(gpu, [8])
    assert part.ok and "checkpoints every 100 steps" in part.detail  # quick's base: resumes
    once = profiles.derive(
        "quick",
        overrides={
            "llm-sweeps.base.train.device": "cuda",
            "llm-sweeps.base.train.checkpoint_every": 0,
        },
    )
    [part] = pf.part_checks(once, [8])
    assert not part.ok and "keep no checkpoints" in part.detail


@pytest.mark.skipif(torch.cuda.is_available(), reason="the path of a machine without a GPU")
def test_a_cuda_run_is_held_to_the_h200_here_and_trialled_on_the_cpu(tmp_path):
    """h200's runs name the CUDA device: on a machine without one they are checked against
    the planned H200's memory (not refused), and a trial step runs on the CPU; a cut config
    evaluates along the way at no step past its one (fair's eval.at_steps)."""
    sweep = experiments.specs("gamma-sweep", "h200")[:1]
    anchor = experiments.specs("anchor-scan", "h200")[:1]
    assert {s.config.train.device for s in sweep + anchor} == {"cuda"}
    checks = preflight.check_runs(sweep + anchor)
    assert checks and all(c.ok for c in checks), [c.line() for c in checks]
    (step,) = preflight.step_checks(anchor, None, str(tmp_path))
    assert step.ok, step.detail
    fair = experiments.specs("gamma-sweep", "fair")[0].config
    assert fair.eval.at_steps and train.cut_config(fair).eval.at_steps == ()
