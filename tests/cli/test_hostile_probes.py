"""A hostile driver: some 400 probes of the CLI and the Python API, generated from tables.

Every config field of every command gets values a careless or hostile user may type
(wrong types, NaN and infinities, negatives, huge integers, unicode, empty text, lists and
tables where a scalar belongs), and the CLI's other inputs get theirs: figure numbers,
profiles, profile overlays, paths that are files, folders, FIFOs, devices, dangling links,
loops or below a file, run references, damaged store files, a closed stdout. Each probe
asserts the rule of docs (DEVELOPERS.md, "Standards"):

* the documented exit status: 2 for bad input (``runs verify`` of a damaged run: 1);
* exactly one line on stderr (progress log records aside), naming the bad value or its key;
* no traceback;
* nothing written outside the probe's scratch folders (the working folder stays empty) and
  nothing changed or lost in the store.

The CLI probes call :func:`smallinit.cli.main` in this process (fast); the closed-stdout
probes need a process of their own.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import os
import shutil
import socket
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from smallinit.cli import main
from smallinit.core.config import _hints
from smallinit.core.errors import SmallinitError
from smallinit.core.store import RunStore

# ----------------------------------------------------------------------------- the world
KIND = "toy-probe"


@dataclasses.dataclass
class World:
    root: Path
    store: Path  # a store of three finished runs
    cwd: Path  # the working folder of every probe: it must stay empty
    keys: list[str]
    places: dict[str, str]


def _finished_store(root: Path) -> tuple[Path, list[str]]:
    store = RunStore(root)

    def body(run):
        run.log({"step": 1, "loss": 0.5})
        run.save_arrays(x=np.arange(4.0))
        return {"loss": 0.5}

    return root, [store.get_or_run(KIND, {"i": i}, body).key for i in range(3)]


def _damaged_copies(root: Path, store: Path, key: str) -> dict[str, str]:
    """One store copy per kind of damage to run ``key``; returns {place: copy root}."""

    def status(path: Path) -> None:
        path.write_text(path.read_text()[: len(path.read_text()) // 2])

    def summary(path: Path) -> None:
        path.write_text(path.read_text().replace('"loss": 0.5', '"loss": 1.234'))

    def config(path: Path) -> None:
        path.write_text(path.read_text().replace('"i": 0', '"i": 7'))

    def truncate(path: Path) -> None:
        path.write_bytes(path.read_bytes()[:10])

    def metrics(path: Path) -> None:
        path.write_text(path.read_text().replace("0.5", "0.25"))

    def same_size(path: Path) -> None:
        path.write_text(path.read_text().replace("0.5", "0.7"))

    def flip(path: Path) -> None:
        data = bytearray(path.read_bytes())
        data[-30] ^= 0x01
        path.write_bytes(bytes(data))

    def folder(path: Path) -> None:
        path.unlink()
        path.mkdir()

    def outside(path: Path) -> None:
        target = root / "outside.json"
        target.write_text(path.read_text())
        path.unlink()
        path.symlink_to(target)

    damages = {
        "status_truncated": ("status.json", status),
        "summary_edited": ("status.json", summary),
        "config_edited": ("config.json", config),
        "config_deleted": ("config.json", Path.unlink),
        "arrays_truncated": ("arrays.npz", truncate),
        "metrics_edited": ("metrics.jsonl", metrics),
        "metrics_same_size": ("metrics.jsonl", same_size),
        "arrays_bit_flipped": ("arrays.npz", flip),
        "status_folder": ("status.json", folder),
        "status_symlink_out": ("status.json", outside),
    }
    places = {}
    for place, (name, damage) in damages.items():
        copy = root / "damaged" / place
        shutil.copytree(store, copy, symlinks=True)
        damage(copy / KIND / key / name)
        places[place] = str(copy)
    return places


def _paths(root: Path) -> dict[str, str]:
    """Hostile paths: {place: path}."""
    files = root / "files"
    files.mkdir()
    (files / "file.txt").write_text("not a folder\n")
    (files / "folder").mkdir()
    (files / "not-toml.toml").write_text("this is = = not TOML\n")
    (files / "latin1.toml").write_bytes(b"a = '\xe9'\n")
    (files / "binary.toml").write_bytes(bytes(range(256)))
    (files / "unknown-key.toml").write_text("no_such_key = 1\n")
    (files / "wrong-type.toml").write_text("seed = 'abc'\n")
    (files / "deep.toml").write_text("a = " + "[" * 2000 + "]" * 2000 + "\n")
    os.mkfifo(files / "fifo.toml")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(files / "socket.toml"))
    sock.close()
    (files / "loop.toml").symlink_to("loop.toml")
    (files / "dangling.toml").symlink_to(files / "missing-target.toml")
    return {
        "file": str(files / "file.txt"),
        "folder": str(files / "folder"),
        "below_file": str(files / "file.txt" / "x"),
        "missing": str(files / "missing.toml"),
        "not_toml": str(files / "not-toml.toml"),
        "latin1": str(files / "latin1.toml"),
        "binary": str(files / "binary.toml"),
        "unknown_key": str(files / "unknown-key.toml"),
        "wrong_type": str(files / "wrong-type.toml"),
        "deep": str(files / "deep.toml"),
        "fifo": str(files / "fifo.toml"),
        "socket": str(files / "socket.toml"),
        "loop": str(files / "loop.toml"),
        "dangling": str(files / "dangling.toml"),
        "devnull": os.devnull,
        "empty": "",
    }


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    root = tmp_path_factory.mktemp("hostile")
    store, keys = _finished_store(root / "runs")
    places = {**_paths(root), **_damaged_copies(root, store, keys[0])}
    (root / "cwd").mkdir()
    return World(root, store, root / "cwd", keys, places)


def _snapshot(folder: Path) -> dict[str, str]:
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


# ----------------------------------------------------------------------------- the probes
@dataclasses.dataclass(frozen=True)
class Probe:
    """``argv`` after ``smallinit`` ({place} filled from the world); ``code``: the exit
    status expected; ``names``: one of them must be on the error line; ``stdout_line``: a
    documented status 1 reports on stdout (``runs verify``) with this text."""

    name: str
    argv: tuple[str, ...]
    names: tuple[str, ...] = ()
    code: int = 2
    stdout_line: str = ""
    process: bool = False  # run in a process of its own (closed stdout)
    slow: bool = False  # seconds, not milliseconds: run with -m slow

    def param(self):
        marks = [pytest.mark.slow] if self.slow or self.process else []
        return pytest.param(self, id=self.name, marks=marks)


# --- config fields: bad values by type, refused when the config is loaded (--print-config)
BAD = {
    int: ["abc", "1.5", "true", "[1]", "nan", "{a = 1}", "１", ""],
    float: ["abc", "nan", "inf", "-inf", "true", "[0.5]", "γ", ""],
    bool: ["2", "yes", "1.5", "[true]", "", "nan"],
    "literal": ["no-such-choice", "γ", "", "1", "[1]"],
    "tuple_float": ["abc", "nan", "1,nan", "[[1.0]]", "inf,1", "{a = 1}"],
    "tuple_int": ["abc", "1.5,2", "[[1]]", "nan", "true", "-1,2"],
}
HUGE = "1" + "0" * 20

#: command -> its config class (as "module:Class", imported by the table builder)
CONFIG_COMMANDS = {
    ("toy", "scan"): ("smallinit.toy.scan", "ScanConfig"),
    ("toy", "condense"): ("smallinit.toy.condense", "CondenseConfig"),
    ("toy", "diagonal"): ("smallinit.toy.diagonal", "DiagonalConfig"),
    ("toy", "escape"): ("smallinit.toy.escape", "EscapeConfig"),
    ("compare",): ("smallinit.compare.comparison", "CompareConfig"),
    ("llm", "train"): ("smallinit.llm.run_config", "RunConfig"),
}


def _leaves(cls: type, prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for f in dataclasses.fields(cls):
        tp = _hints(cls)[f.name]
        nested = [a for a in (tp, *typing.get_args(tp)) if dataclasses.is_dataclass(a)]
        if nested:
            out += _leaves(nested[0], prefix + f.name + ".")
        else:
            out.append((prefix + f.name, tp))
    return out


def _kind(tp: Any) -> Any:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) is typing.Literal:
        return "literal"
    if typing.get_origin(tp) is tuple:
        return "tuple_int" if args[0] is int else "tuple_float"
    if args and typing.get_origin(tp) is not None:  # X | None
        return _kind(args[0])
    return tp


def _names(*texts: str) -> tuple[str, ...]:
    """What an error line may name: each text, each comma-separated item of it (brackets
    dropped), and each dotted prefix of it of two parts or more (``anchor.trian``)."""
    out = [t for t in texts if t.strip()]
    out += [item.strip(" []") for t in texts for item in t.split(",") if item.strip(" []")]
    out += [".".join(t.split(".")[:n]) for t in texts for n in range(2, t.count(".") + 1)]
    return tuple(out) or ("''",)


def _config_probes() -> list[Probe]:
    import importlib

    probes = []
    turn = itertools.count()
    for command, (module, name) in CONFIG_COMMANDS.items():
        cls = getattr(importlib.import_module(module), name)
        label = " ".join(command)
        for key, tp in _leaves(cls):
            if command == ("compare",) and key.startswith("llm."):
                continue  # the same fields as llm train's
            kind = _kind(tp)
            values = []
            if kind in BAD:
                bad = BAD[kind]
                values.append(bad[next(turn) % len(bad)])
            if kind in (int, float) and "seed" not in key:
                values.append("-1")
            if kind is int:
                values.append(HUGE)
            for value in values:
                argv = (*command, "--print-config", f"{key}={value}", "--runs-dir", "{runs}")
                name = f"{label} {key}={value}"
                probes.append(Probe(name, argv, names=_names(key.rsplit(".", 1)[-1], value)))
    return probes


# --- figure numbers, profiles, overlays
ONLY = [
    "99",
    "0",
    "-1",
    "1,99",
    "abc",
    "1.5",
    "",
    ",",
    "1;2",
    "nan",
    "1e1",
    "13,14",
    "  ",
    "4,4,x",
    "x" * 300,
]
PROFILES = ["enormous", "", "QUICK", "quick ", "../quick", "quick.toml", "γ", "full/../quick"]
PROFILE_COMMANDS = [
    ("figs", "--print-config"),
    ("toy", "scan", "--print-config"),
    ("compare", "--print-config"),
    ("llm", "anchor", "--print-config"),
]
OVERLAYS = [
    "anchor.train.lr=nan",
    "anchor.train.lr=inf",
    "anchor.train.steps=abc",
    "anchor.train.steps=-1",
    "anchor.train=5",
    "anchor.seed.x=1",
    "=1",
    "nosuch.table.key=1",
    "anchor.trian.steps=3",
    "llm-sweeps.plan.sedes=[0]",
    "anchor.train.steps=[1,2]",
    "anchor.train.steps=" + HUGE,
    "toy-scan.widths=abc",
    f"toy-scan.widths=[2,{HUGE}]",
    "toy-scan.gammas=nan",
    "diagonal.depths=[-1]",
]


def _cli_probes() -> list[Probe]:
    probes = [
        Probe(f"figs --only {v[:20]!r}", ("figs", "--only", v), names=_names(v, repr(v)))
        for v in ONLY
    ]
    for command in PROFILE_COMMANDS:
        for p in PROFILES:
            probes.append(
                Probe(
                    f"{command[0]} {command[1]} --profile {p!r}",
                    (*command, "--profile", p),
                    names=(repr(p), p),
                )
            )
    probes += [
        Probe(
            f"claims --profile {p!r}",
            ("claims", "--profile", p, "--runs-dir", "{runs}"),
            names=(repr(p), p),
        )
        for p in PROFILES
    ]
    probes += [
        Probe(
            f"llm train --config {p!r}",
            ("llm", "train", "--config", p, "--print-config"),
            names=(p,),
        )
        for p in PROFILES
        if p
    ]
    probes += [
        Probe(
            f"figs overlay {o}",
            ("figs", "--plan", o),
            names=_names(*o.split("=", 1), o.split("=", 1)[0].split(".")[-1]),
        )
        for o in OVERLAYS
    ]
    probes += [
        Probe(
            f"figs --print-config overlay {o}",
            ("figs", "--print-config", o),
            names=_names(*o.split("=", 1)),
        )
        for o in ("anchor.train.steps=abc", "toy-scan.widths=abc")
    ]
    return probes


# --- paths
CONFIG_PATHS = [
    "folder",
    "missing",
    "below_file",
    "not_toml",
    "latin1",
    "binary",
    "unknown_key",
    "wrong_type",
    "deep",
    "fifo",
    "socket",
    "loop",
    "dangling",
    "devnull",
    "empty",
]
CONFIG_PATH_COMMANDS = [("toy", "escape"), ("llm", "train"), ("compare",), ("figs",)]
RUNS_DIRS = ["file", "below_file", "fifo", "devnull", "loop", "socket", "empty"]
RUNS_DIR_COMMANDS = [
    ("runs", "ls"),
    ("runs", "verify"),
    ("toy", "escape"),
    ("claims", "--profile", "quick"),
]
#: claims judges every claim before it finds the store missing: ten seconds a probe
CLAIMS_DIRS = ("file", "below_file")


def _path_probes() -> list[Probe]:
    probes = []
    for command in CONFIG_PATH_COMMANDS:
        for place in CONFIG_PATHS:
            if command == ("figs",) and place == "wrong_type":
                continue  # a profile overlay has no seed key: unknown_key covers it
            probes.append(
                Probe(
                    f"{' '.join(command)} --config {place}",
                    (*command, "--print-config", "--config", "{" + place + "}"),
                    names=("{" + place + "}", "seed", "no_such_key"),
                )
            )
    for command in RUNS_DIR_COMMANDS:
        claims = command[0] == "claims"
        for place in CLAIMS_DIRS if claims else RUNS_DIRS:
            probes.append(
                Probe(
                    f"{' '.join(command)} --runs-dir {place}",
                    (*command, "--runs-dir", "{" + place + "}"),
                    names=("{" + place + "}", "''"),
                    slow=claims,
                )
            )
    for place in ("file", "below_file", "devnull"):
        probes.append(
            Probe(
                f"figs --out {place}",
                ("figs", "--only", "4", "--out", "{" + place + "}", "--runs-dir", "{runs}"),
                names=("{" + place + "}",),
            )
        )
    return probes


# --- run references and damaged store files
REFS = [
    "zzzz",
    "../..",
    "/etc",
    "*",
    "ffffffffffffffff",
    "a" * 17,
    f"{KIND}/",
    "nokind/abc",
    "ключ",
    "a\x00b",
    "a" * 5000,
    "abc\ndef",
    " ",
    "-",
    "0" * 16 + "/x",
    "~",
]
DAMAGED = (
    "status_truncated",
    "summary_edited",
    "config_edited",
    "config_deleted",
    "arrays_truncated",
    "metrics_edited",
    "metrics_same_size",
    "arrays_bit_flipped",
    "status_folder",
    "status_symlink_out",
)


#: ``runs show`` checks sizes and shows no array: a same-size change there is for ``verify``
#: (and for every read of the arrays, which checks SHA-256)
SHOW_READS_NOT = ("arrays_bit_flipped",)


def _run_probes() -> list[Probe]:
    probes = []
    for command in (("runs", "show"), ("runs", "verify")):
        for ref in REFS:
            probes.append(
                Probe(
                    f"{' '.join(command)} {ref[:20]!r}",
                    (*command, ref, "--runs-dir", "{runs}"),
                    names=(ref.strip()[:40] or repr(ref), repr(ref)[:40], repr(ref.strip())[:40]),
                )
            )
    for place in DAMAGED:
        probes.append(
            Probe(
                f"runs verify {place}",
                ("runs", "verify", "--runs-dir", "{" + place + "}"),
                code=1,
                stdout_line="1 corrupt",
            )
        )
        if place in SHOW_READS_NOT:
            continue
        probes.append(
            Probe(
                f"runs show {place}",
                ("runs", "show", "{key}", "--runs-dir", "{" + place + "}"),
                code=0,
                stdout_line="corrupt",
            )
        )
    return probes


# --- a closed stdout (a process of its own)
CLOSED = [
    ("runs", "ls", "--runs-dir", "{runs}"),
    ("theory", "schemes"),
    ("runs", "show", "{key}", "--runs-dir", "{runs}"),
    ("runs", "verify", "--runs-dir", "{runs}"),
]


def _closed_probes() -> list[Probe]:
    return [Probe(f"closed stdout: {' '.join(c[:2])}", c, code=120, process=True) for c in CLOSED]


#: bounds at the config level: a step count beyond any run, more threads than any machine
BOUNDS = [
    Probe(
        f"llm train {v}",
        ("llm", "train", "--print-config", v, "--runs-dir", "{runs}"),
        names=_names(*v.split("=")),
    )
    for v in ("train.steps=1e20", "train.threads=100000")
]

PROBES = [
    *_config_probes(),
    *BOUNDS,
    *_cli_probes(),
    *_path_probes(),
    *_run_probes(),
    *_closed_probes(),
]


# ----------------------------------------------------------------------------- running
def _fill(text: str, world: World) -> str:
    places = {**world.places, "runs": str(world.store), "key": world.keys[0]}
    for place, value in places.items():
        text = text.replace("{" + place + "}", value)
    return text


@pytest.fixture
def sandbox(world, monkeypatch):
    monkeypatch.chdir(world.cwd)
    monkeypatch.setenv("SMALLINIT_RUNS", str(world.store))
    monkeypatch.setenv("SMALLINIT_CACHE", str(world.root / "cache"))
    monkeypatch.setenv("SMALLINIT_FIGS_OUT", str(world.root / "figs-out"))
    monkeypatch.delenv("SMALLINIT_DEBUG", raising=False)
    before = _snapshot(world.store)
    yield world
    assert not list(world.cwd.iterdir()), "a probe wrote into the working folder"
    assert _snapshot(world.store) == before, "a probe changed the store"


def _error_lines(err: str) -> list[str]:
    return [
        ln
        for ln in err.splitlines()
        if ln.strip() and not ln.startswith(("INFO ", "DEBUG ", "WARNING "))
    ]


@pytest.mark.parametrize("probe", [p.param() for p in PROBES])
def test_probe(probe: Probe, sandbox, capsys):
    argv = [_fill(a, sandbox) for a in probe.argv]
    if probe.process:
        code, err, out = _closed_stdout(argv, sandbox)
    else:
        try:
            code = main(argv)
        except SystemExit as exit:  # argparse
            code = exit.code
        out, err = capsys.readouterr()
    assert "Traceback" not in err, err[-3000:]
    lines = _error_lines(err)
    if probe.process:
        assert code in (0, 2, 141) and len(lines) <= 1, (code, lines)
        return
    assert code == probe.code, (code, out[-500:], lines)
    if probe.code == 2:
        assert len(lines) == 1, lines
        names = [_fill(n, sandbox) for n in probe.names]
        assert any(n in lines[0] for n in names), (lines[0], names)
    else:
        assert not lines, lines
        assert probe.stdout_line in out, out


def _closed_stdout(argv: list[str], world: World) -> tuple[int, str, str]:
    """``smallinit ARGV >&-``: the process starts with no file descriptor 1."""
    proc = subprocess.run(
        [sys.executable, "-m", "smallinit", *argv],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=world.cwd,
        timeout=300,
        env={**os.environ, "SMALLINIT_RUNS": str(world.store)},
        preexec_fn=lambda: os.close(1),
    )
    return proc.returncode, proc.stderr, ""


# ----------------------------------------------------------------------------- the Python API
API = [
    (
        "load_run unknown key",
        "from smallinit import load_run\nload_run('ffffffffffffffff', runs_dir=RUNS)",
    ),
    ("load_run glob", "from smallinit import load_run\nload_run('*', runs_dir=RUNS)"),
    (
        "load_run absolute non-run",
        "from smallinit import load_run\nload_run('/etc', runs_dir=RUNS)",
    ),
    (
        "verify_runs unknown",
        "from smallinit import verify_runs\nverify_runs(['zzzz'], runs_dir=RUNS)",
    ),
    ("list_runs unknown kind", "from smallinit import list_runs\nlist_runs(RUNS, kind='nope')"),
    ("list_runs root is a file", "from smallinit import list_runs\nlist_runs(FILE)"),
    (
        "RunStore on a file",
        "from smallinit.core.store import RunStore\n"
        "RunStore(FILE).get_or_run('toy-x', {'a': 1}, lambda run: {})",
    ),
    (
        "derive unknown key",
        "from smallinit.core import profiles\n"
        "profiles.derive('quick', overrides={'anchor.train.stepz': 1})",
    ),
    ("derive unknown base", "from smallinit.core import profiles\nprofiles.derive('nope')"),
    (
        "derive nan",
        "from smallinit.core import profiles\n"
        "profiles.derive('quick', overrides={'anchor.train.lr': float('nan')})",
    ),
    (
        "load_config unknown key",
        "from smallinit.core.config import load_config\n"
        "from smallinit.llm import RunConfig\nload_config(RunConfig, None, ['zzz=1'])",
    ),
    (
        "load_config folder",
        "from smallinit.core.config import load_config\n"
        "from smallinit.llm import RunConfig\nload_config(RunConfig, FOLDER)",
    ),
    ("RunConfig init typo", "from smallinit.llm import RunConfig\nRunConfig(init='gama:1')"),
    ("ModelConfig d_model 0", "from smallinit.llm import ModelConfig\nModelConfig(d_model=0)"),
    (
        "ModelConfig d_model text",
        "from smallinit.llm import ModelConfig\nModelConfig(d_model='wide')",
    ),
    ("ModelConfig norm typo", "from smallinit.llm import ModelConfig\nModelConfig(norm='rms')"),
    (
        "ScanConfig widths text",
        "from smallinit.toy.scan import ScanConfig\nScanConfig(widths='a,b')",
    ),
    (
        "ScanConfig gammas nan",
        "from smallinit.toy.scan import ScanConfig\nScanConfig(gammas=(float('nan'),))",
    ),
    (
        "config_from_dict wrong type",
        "from smallinit.core.config import config_from_dict\n"
        "from smallinit.llm import RunConfig\nconfig_from_dict(RunConfig, {'seed': [1]})",
    ),
    (
        "parse_scheme empty",
        "from smallinit.theory.init_rules import parse_scheme\nparse_scheme('')",
    ),
    ("classify nan", "from smallinit.theory import phase\nphase.classify(float('nan'), 0)"),
    ("figure 99", "from smallinit.study.figs import load_figure\nload_figure(99)"),
    (
        "Transformer out-of-vocabulary ids",
        "import torch\nfrom smallinit.llm import "
        "Transformer, ModelConfig\nTransformer(ModelConfig(d_model=16, n_heads=2, vocab_size=64,"
        " context=8, n_layers=1))(torch.tensor([[1, 999]]))",
    ),
]
API += [
    (
        f"read {what} of {place}",
        f"from smallinit import load_run\nload_run(KEY, runs_dir=PLACES[{place!r}]).{what}",
    )
    for place, what in (
        ("arrays_bit_flipped", "arrays()"),
        ("metrics_same_size", "metrics()"),
        ("arrays_truncated", "arrays()"),
        ("summary_edited", "summary"),
        ("config_edited", "arrays()"),
    )
]


@pytest.mark.parametrize("code", [pytest.param(c, id=n) for n, c in API])
def test_api_probe(code, sandbox):
    scope = {
        "RUNS": str(sandbox.store),
        "FILE": sandbox.places["file"],
        "FOLDER": sandbox.places["folder"],
        "PLACES": sandbox.places,
        "KEY": sandbox.keys[0],
    }
    with pytest.raises((SmallinitError, ValueError, TypeError)) as caught:
        exec(code, scope)
    message = str(caught.value)
    assert message.strip() and "\n" not in message.strip(), message


def test_the_driver_holds_about_three_hundred_probes():
    assert len(PROBES) + len(API) >= 300
