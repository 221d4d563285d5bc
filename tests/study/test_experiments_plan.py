"""The registry lists every figure's runs without computing them, and every run key stays
what tests/data/run_keys_<profile>.json records: a deliberate key change (a new VERSION, a
changed profile) updates those files, and ``smallinit figs --plan --profile P --json``
lists the new keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from smallinit.core import profiles
from smallinit.core.errors import ConfigError
from smallinit.study import experiments

DATA = Path(__file__).resolve().parents[1] / "data"


def _keys_by_figure(profile: str) -> dict[str, list[list[str]]]:
    out: dict[str, set] = {}
    for row in experiments.plan(profile):  # fig 5: compare and its transformers
        out.setdefault(str(row["figure"]), set()).add((row["kind"], row["key"]))
    return {f: sorted([list(k) for k in v]) for f, v in out.items()}


@pytest.mark.kernel_sensitive  # keys hash floats: no SIMD-computed one may enter
@pytest.mark.parametrize(
    "profile", ["quick", "medium", "full", "fair", "fair-reasoning", "decisive", "h200"]
)
def test_every_figures_run_keys_are_unchanged(profile):
    recorded = json.loads((DATA / f"run_keys_{profile}.json").read_text())
    assert _keys_by_figure(profile) == recorded


def test_profiles_are_data_with_one_table_per_experiment():
    assert profiles.names()[:2] == ("quick", "full")
    for name in profiles.names():
        tables = set(profiles.load(name))
        assert {
            "toy-scan",
            "rd-vs-width",
            "condense",
            "initial-condensation",
            "diagonal",
            "compare",
            "anchor",
            "llm-sweeps",
            "llm-train",
        } <= tables
    assert "medium" in profiles.names()
    with pytest.raises(ConfigError, match="profile 'huge' does not exist"):
        profiles.path("huge")


def test_every_experiment_names_its_figures_and_shares_runs():
    from smallinit.study.figs import FIGURES

    assert {f for e in experiments.EXPERIMENTS.values() for f in e.figures} <= set(FIGURES)
    rows = experiments.plan("quick")
    keys = {}
    for r in rows:
        keys.setdefault(r["experiment"], set()).add(r["key"])
    assert keys["token-gains"] <= keys["critical-init"]  # fig 11 reuses fig 9's runs
    assert len({(r["kind"], r["key"]) for r in rows}) < len(rows)


def test_cli_plan_lists_runs_without_computing(tmp_path, capsys):
    from smallinit.cli import main

    assert main(["figs", "--plan", "--only", "3,6", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(
        line.startswith("fig  3 initial-condensation") and "activation=xtanh" in line
        for line in out
    )
    assert sum(" llm-anchor " in line for line in out) == 10  # 6 cells + 2 mechanism + 2 shared
    assert out[-1].endswith("at profile quick")
    assert not any(tmp_path.iterdir())  # nothing ran


@pytest.mark.parametrize(
    "profile, key", [("quick", "bd6a322e6a057b9a"), ("full", "390ad37ff67f51ad")]
)
def test_llm_train_config_names_read_the_profiles_unchanged(profile, key):
    """``smallinit llm train --profile quick|full`` trains the run of the profile's
    [llm-train] table, under the trainer's current VERSION."""
    import argparse

    from smallinit.cli.llm_config import load_run_config
    from smallinit.core.runs import config_key
    from smallinit.llm.training import train

    cfg = load_run_config(argparse.Namespace(profile=profile, config=None, overrides=[]))
    assert config_key(train.KIND, cfg, train.VERSION) == key


def test_medium_gives_every_compared_setting_five_seeds():
    """γ = 1 against γ = 0.5 at every fig 7 size, fig 8's ε × gating, fig 9's grid, figs 10
    and 11 and the scaling experiment (≥ 3 sizes) each with ≥ 5 seeds; the anchor scan too.
    Quick has no scaling runs."""

    def seeds_by(experiment, *keys):
        out = {}
        for job in experiments.specs(experiment, "medium"):
            out.setdefault(tuple(job.tags.get(k) for k in keys), set()).add(job.tags["seed"])
        return out

    sweep = seeds_by("gamma-sweep", "size", "gamma")
    assert len({size for size, _ in sweep}) >= 3
    assert all(len(sweep[(size, g)]) >= 5 for size, _ in sweep for g in (0.5, 1.0))
    for name, keys in (
        ("eps-gating", ("eps_setting", "gated", "gamma")),
        ("critical-init", ("gamma",)),
        ("condense-expand", ("gamma",)),
        ("token-gains", ("gamma",)),
        ("gain-scaling", ("size", "eps_setting", "gated", "gamma")),
        ("anchor-scan", ("gamma", "layers", "weight_decay")),
    ):
        assert all(len(s) >= 5 for s in seeds_by(name, *keys).values()), name
    assert len({k[0] for k in seeds_by("gain-scaling", "size")}) >= 3
    assert experiments.specs("gain-scaling", "quick") == []


