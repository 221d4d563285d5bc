"""``smallinit runs show KEY --command`` and ``figs --plan --commands``: one shell command per
run of a plan that recomputes exactly that run (:mod:`smallinit.study.run_commands`).

The check runs nothing: each printed command goes through the CLI's own parser and config
path with ``--print-key`` (the dry mode every run command has), which prints the KIND/KEY
the command would run under; it must be the plan's."""

from __future__ import annotations

import random
import shlex

import pytest

from smallinit.cli import main
from smallinit.core import profiles
from smallinit.core.config import override, parse_overrides
from smallinit.core.runs import config_key
from smallinit.llm.training.lr_choice import TunedSpec
from smallinit.study import run_commands
from smallinit.study.experiments import planned

SAMPLE = 20  # runs per profile
SEED = 2026  # the sample's seed
TUNED_LR = 0.00123  # a stand-in for a tuned run's chosen learning rate (no tuning runs here)
CHOSEN = TunedSpec.chosen  # the real one: lr* from the tuning runs in the store


@pytest.fixture(autouse=True)
def tuned_rate(monkeypatch):
    """A tuned run's lr* without its tuning runs: the store is not consulted."""
    monkeypatch.setattr(
        TunedSpec,
        "chosen",
        lambda self, store, compute=False: override(self.config, {"train.lr": TUNED_LR}),
    )


@pytest.fixture(scope="module")
def plans():
    """Each profile's distinct runs, in plan order (built once per profile)."""
    cache = {}

    def distinct(profile):
        if profile not in cache:
            found = {}
            for _, _, spec, _ in planned(profile):
                found.setdefault(spec.ident, spec)
            cache[profile] = list(found.values())
        return cache[profile]

    return distinct


def expected(spec) -> str:
    """KIND/KEY of the run the spec computes (a tuned run: at its chosen rate)."""
    if isinstance(spec, TunedSpec):
        return f"{spec.kind}/{config_key(spec.kind, spec.chosen(None), spec.version)}"
    return f"{spec.kind}/{spec.key}"


def printed_key(command: str, capsys) -> str:
    """What the pasted ``command`` would run under: its KIND/KEY through the CLI's parser
    and config path (``--print-key``), nothing run."""
    argv = shlex.split(command)
    assert argv[0] == "smallinit", command
    capsys.readouterr()
    assert main([*argv[1:], "--print-key"]) == 0, command
    return capsys.readouterr().out.strip()


@pytest.mark.parametrize("profile", profiles.names())
def test_the_printed_command_reproduces_the_key_of_20_runs_of_every_profile(profile, plans, capsys):
    runs = plans(profile)
    sample = random.Random(f"{SEED}:{profile}").sample(runs, min(SAMPLE, len(runs)))
    kinds = {spec.kind for spec in sample}
    assert "llm-train" in kinds, kinds  # every profile's sample reaches the transformers
    for spec in sample:
        command = run_commands.command_of(spec, profile)
        assert printed_key(command, capsys) == expected(spec), command


def test_every_run_kind_of_a_plan_has_a_command_and_reproduces(plans, capsys):
    """Each kind once (the sample above may miss a rare one), at quick and at the largest
    profile, the fig 2 scan and a tuned run included."""
    seen = {}
    for profile in ("quick", "h200"):
        for spec in plans(profile):
            seen.setdefault((type(spec).__name__, spec.kind), (profile, spec))
    assert {kind for _, kind in seen} == set(run_commands.COMMANDS)
    assert ("TunedSpec", "llm-train") in seen
    for profile, spec in seen.values():
        command = run_commands.command_of(spec, profile)
        assert printed_key(command, capsys) == expected(spec), command


def test_a_wrong_or_missing_override_gives_another_key(plans, capsys):
    """The check can fail: the command of fig 2's scan (overrides of the grid) with one
    override dropped, or one value changed, runs under another key."""
    spec = next(
        s for s in plans("quick") if s.kind == "toy-scan" and s.config.widths != (250, 500, 1000)
    )
    command = run_commands.command_of(spec, "quick")
    argv = shlex.split(command)
    assert printed_key(command, capsys) == expected(spec)
    dropped = shlex.join(argv[:-1])
    changed = shlex.join([*argv[:-1], "widths=[250, 500, 1000, 4000]"])
    for wrong in (dropped, changed):
        assert printed_key(wrong, capsys) != expected(spec), wrong
    train = next(s for s in plans("quick") if s.kind == "llm-train")
    wrong = run_commands.command(train.kind, override(train.config, {"seed": 7}), "quick")
    assert printed_key(wrong, capsys) != expected(train)


