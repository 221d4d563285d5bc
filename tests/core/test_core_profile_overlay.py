"""A derived profile (:func:`smallinit.core.profiles.derive`): a packaged profile with a TOML
file and dotted ``key=value`` overrides laid over it, read by name like a packaged one.
Nothing here trains: run keys come from the experiments' specs."""

from __future__ import annotations

import json
import shlex
import tomllib

import pytest

from smallinit.cli import main
from smallinit.core import profiles
from smallinit.core.config import parse_overrides
from smallinit.core.errors import ConfigError
from smallinit.study import experiments, report
from smallinit.study.figs import drawn_at


def _keys(experiment: str, profile: str) -> set[str]:
    return {s.key for s in experiments.specs(experiment, profile)}


def test_no_overlay_is_the_base_itself():
    assert profiles.derive("quick") == "quick"
    assert profiles.derive("quick", overrides={}) == "quick"


def test_the_name_is_deterministic_and_independent_of_the_overrides_order():
    one = profiles.derive(
        "quick", overrides=parse_overrides(["llm-sweeps.plan.seeds=[0]", "anchor.train.steps=200"])
    )
    two = profiles.derive(
        "quick", overrides=parse_overrides(["anchor.train.steps=200", "llm-sweeps.plan.seeds=[0]"])
    )
    nested = profiles.derive(
        "quick",
        overrides={"anchor": {"train": {"steps": 200}}, "llm-sweeps": {"plan": {"seeds": [0]}}},
    )
    assert one == two == nested
    assert one.startswith("quick+") and len(one) == len("quick+") + 8
    int(one.removeprefix("quick+"), 16)
    assert profiles.derive("quick", overrides={"anchor.train.steps": 201}) != one


def test_a_derived_profile_reads_like_a_packaged_one():
    name = profiles.derive("medium", overrides={"anchor.train.steps": 200})
    assert profiles.section(name, "anchor")["train"]["steps"] == 200
    medium = profiles.load("medium")
    derived = profiles.load(name)
    assert derived["anchor"]["train"].pop("steps") == 200
    medium["anchor"]["train"].pop("steps")
    assert derived == medium  # the rest is medium's, quick's base tables included
    assert profiles.path(name) == profiles.path("medium")
    assert name not in profiles.names() and name in profiles.derived()
    assert profiles.exists(name) and not profiles.exists("medium+00000000")
    assert profiles.overlay(name) == ("medium", {"anchor": {"train": {"steps": 200}}})
    assert profiles.derive(*profiles.overlay(name)[:1], overrides=profiles.overlay(name)[1]) == name


def test_seeds_override_gives_a_subset_of_the_base_runs_and_leaves_the_rest_alone():
    name = profiles.derive("quick", overrides=parse_overrides(["llm-sweeps.plan.seeds=[0]"]))
    fewer, quick = _keys("gamma-sweep", name), _keys("gamma-sweep", "quick")
    assert fewer < quick
    for other in ("anchor-scan", "eps-gating", "critical-init", "toy-scan"):
        assert _keys(other, name) == _keys(other, "quick")


def test_anchor_steps_override_changes_every_anchor_run_and_nothing_else():
    name = profiles.derive("quick", overrides=parse_overrides(["anchor.train.steps=200"]))
    assert len(_keys("anchor-scan", name)) == len(_keys("anchor-scan", "quick"))
    assert not _keys("anchor-scan", name) & _keys("anchor-scan", "quick")
    assert _keys("gamma-sweep", name) == _keys("gamma-sweep", "quick")


def test_an_overlay_equal_to_the_base_gives_the_same_runs(tmp_path):
    same = profiles.derive("quick", overrides=parse_overrides(["llm-sweeps.plan.seeds=[0,1]"]))
    assert same == "quick"
    file = tmp_path / "same.toml"
    file.write_text('extends = "quick"\n[llm-sweeps.plan]\nseeds = [0, 1]\n')
    assert profiles.derive("quick", file) == "quick"
    assert _keys("gamma-sweep", profiles.derive("quick", file)) == _keys("gamma-sweep", "quick")


def test_a_file_overlay_then_the_overrides(tmp_path):
    file = tmp_path / "mine.toml"
    file.write_text("[llm-sweeps.plan]\nseeds = [0]\nsizes = [32]\n")
    name = profiles.derive("quick", file, {"llm-sweeps.plan.sizes": [48]})
    plan = profiles.section(name, "llm-sweeps")["plan"]
    assert (plan["seeds"], plan["sizes"]) == ([0], [48])
    assert name == profiles.derive(
        "quick", overrides={"llm-sweeps.plan.seeds": [0], "llm-sweeps.plan.sizes": [48]}
    )


def test_a_key_another_packaged_profile_states_is_allowed():
    name = profiles.derive("quick", overrides={"llm-sweeps.plan.grid_seeds": [0]})  # medium's
    assert profiles.section(name, "llm-sweeps")["plan"]["grid_seeds"] == [0]


