"""The bad-input battery (tests/badinput.py): every case a one-line error, exit 2, no
traceback, no hang, no memory blow-up. The fixture (one tiny trained run, damaged copies of
it, a 50 MB JSONL line, files where folders belong) is built once per session."""

from __future__ import annotations

import badinput
import pytest


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    places = badinput.make_fixture(tmp_path_factory.mktemp("badinput"))
    return {o.case.name: o for o in badinput.run_battery(places)}


def test_the_battery_is_large_and_covers_every_command_group():
    assert len(badinput.CASES) >= 80
    groups = {c.argv[0] for c in badinput.CASES if not c.api}
    assert {"theory", "toy", "llm", "compare", "figs"} <= groups
    assert sum(c.api for c in badinput.CASES) >= 8


@pytest.mark.parametrize(
    ("word", "least"),
    [
        ("nested", 20),  # configs, overrides, store files, task files, HF configs
        ("FIFO", 6),
        ("/dev/", 5),
        ("socket", 1),
        ("symlink loop", 1),  # not regular files
        ("empty", 10),  # empty paths
        ("temperature", 6),
        ("max-new-tokens", 3),
        ("prompt", 4),  # sampling edges
        ("typo", 10),  # misspelled enum values in config dataclasses
        ("ids", 5),
        (" id", 2),  # bad token ids
    ],
)
def test_the_battery_holds_each_family_of_hostile_input(word, least):
    assert sum(word in c.name for c in badinput.CASES) >= least


@pytest.mark.parametrize("name", [c.name for c in badinput.CASES])
def test_bad_input_is_one_clean_line(outcomes, name):
    o = outcomes[name]
    assert o.verdict == "clean", (
        f"{name}: {o.verdict}, status {o.status}, {o.seconds:.1f} s, "
        f"{o.max_rss / 1e6:.0f} MB; stderr: {o.stderr[-800:]}"
    )