def _seeds_by(profile, experiment, *keys):
    out = {}
    for job in experiments.specs(experiment, profile):
        out.setdefault(tuple(job.tags.get(k) for k in keys), set()).add(job.tags["seed"])
    return out


def test_decisive_gives_fairs_headline_the_power_and_tuning_of_13_2():
    """d_model 128 alone, γ 0.5 against 1 with >= 10 report seeds each, learning rates
    tuned on >= 3 seeds none of which reports (docs/science.md §13.2, 1-2); the cut arms
    have no runs. Fair's own keys stay (the key test above)."""
    from smallinit.study.experiments import llm_plan

    the_plan = llm_plan.plan("decisive")
    sweep = _seeds_by("decisive", "gamma-sweep", "size", "gamma", "arm")
    assert set(sweep) == {(128, 0.5, None), (128, 1.0, None)}
    report = set.union(*sweep.values())
    assert all(len(s) >= 10 for s in sweep.values())
    tuning = {s.config.seed for s in llm_plan.tuning("decisive")}
    assert len(tuning) >= 3 and not tuning & report and set(the_plan.tune_seeds) == tuning
    for cut in ("eps-gating", "anchor-scan", "critical-init", "gain-scaling"):
        assert experiments.specs(cut, "decisive") == [], cut


def test_h200_runs_on_cuda_with_its_seeds_sizes_arms_and_anchor_budget_curve():
    from smallinit.study.experiments import llm_plan

    the_plan = llm_plan.plan("h200")
    assert min(the_plan.sizes) == 64 and max(the_plan.sizes) == 512
    assert set(the_plan.gammas) == {0.5, 0.75, 1.0} == set(the_plan.eps_gammas)
    sweep = _seeds_by("h200", "gamma-sweep", "size", "gamma", "arm")
    headline = max(the_plan.sizes)
    assert all(len(sweep[(headline, g, None)]) >= 20 for g in the_plan.gammas)
    assert len(sweep[(headline, 1.0, "shared_lr")]) >= 20
    assert len(sweep[(headline, 1.0, "weight_decay")]) >= 20  # the (γ, λ) arm
    eps = _seeds_by("h200", "eps-gating", "eps_setting", "gated", "gamma")
    assert len(eps) == 2 * 2 * 3 and all(len(s) >= 5 for s in eps.values())
    tuning = {s.config.seed for s in llm_plan.tuning("h200")}
    assert len(tuning) >= 3 and not tuning & set(the_plan.seeds)
    specs = [
        s
        for e in ("gamma-sweep", "eps-gating", "anchor-scan")
        for s in experiments.specs(e, "h200")
    ]
    assert {s.config.train.device for s in specs} == {"cuda"}
    fair_anchor = profiles.section("fair", "anchor")["train"]
    budget = [s for s in experiments.specs("anchor-scan", "h200") if s.tags["panel"] == "budget"]
    samples = {
        (s.tags["d_model"], s.config.train.steps * s.config.train.batch_size) for s in budget
    }
    fair_samples = fair_anchor["steps"] * fair_anchor["batch_size"]
    assert samples == {(d, m * fair_samples) for d in (128, 400) for m in (8, 64)}
    assert {s.config.model.d_model for s in budget} == {128, 400}
    assert {s.tags["gamma"] for s in budget} == {0.5, 0.8}


def test_the_plan_shows_the_populations_a_cuda_profile_forms_on_its_gpu():
    """On a machine without a GPU, `figs --plan` (population auto) still groups h200's CUDA
    runs by shape, as the job driver will on the GPU; fair's CPU runs stay alone."""
    rows = experiments.plan("h200", [8])
    assert sum(r["population"] is not None for r in rows) >= len(rows) // 2
    assert all(r["population"] is None for r in experiments.plan("fair", [8]))


def test_an_anchor_budget_scales_steps_warmup_and_evaluation_not_the_batch():
    from smallinit.study.experiments import anchor_scan

    base, scan = anchor_scan.load("fair")
    cfg = anchor_scan.budget_config(base, 8, 400)
    t, b = cfg.train, base.train
    assert (t.steps, t.warmup, t.eval_every) == (8 * b.steps, 8 * b.warmup, 8 * b.eval_every)
    assert t.batch_size == b.batch_size and t.lr == b.lr and cfg.model.d_model == 400
    assert anchor_scan.budget_specs(base, scan) == []  # fair draws no budget curve
    _, none = anchor_scan.load("fair", ["scan.seeds=[]"])
    assert anchor_scan.cell_specs(base, none) + anchor_scan.mechanism_specs(base, none) == []
    with pytest.raises(ConfigError, match="scan.budgets"):
        anchor_scan.load("fair", ["scan.budgets=[0]"])


def test_the_anchor_scan_command_refuses_a_scan_of_no_seeds(tmp_path, capsys):
    from smallinit.cli import main

    assert main(["llm", "anchor-scan", "scan.seeds=[]", "--runs-dir", str(tmp_path)]) == 2
    assert "scan.seeds=[]" in capsys.readouterr().err and not any(tmp_path.iterdir())
