"""The lock (requirements.lock): every install of `make test`, `make figs` and `make bench`
takes the tested versions from it, wheels only and hash-checked, for Python 3.11 on Linux
x86-64. These tests read the files only (no network, no install): each pin has a sha256, the
lock covers the base and dev dependencies (closed under their requirements), torch is the
CPU build of 2.13.0 with torchvision and torchaudio held to it, and the Makefile installs
from the lock."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})\b")


def parse_lock(text: str) -> dict[str, tuple[Version, list[str]]]:
    """{canonical name: (version, sha256 hashes)} of a pip requirements file with hashes, as
    uv writes it (one pin per entry, its hashes on backslash-continued lines)."""
    entries: dict[str, tuple[Version, list[str]]] = {}
    for entry in re.split(r"\n(?=\S)", text):
        if entry.startswith("#") or not entry.strip():
            continue
        match = PIN.match(entry)
        assert match, f"not a '==' pin: {entry.splitlines()[0]!r}"
        name = canonicalize_name(match[1])
        assert name not in entries, f"{name} pinned twice"
        entries[name] = (Version(match[2]), HASH.findall(entry))
    return entries


@pytest.fixture(scope="module")
def lock():
    return parse_lock(LOCK.read_text())


@pytest.fixture(scope="module")
def pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_parse_lock_reads_pins_and_refuses_an_unpinned_entry():
    text = "# header\nfoo-bar==1.2 \\\n    --hash=sha256:" + "a" * 64 + "\n    # via x\n"
    assert parse_lock(text) == {"foo-bar": (Version("1.2"), ["a" * 64])}
    with pytest.raises(AssertionError, match="not a '==' pin"):
        parse_lock(text + "baz>=1\n")


def test_every_pin_has_a_sha256(lock):
    assert len(lock) > 20
    assert [name for name, (_, hashes) in lock.items() if not hashes] == []


def test_the_lock_covers_base_dev_and_build_requirements_within_their_ranges(lock, pyproject):
    project = pyproject["project"]
    wanted = [
        *project["dependencies"],
        *project["optional-dependencies"]["dev"],
        *pyproject["build-system"]["requires"],
    ]
    for text in wanted:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        assert name in lock, f"{text} is not in the lock: refresh it (make lock)"
        assert req.specifier.contains(lock[name][0], prereleases=True), (text, lock[name][0])


def test_the_lock_is_closed_under_the_requirements_of_its_packages(lock):
    """Read from the installed packages' metadata (this suite's venv was installed from the
    lock): every requirement of a locked package, for Python 3.11 on Linux, is locked."""
    env = default_environment() | {"extra": ""}
    checked, missing = 0, []
    for name in lock:
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        checked += 1
        for text in requires:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate(env):
                if canonicalize_name(req.name) not in lock:
                    missing.append(f"{name} needs {text}")
    assert checked > len(lock) // 2  # the venv holds the lock's packages
    assert missing == []


def test_torch_is_the_cpu_build_of_2_13_and_its_companions_are_held_to_it(lock):
    assert lock["torch"][0] == Version("2.13.0+cpu")
    constraints = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            constraints[canonicalize_name(req.name)] = req.specifier
    assert str(constraints["torch"]) == "==2.13.0+cpu"
    assert str(constraints["torchvision"]) == "==0.28.0+cpu"  # torchvision 0.28 needs 2.13.0
    assert not list(
        constraints["torchaudio"].filter(["2.11.1", "2.13.0", "2.13.0+cpu"], prereleases=True)
    )
    for name in ("torchvision", "torchaudio"):  # none locked, or the one that matches
        assert name not in lock or constraints[name].contains(lock[name][0])


def test_the_lock_was_made_by_the_makefiles_command(pyproject):
    """The header uv writes records its command: wheels only (--no-build), hashes, Python 3.11
    on x86-64 Linux, the dev extra under constraints.txt, and it is `make lock`'s."""
    header = LOCK.read_text().splitlines()[1].lstrip("# ").split()
    assert header[:3] == ["uv", "pip", "compile"]
    for flag in ("--no-build", "--generate-hashes"):
        assert flag in header
    pairs = dict(zip(header, header[1:], strict=False))
    assert pairs["--extra"] == "dev" and pairs["-c"] == "constraints.txt"
    assert pairs["--python-version"] == "3.11"
    assert pairs["--python-platform"] == "x86_64-manylinux_2_28"
    recipe = " ".join(makefile_rule("lock").replace("\\\n", " ").split())
    made = " ".join(header[header.index("pyproject.toml") : header.index("-o")])
    assert made in recipe.replace(" --find-links $(TORCH_WHEELS)", "")


def makefile_rule(target: str) -> str:
    """The text of ``target``'s rule in the Makefile: its prerequisite line and recipe."""
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{re.escape(target)}:.*\n(?:\t.*\n)*", text, re.M)
    assert match, f"no rule for {target}"
    return match[0]


def test_the_makefile_installs_from_the_lock_for_test_figs_and_bench():
    text = (ROOT / "Makefile").read_text()
    assert re.search(r"^LOCK\s*:?=\s*requirements\.lock$", text, re.M)
    install = makefile_rule("$(STAMP)")
    assert "$(LOCK)" in install.splitlines()[0]  # a new lock reinstalls
    locked, own = [
        " ".join(c.replace("\\\n", " ").split())
        for c in re.split(r"\n\t(?=\$\(PIP\))", install)[1:3]
    ]
    assert "--require-hashes" in locked and "--only-binary :all:" in locked
    assert "-r $(LOCK)" in locked
    assert "--no-deps" in own and "--no-index" in own and "-e ." in own
    for target in ("test", "figs", "bench", "lint"):
        assert "$(STAMP)" in makefile_rule(target).splitlines()[0], target


def test_make_lint_runs_the_dev_extras_tools_from_the_venv(pyproject):
    """`make lint` runs ruff and mypy from the venv (installed from the lock, above), and both
    are in the dev extra, so the lock pins them (a tool from PATH would check with whatever
    version the machine has)."""
    tools = set(re.findall(r"\$\(BIN\)/([\w.-]+)", makefile_rule("lint")))
    dev = {
        canonicalize_name(Requirement(text).name)
        for text in pyproject["project"]["optional-dependencies"]["dev"]
    }
    assert {"ruff", "mypy"} <= tools <= dev
