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
@pytest.mark.parametrize("profile", ["quick", "medium", "full", "fair", "fair-reasoning"])
def test_every_figures_run_keys_are_unchanged(profile):
    recorded = json.loads((DATA / f"run_keys_{profile}.json").read_text())
    assert _keys_by_figure(profile) == recorded


def test_profiles_are_data_with_one_table_per_experiment():
    assert profiles.names()[:2] == ("quick", "full")
    for name in profiles.names():
        tables = set(profiles.load(name))
        assert {"toy-scan", "rd-vs-width", "condense", "initial-condensation", "diagonal",
                "compare", "anchor", "llm-sweeps", "llm-train"} <= tables
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
    assert any(line.startswith("fig  3 initial-condensation") and "activation=xtanh" in line
               for line in out)
    assert sum(" llm-anchor " in line for line in out) == 10  # 6 cells + 2 mechanism + 2 shared
    assert out[-1].endswith("at profile quick")
    assert not any(tmp_path.iterdir())  # nothing ran


@pytest.mark.parametrize("profile, key", [("quick", "bd6a322e6a057b9a"),
                                          ("full", "390ad37ff67f51ad")])
def test_llm_train_config_names_read_the_profiles_unchanged(profile, key):
    """``smallinit llm train --config quick|full`` trains the run of the profile's
    [llm-train] table, under the trainer's current VERSION."""
    import argparse

    from smallinit.cli.llm import load_run_config
    from smallinit.core.runs import config_key
    from smallinit.llm.training import train

    cfg = load_run_config(argparse.Namespace(config=profile, overrides=[]))
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
    for name, keys in (("eps-gating", ("eps_setting", "gated", "gamma")),
                       ("critical-init", ("gamma",)), ("condense-expand", ("gamma",)),
                       ("token-gains", ("gamma",)),
                       ("gain-scaling", ("size", "eps_setting", "gated", "gamma")),
                       ("anchor-scan", ("gamma", "layers", "weight_decay"))):
        assert all(len(s) >= 5 for s in seeds_by(name, *keys).values()), name
    assert len({k[0] for k in seeds_by("gain-scaling", "size")}) >= 3
    assert experiments.specs("gain-scaling", "quick") == []