@pytest.mark.parametrize(
    ("text", "extends"),
    [
        ('extends = "full"\n[anchor.train]\nsteps = 3\n', "'full'"),
        ("extends = 3\n", "3"),
    ],
)
def test_a_file_extending_another_profile_is_one_line(tmp_path, text, extends):
    file = tmp_path / "other.toml"
    file.write_text(text)
    with pytest.raises(
        ConfigError, match=f"extends = {extends}, but it is laid over profile 'quick'"
    ) as err:
        profiles.derive("quick", file)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("override", "named", "allowed"),
    [
        ("llm-sweep.plan.seeds=[0]", "quick.llm-sweep", "anchor, budget, compare"),
        ("llm-sweeps.plan.sedes=[0]", "quick.llm-sweeps.plan.sedes", "seeds, shared_lr_arm"),
        ("anchor.train.stepz=3", "quick.anchor.train.stepz", "steps"),
        ("extends=full", "quick.extends", "anchor"),
    ],
)
def test_a_bad_key_names_it_and_the_keys_allowed_there(override, named, allowed):
    with pytest.raises(ConfigError, match=f"unknown key {named}; allowed keys: .*{allowed}"):
        profiles.derive("quick", overrides=parse_overrides([override]))


def test_a_value_for_a_table_or_a_table_for_a_value_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="quick.anchor.train is a table"):
        profiles.derive("quick", overrides={"anchor.train": 5})
    with pytest.raises(ConfigError, match="quick.anchor.seed is a value"):
        profiles.derive("quick", overrides={"anchor.seed.x": 1})
    with pytest.raises(ConfigError, match="profile 'quick\\+0' does not exist"):
        profiles.derive("quick+0")


# ----------------------------------------------------------------------------- the commands
def _plan(capsys, *argv: str) -> dict:
    assert main(["figs", "--plan", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_figs_plan_with_an_override_lists_fewer_runs(capsys):
    fewer = _plan(capsys, "--only", "7", "llm-sweeps.plan.seeds=[0]")
    every = _plan(capsys, "--only", "7")
    assert fewer["profile"].startswith("quick+") and every["profile"] == "quick"
    assert 0 < fewer["total"]["runs"] < every["total"]["runs"]
    assert {r["key"] for r in fewer["runs"]} < {r["key"] for r in every["runs"]}


def test_figs_and_sweep_take_a_config_file_and_print_the_derived_profile(tmp_path, capsys):
    file = tmp_path / "mine.toml"
    file.write_text('extends = "quick"\n[llm-sweeps.plan]\nsizes = [32]\n')
    assert main(["figs", "--print-config", "--config", str(file), "llm-sweeps.plan.seeds=[0]"]) == 0
    plan = tomllib.loads(capsys.readouterr().out)["llm-sweeps"]["plan"]
    assert (plan["sizes"], plan["seeds"]) == ([32], [0])
    assert (
        main(
            ["llm", "sweep", "--experiment", "gamma-sweep", "--print-config", "--config", str(file)]
        )
        == 0
    )
    assert tomllib.loads(capsys.readouterr().out)["llm-sweeps"]["plan"]["sizes"] == [32]


def test_claims_judge_the_derived_profile(tmp_path, capsys):
    argv = [
        "claims",
        "--json",
        "--runs-dir",
        str(tmp_path / "runs"),
        "--profile",
        "quick",
        "llm-sweeps.plan.seeds=[0]",
    ]
    assert main(argv) == 0
    records = json.loads(capsys.readouterr().out)
    name = profiles.derive("quick", overrides={"llm-sweeps.plan.seeds": [0]})
    assert records and {r["profile"] for r in records} == {name}
    assert {r["verdict"] for r in records} == {"not run"}  # an empty store: nothing trains


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["figs", "--plan", "llm-sweeps.plan.sedes=[0]"],
            "unknown key quick.llm-sweeps.plan.sedes",
        ),
        (["figs", "--plan", "--config", "{other}"], "extends = 'full', but it is laid over"),
        (["claims", "--profile", "quick", "medium", "anchor.train.steps=3"], "give one --profile"),
    ],
)
def test_a_bad_overlay_is_one_line_and_exit_2(tmp_path, capsys, argv, says):
    other = tmp_path / "other.toml"
    other.write_text('extends = "full"\n')
    assert main([a.replace("{other}", str(other)) for a in argv]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if not ln.startswith("INFO ")]
    assert len(err) == 1 and says in err[0]


def test_the_report_keeps_a_derived_profile_for_a_later_process(tmp_path, monkeypatch):
    name = profiles.derive(
        "quick", overrides={"llm-sweeps.plan.seeds": [0], "anchor.init": "gamma:0.8"}
    )
    (tmp_path / "fig07.png").write_bytes(b"png")
    info = report.record_drawn(tmp_path, name, {7: [tmp_path / "fig07.png"]})[7]
    assert (info["profile"], info["base"]) == (name, "quick")
    words = shlex.split(report.profile_args(name))
    assert words[:2] == ["--profile", "quick"]
    assert sorted(words[2:]) == ['anchor.init="gamma:0.8"', "llm-sweeps.plan.seeds=[0]"]
    monkeypatch.setattr(profiles, "_DERIVED", {})  # as a new process finds it
    profiles._load.cache_clear()
    assert not profiles.exists(name)
    assert drawn_at(json.loads((tmp_path / report.MANIFEST).read_text())["7"]) == name
    assert profiles.section(name, "llm-sweeps")["plan"]["seeds"] == [0]
    assert drawn_at({"profile": name, "base": "quick", "overlay": {"nope": 1}}) is None
    assert drawn_at({"profile": "quick", "files": []}) == "quick"
