"""The registry lists every figure's runs without computing them, and the refactor of
profiles into TOML kept every run key (tests/data/run_keys_<profile>.json were written by
the code before it). A deliberate key change (a new VERSION, a changed profile) updates
those files: ``smallinit figs --plan --profile P --json`` lists the new keys.

Deliberate changes so far: the canonical init spelling (``gamma:1.0`` → ``gamma:1``) moved
compare's γ = 1 transformer runs of fig 5 to new keys (3 in quick, 4 in full); their
configs are otherwise the same, so their numbers are too. Issue 15 put the published anchor
recipe (1 head, post-LN, 2 layers, lr 2e-4, ~210 epochs, 5 seeds) into full's [anchor]:
fig 6's full keys changed (64 → 320); pre-LN keys elsewhere are unchanged (the new
``model.norm_position`` is key-neutral at its default)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from smallinit import experiments, profiles
from smallinit.errors import ConfigError

DATA = Path(__file__).resolve().parent / "data"


def _keys_by_figure(profile: str) -> dict[str, list[list[str]]]:
    out: dict[str, set] = {}
    for row in experiments.plan(profile):  # fig 5: compare and its transformers
        out.setdefault(str(row["figure"]), set()).add((row["kind"], row["key"]))
    return {f: sorted([list(k) for k in v]) for f, v in out.items()}


@pytest.mark.parametrize("profile", ["quick", "full"])
def test_every_figures_run_keys_are_unchanged(profile):
    recorded = json.loads((DATA / f"run_keys_{profile}.json").read_text())
    assert _keys_by_figure(profile) == recorded


def test_profiles_are_data_with_one_table_per_experiment():
    assert profiles.names()[:2] == ("quick", "full")
    for name in profiles.names():
        tables = set(profiles.load(name))
        assert {"toy-scan", "rd-vs-width", "condense", "initial-condensation", "diagonal",
                "compare", "anchor", "llm-sweeps", "llm-train"} <= tables
    with pytest.raises(ConfigError, match="profile 'medium' does not exist"):
        profiles.path("medium")


def test_every_experiment_names_its_figures_and_shares_runs():
    from smallinit.figs import FIGURES

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
    assert sum(" llm-anchor " in line for line in out) == 38
    assert out[-1].endswith("at profile quick")
    assert not any(tmp_path.iterdir())  # nothing ran


@pytest.mark.parametrize("profile, key", [("quick", "89ae4f937b5f4a16"),
                                          ("full", "bb6c624a80cecd43")])
def test_llm_train_config_names_read_the_profiles_unchanged(profile, key):
    """``smallinit llm train --config quick|full`` trains the run the old
    llm/configs/<name>.toml gave (same key)."""
    import argparse

    from smallinit.cli.llm import load_run_config
    from smallinit.llm.training import train
    from smallinit.runs import config_key

    cfg = load_run_config(argparse.Namespace(config=profile, overrides=[]))
    assert config_key(train.KIND, cfg, train.VERSION) == key
