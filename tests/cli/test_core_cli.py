"""The smallinit CLI: groups, help for every option, one-line errors with exit 2."""

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from smallinit.cli import build_parser, main
from smallinit.core import profiles

GROUPS = ["theory", "toy", "llm", "compare", "figs"]


def run_cli(*args, cwd=None):
    env = dict(os.environ, SMALLINIT_QUIET="1")
    return subprocess.run(
        [sys.executable, "-m", "smallinit", *args], capture_output=True, text=True, cwd=cwd, env=env
    )


def test_top_level_help_lists_every_group(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for group in GROUPS:
        assert f"    {group} " in out


@pytest.mark.parametrize("group", GROUPS)
def test_group_help(group, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([group, "--help"])
    assert exit_.value.code == 0
    assert "usage: smallinit " + group in capsys.readouterr().out


def _parsers(parser, path=()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_every_option_of_every_command_has_help():
    missing = []
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(
                    " ".join(path) + " " + "/".join(action.option_strings or [action.dest])
                )
    assert not missing, f"options without help: {missing}"


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["figs", "--only", "99"], "figure 99 does not exist"),
        (["figs", "--profile", "huge"], "profile 'huge' is not allowed"),
        (["nosuchgroup"], "invalid choice"),
        (["compare", "gammas=0.5,abc"], "gammas[1]='abc' is not allowed; it must be a number"),
        (["toy", "scan", "--gammas", "0.5"], "unrecognized arguments: --gammas"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, fragment):
    proc = run_cli(*args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert fragment in lines[0]
    assert "Traceback" not in proc.stderr


def test_user_error_inside_a_command_exits_2_without_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "smallinit", "llm", "train", "--config", "nope"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "smallinit: error: config 'nope' is neither a file nor a packaged config "
        f"({', '.join(profiles.names())})"
    )


def test_console_script_is_installed():
    script = Path(sys.executable).parent / "smallinit"
    assert script.exists(), "the smallinit console script is missing from the venv"
    proc = subprocess.run([str(script), "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("smallinit ")


def test_closed_pipe_ends_quietly():
    """`smallinit theory schemes | head -1` must not print a BrokenPipeError traceback: the
    reader is gone before the command writes anything."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "smallinit", "theory", "schemes"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr


@pytest.mark.parametrize("argv", [["runs", "ls"], ["runs", "ls", "--json"], ["theory", "schemes"]])
def test_a_closed_stdout_ends_quietly(tmp_path, argv):
    """`smallinit runs ls >&-`: standard output closed before the command starts. The
    command runs to its own status, prints no traceback, and the store it reads keeps its
    bytes (no file opened on descriptor 1 receives the listing)."""
    from smallinit.core.store import RunStore

    run = RunStore(tmp_path / "runs").get_or_run("toy-x", {"i": 1}, lambda r: {"v": 1.0})
    before = {p: p.read_bytes() for p in run.path.iterdir()}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "smallinit",
            *argv,
            *(["--runs-dir", str(tmp_path / "runs")] if argv[0] == "runs" else []),
        ],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.close(1),
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    assert {p: p.read_bytes() for p in run.path.iterdir()} == before
