"""A refusal of an argument or a config comes before the heavy imports: the command's
process has not imported torch, jax, matplotlib or the study's registry when it says no
(tests/bench/test_bench_refusals.py measures how long it takes). The figure numbers are
known without the figure scripts: :data:`smallinit.study.figure_list.FIGURES` lists exactly
the package's ``figNN_<name>.py`` scripts."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import smallinit.paper_figs
from smallinit.study.figure_list import FIGURES

#: sympy: a second (smallinit.theory.transformer imports it); asyncio: tqdm.auto's
#: asynchronous bar imports it, a tenth of a second of every start
HEAVY = (
    "torch",
    "jax",
    "matplotlib",
    "sympy",
    "smallinit.study.experiments",
    "smallinit.study.figs",
    "smallinit.llm.training",
    "smallinit.toy",
    "asyncio",
)

CHILD = """\
import json, sys
from smallinit.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""

#: (name, argv); {dir} is a folder, {toml} a TOML file that is not a config
REFUSALS = [
    ("figs unknown figure", ["figs", "--only", "99"]),
    ("figs figure zero", ["figs", "--only", "0,1"]),
    ("figs plan and preflight", ["figs", "--plan", "--preflight"]),
    ("figs preflight-items without preflight", ["figs", "--preflight-items", "20"]),
    ("figs overlay nan", ["figs", "anchor.train.lr=nan"]),
    ("figs overlay unknown key", ["figs", "llm-sweeps.plan.sedes=[0]"]),
    ("figs overlay config a folder", ["figs", "--config", "{dir}"]),
    ("figs bad profile", ["figs", "--profile", "enormous"]),
    ("llm train config a folder", ["llm", "train", "--config", "{dir}"]),
    ("llm train config not TOML", ["llm", "train", "--config", "{toml}"]),
    ("llm train override without =", ["llm", "train", "model.d_model"]),
    ("llm init-table config a folder", ["llm", "init-table", "--config", "{dir}"]),
    ("llm init-table bad value", ["llm", "init-table", "model.d_model=abc"]),
    ("llm init-table bad scheme", ["llm", "init-table", "--init", "gama:1"]),
    ("llm train unbounded value", ["llm", "train", "train.steps=1e20"]),
]


def _refuse(argv: list[str], tmp_path: Path) -> tuple[dict, str]:
    (tmp_path / "bad.toml").write_text("this is = = not toml\n")
    argv = [
        a.replace("{dir}", str(tmp_path)).replace("{toml}", str(tmp_path / "bad.toml"))
        for a in argv
    ]
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    return json.loads(proc.stdout.splitlines()[-1]), proc.stderr


@pytest.mark.parametrize("argv", [a for _, a in REFUSALS], ids=[n for n, _ in REFUSALS])
def test_a_refusal_imports_nothing_heavy(argv, tmp_path):
    outcome, err = _refuse(argv, tmp_path)
    assert outcome["code"] == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and ": error: " in lines[0], lines
    heavy = [
        m
        for m in outcome["modules"]
        if m.split(".")[0] in HEAVY or any(m == h or m.startswith(h + ".") for h in HEAVY)
    ]
    assert not heavy, heavy


def test_the_figure_list_is_the_packages_figure_scripts():
    folder = Path(smallinit.paper_figs.__file__).parent
    scripts = {}
    for path in folder.glob("fig*.py"):
        match = re.fullmatch(r"fig(\d\d)_(\w+)\.py", path.name)
        assert match, path.name
        scripts[int(match[1])] = match[2]
    assert scripts == FIGURES
