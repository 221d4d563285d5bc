"""One meaning per flag: ``--config FILE`` is an overlay in every command that has it, in
the one order (``smallinit.cli.util.PRECEDENCE``): the defaults in code < ``--profile P`` <
``--config FILE`` < ``KEY=VALUE``; and the defaults live in code, not in a profile."""

from __future__ import annotations

import tomllib

import pytest

from smallinit.cli import main
from smallinit.cli.util import PRECEDENCE
from smallinit.core import profiles


def printed(argv, capsys) -> dict:
    capsys.readouterr()
    assert main([*argv, "--print-config"]) == 0, argv
    return tomllib.loads(capsys.readouterr().out)


def test_the_order_is_stated_once():
    assert [p.split()[0] for p in PRECEDENCE] == ["the", "--profile", "--config", "KEY=VALUE"]


@pytest.mark.parametrize(
    "argv, file_text, key, file_value, profile_key",
    [
        (["toy", "scan", "--profile", "full"], "seeds = 7\n", "seeds", 7, "widths"),
        (["toy", "condense", "--profile", "full"], "seed = 3\n", "seed", 3, "width"),
        (["compare", "--profile", "full"], "toy_seeds = 7\n", "toy_seeds", 7, "widths"),
        (["llm", "anchor", "--profile", "full"], "seed = 4\n", "seed", 4, "model"),
        (["llm", "train", "--profile", "full"], "seed = 4\n", "seed", 4, "model"),
    ],
)
def test_config_file_is_laid_over_the_profile_and_under_the_overrides(
    argv, file_text, key, file_value, profile_key, capsys, tmp_path
):
    file = tmp_path / "overlay.toml"
    file.write_text(file_text)
    at_profile = printed(argv, capsys)
    with_file = printed([*argv, "--config", str(file)], capsys)
    assert with_file[key] == file_value != at_profile.get(key)
    # every key the file leaves out keeps the profile's value (an overlay, not "instead of")
    assert with_file[profile_key] == at_profile[profile_key]
    assert {k: v for k, v in with_file.items() if k != key} == {
        k: v for k, v in at_profile.items() if k != key
    }
    # and a KEY=VALUE override wins over the file
    assert printed([*argv, "--config", str(file), f"{key}=6"], capsys)[key] == 6


def test_config_naming_a_profile_is_the_older_spelling_of_profile(capsys):
    new = printed(["llm", "train", "--profile", "quick"], capsys)
    capsys.readouterr()
    assert main(["llm", "train", "--config", "quick", "--print-config"]) == 0
    out, err = capsys.readouterr()
    assert tomllib.loads(out) == new
    assert "write --profile quick" in err and err.count("\n") == 1
    assert main(["llm", "train", "--config", "quick", "--profile", "full"]) == 2
    assert "give one profile" in capsys.readouterr().err


def test_the_defaults_live_in_code_not_in_a_profile(monkeypatch):
    """Building the toy scan's and the comparison's defaults reads no profile."""
    from smallinit.compare.comparison import CompareConfig
    from smallinit.toy.scan import ScanConfig
    from smallinit.toy.scan import from_profile as config

    def refuse(*args, **kwargs):
        raise AssertionError("a default read a profile")

    monkeypatch.setattr(profiles, "section", refuse)
    monkeypatch.setattr(profiles, "load", refuse)
    scan, compare = ScanConfig(), CompareConfig()
    monkeypatch.undo()
    # quick states the same grid: its [toy-scan] table changes none of these fields
    assert (scan.gammas, scan.gamma_primes, scan.widths) == (
        config("quick").gammas,
        config("quick").gamma_primes,
        config("quick").widths,
    )
    assert compare.widths == (32, 64, 128)