@pytest.mark.parametrize(
    "value",
    ["gamma:0.5,qk=1.0,depth", 'it\'s a "text" with spaces', "naïve ε", "true", "1e-3", "[1, 2]"],
)
def test_a_string_override_is_quoted_and_read_back_as_that_string(value):
    item = f"init={run_commands.toml_value(value)}"
    (back,) = shlex.split(shlex.join(["x", item]))[1:]
    assert parse_overrides([back]) == {"init": value}


@pytest.mark.parametrize("value", [1, 1.0, 0.1, 1e-12, 3e-3, -0.75, True, [0.5, 1.0], [250, 500]])
def test_a_number_or_list_override_keeps_its_value_and_type(value):
    (back,) = parse_overrides([f"v={run_commands.toml_value(value)}"]).values()
    assert back == value and type(back) is type(value)


def test_runs_show_command_prints_one_line_for_a_key_prefix(plans, capsys, tmp_path):
    spec = next(s for s in plans("quick") if s.kind == "llm-anchor")
    assert (
        main(
            [
                "runs",
                "show",
                spec.key[:10],
                "--command",
                "--profile",
                "quick",
                "--runs-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0] == run_commands.command_of(spec, "quick")
    assert printed_key(lines[0], capsys) == expected(spec)


@pytest.mark.parametrize(
    "ref, fragment",
    [
        ("ffffffffffffffff", "is in no plan of profile quick"),
        ("llm-train/0123abc", "is in no plan of profile quick"),
        ("not-a-key", "neither a run directory"),
    ],
)
def test_runs_show_command_refuses_a_bad_key_in_one_line(ref, fragment, capsys, tmp_path):
    assert (
        main(["runs", "show", ref, "--command", "--profile", "quick", "--runs-dir", str(tmp_path)])
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("smallinit: error: ") and fragment in err


def test_figs_plan_commands_prints_one_command_per_distinct_run(plans, capsys):
    assert main(["figs", "--plan", "--commands", "--only", "1,2,3,4,6"]) == 0
    lines = capsys.readouterr().out.splitlines()
    runs = [s for s in plans("quick") if s.kind.startswith(("toy-", "llm-anchor"))]
    assert len(lines) == len(runs)
    assert all(line.startswith("smallinit ") for line in lines)
    assert main(["figs", "--commands"]) == 2
    assert "applies with --plan only" in capsys.readouterr().err


def test_a_stored_run_of_no_plan_gets_its_command_from_its_config(capsys, tmp_path):
    """An ad hoc run (here a condensation grid no profile plans, stored without computing)
    is found in the store and its command reproduces its key."""
    from smallinit.core.store import RunStore
    from smallinit.toy import condense
    from smallinit.toy.condense import from_profile as config

    cfg = override(config("quick"), {"gammas": [0.5, 0.75], "seed": 9})
    spec = condense.CondenseSpec(cfg)
    RunStore(tmp_path).get_or_run(spec.kind, cfg, lambda run: {}, version=spec.version)
    assert (
        main(
            [
                "runs",
                "show",
                spec.key[:8],
                "--command",
                "--profile",
                "quick",
                "--runs-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    command = capsys.readouterr().out.strip()
    assert "seed=9" in command
    assert printed_key(command, capsys) == expected(spec)


def test_a_tuned_run_without_its_tuning_runs_is_refused_in_one_line(
    plans, capsys, tmp_path, monkeypatch
):
    monkeypatch.setattr(TunedSpec, "chosen", CHOSEN)
    spec = next(s for s in plans("decisive") if isinstance(s, TunedSpec))
    assert (
        main(
            [
                "runs",
                "show",
                spec.key,
                "--command",
                "--profile",
                "decisive",
                "--runs-dir",
                str(tmp_path),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tuned on runs the store does not hold yet" in err
