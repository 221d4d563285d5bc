"""The import graph, read with ``ast`` from the source tree (nothing is imported).

Floor plan (lowest floor first; an arrow may only point down):

* **theory/** (``smallinit.theory``) and **kernels/** (``smallinit.kernels``): import
  nothing of ours outside their own package (they raise plain ``ValueError``).
* **core**, ``smallinit/*.py`` and ``smallinit/profiles/`` (runs, config, errors,
  progress, plotting, memory, jobs, profiles, downloads): imports only the core. Four core
  modules sit on top of everything by design and may import the components and
  :mod:`smallinit.compare`: the experiment registry ``smallinit/experiments.py``, the
  figure driver ``smallinit/figs.py``, the claims table ``smallinit/claims.py`` and the
  prepared GPU check ``smallinit/gpu_check.py``.
  ``smallinit/__main__.py`` is the CLI's entry point.
* **toy/** and **llm/**: import theory, kernels and the core; llm never imports toy and
  toy never imports llm.
* **compare** (``smallinit/compare/``), **paper_figs/**: on top of the components; compare
  never imports the CLI.
* **cli** (``smallinit/cli/``): on top of everything; nothing below it imports it.

And imports of our own modules sit at the top of their module, where the graph can be
read: outside ``smallinit/cli/`` (whose handlers import libraries lazily so that
``smallinit --help`` stays fast) a function-level import of ``smallinit...`` is allowed only
when its line carries ``# lazy: <reason>`` (an import cycle, an optional dependency such as
cupy behind it). The same holds for the heavy third-party packages (torch, jax, sympy) in a
module that does not import them at its top anyway: lazy only where the module must be
importable without them, saying why.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: source folder -> the package it is installed as (pyproject's package-dir)
PACKAGES = {
    "smallinit": "smallinit",
    "theory": "smallinit.theory",
    "toy": "smallinit.toy",
    "llm": "smallinit.llm",
    "kernels": "smallinit.kernels",
    "paper_figs": "smallinit.paper_figs",
}
COMPONENTS = ("smallinit.theory", "smallinit.toy", "smallinit.llm", "smallinit.kernels")
#: core modules above the components
ON_TOP = {"smallinit.figs", "smallinit.claims", "smallinit.gpu_check"}
LAZY_MARK = "# lazy:"
#: heavy third-party packages: lazy only where a module must import without them
HEAVY = ("torch", "jax", "sympy")


def module_of(rel: str) -> tuple[str, bool]:
    """(dotted module name, is a package ``__init__``) of a source file path like
    ``toy/scan.py`` (posix, relative to the checkout)."""
    parts = rel[:-3].split("/")
    parts[0] = PACKAGES[parts[0]]
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def is_core_module(module: str) -> bool:
    """``smallinit/*.py`` and ``smallinit/profiles/`` (not ``__main__``, the CLI's entry)."""
    if module == "smallinit" or within(module, "smallinit.profiles"):
        return True
    parts = module.split(".")
    return len(parts) == 2 and module != "smallinit.__main__" and parts[1] not in {
        "theory", "toy", "llm", "kernels", "cli", "compare", "paper_figs", "study"}


def imports(module: str, is_package: bool, source: str):
    """Every import statement of ``source`` as (absolute module names, line, at module
    level, its text); ``from X import a`` names ``X`` and ``X.a`` (it may be a submodule)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    nested: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            nested.update(id(n) for n in ast.walk(node) if n is not node)
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names if a.name != "*"]
        else:
            continue
        yield names, node.lineno, id(node) not in nested, " ".join(
            lines[node.lineno - 1:node.end_lineno])


def violations(rel: str, source: str) -> list[str]:
    """The floor-plan rules (module docstring) that file ``rel`` breaks, one line each."""
    module, is_package = module_of(rel)
    found = []
    statements = list(imports(module, is_package, source))
    at_top = {name.split(".")[0] for names, _, top, _ in statements if top for name in names}
    for names, line, top, text in statements:
        ours = [name for name in names if within(name, "smallinit")]
        heavy = [name for name in names if name.split(".")[0] in HEAVY
                 and name.split(".")[0] not in at_top]
        if (ours or heavy) and not top and not within(module, "smallinit.cli") \
                and LAZY_MARK not in text:
            found.append(f"{rel}:{line} imports {(ours or heavy)[0]} inside a function: move "
                         f"it to the top of the module, or say why it must wait with "
                         f"'{LAZY_MARK} <reason>'")
        for name in ours:
            found += rule_breaks(module, f"{rel}:{line} imports {name}", name)
    return sorted(set(found))


def rule_breaks(module: str, where: str, name: str) -> list[str]:
    """The import-graph rules that ``module`` importing ``name`` (ours) breaks."""
    found = []
    for component in ("smallinit.theory", "smallinit.kernels"):
        if within(module, component) and not within(name, component):
            found.append(f"{where}: {component} imports nothing of ours outside itself")
    if within(module, "smallinit.llm") and within(name, "smallinit.toy"):
        found.append(f"{where}: llm never imports toy")
    if within(module, "smallinit.toy") and within(name, "smallinit.llm"):
        found.append(f"{where}: toy never imports llm")
    is_core = is_core_module(module)
    below_top = (is_core and module not in ON_TOP) or any(within(module, p)
                                                          for p in COMPONENTS)
    if within(name, "smallinit.cli") and not within(module, "smallinit.cli") \
            and module != "smallinit.__main__":
        found.append(f"{where}: only the CLI (and its entry point) imports the CLI")
    if below_top and any(within(name, p) for p in ("smallinit.compare", "smallinit.study",
                                                   "smallinit.paper_figs")):
        found.append(f"{where}: compare and paper_figs sit on top of the components "
                     "and the core")
    if is_core and module not in ON_TOP and any(within(name, p) for p in COMPONENTS):
        found.append(f"{where}: the core imports no component (only "
                     f"{', '.join(sorted(ON_TOP))} sit on top)")
    return found


def source_files() -> list[str]:
    files = []
    for folder in PACKAGES:
        files += [p.relative_to(ROOT).as_posix() for p in (ROOT / folder).rglob("*.py")
                  if "out" not in p.relative_to(ROOT).parts]
    return sorted(files)


def test_the_source_tree_keeps_the_floor_plan():
    files = source_files()
    assert len(files) > 50 and "toy/scan.py" in files and "smallinit/cli/figs.py" in files
    found = [v for rel in files for v in violations(rel, (ROOT / rel).read_text())]
    assert not found, "\n".join(found)


def test_building_the_cli_parser_imports_no_heavy_library():
    """The CLI's handlers import the libraries (which import torch, jax, sympy and
    matplotlib at their tops); building the parser, all that ``smallinit --help`` does,
    imports none of them."""
    code = ("import sys; from smallinit.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('torch', 'jax', 'sympy', 'matplotlib') "
            "if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert proc.stdout.strip() == "[]", proc.stdout


# ----------------------------------------------------------------------------- the checker
# Each rule fed a fake source that breaks it (and one that keeps it), so that none can
# pass by checking nothing.
@pytest.mark.parametrize(("rel", "source", "rule"), [
    ("theory/phase.py", "from smallinit.errors import ConfigError\n", "theory imports nothing"),
    ("kernels/measure.py", "import smallinit.runs\n", "kernels imports nothing"),
    ("theory/phase.py", "from ..toy import scan\n", "theory imports nothing"),
    ("llm/analysis/ffn.py", "from smallinit.toy.scan import fit_slopes\n", "llm never imports"),
    ("toy/scan.py", "from smallinit import llm\n", "toy never imports llm"),
    ("toy/scan.py", "from smallinit.cli import main\n", "only the CLI"),
    ("smallinit/compare/run.py", "from smallinit.cli.util import x\n", "only the CLI"),
    ("smallinit/study/experiments/gamma_sweep.py", "import smallinit.cli\n", "only the CLI"),
    ("paper_figs/fig01_phase_diagram.py", "from smallinit.cli import util\n", "only the CLI"),
    ("smallinit/runs.py", "from smallinit.compare import run\n", "sit on top"),
    ("llm/config.py", "from smallinit.paper_figs import fig01_phase_diagram\n", "sit on top"),
    ("smallinit/jobs.py", "from smallinit.toy import scan\n", "the core imports no component"),
    ("smallinit/profiles/__init__.py", "from smallinit.llm import config\n", "no component"),
    ("toy/scan.py", "def f():\n    from smallinit.runs import RunStore\n", "inside a function"),
    ("smallinit/runs.py", "class A:\n    def f(self):\n        import smallinit.errors\n",
     "inside a function"),
    ("kernels/stack.py", "def f():\n    from . import gpu  # noqa: PLC0415\n",
     "inside a function"),
    ("toy/escape.py", "def f():\n    import jax.numpy as jnp\n", "inside a function"),
    ("theory/exact.py", "import math\ndef f():\n    import sympy\n", "inside a function"),
])
def test_each_rule_catches_a_fake_source(rel, source, rule):
    found = violations(rel, source)
    assert any(rule in v for v in found), found


@pytest.mark.parametrize(("rel", "source"), [
    ("theory/phase.py", "from .init_rules import parse_scheme\nimport sympy\n"),
    ("kernels/bench.py", "from . import measure\nfrom .stack import measure_stack\n"),
    ("toy/scan.py", "from smallinit.theory import phase\nfrom smallinit.runs import RunStore\n"),
    ("llm/config.py", "from smallinit.kernels import cluster_count\n"),
    ("smallinit/study/experiments/compare.py", "from smallinit.compare.run import x\n"),
    ("smallinit/figs.py", "from smallinit.study import experiments\n"),
    ("smallinit/__main__.py", "from smallinit.cli import main\n"),
    ("smallinit/cli/figs.py", "def f():\n    from smallinit.study.experiments import plan\n"),
    ("kernels/stack.py", "def f():\n    from . import gpu  # lazy: needs cupy\n"),
    ("toy/scan.py", "import jax\ndef f():\n    import jax.numpy as jnp\n"),
    ("llm/training/train.py", "import torch\ndef f():\n    import torch.distributed\n"),
    ("kernels/backend.py", "def f():\n    import torch  # lazy: kernels run without torch\n"),
    ("theory/diagram.py", "def f():\n    from matplotlib.patches import Polygon\n"),
])
def test_the_checker_accepts_what_the_plan_allows(rel, source):
    assert violations(rel, source) == []


# ----------------------------------------------------------------------------- one job driver
#: what only the job driver does: start worker processes, and remember which runs it forced
DRIVER_ONLY = ("ProcessPoolExecutor", "multiprocessing", "get_context(", "_FORCED",
               "ray.remote")


def driver_copies(rel: str, source: str) -> list[str]:
    """Places outside ``smallinit/jobs.py`` that start worker processes or keep a
    force-once set of their own: a second sweep driver in the making."""
    if rel == "smallinit/jobs.py":
        return []
    return [f"{rel}:{n} {word}" for n, line in enumerate(source.splitlines(), 1)
            for word in DRIVER_ONLY if word in line and not line.lstrip().startswith("#")]


def test_one_job_driver_runs_every_sweep():
    found = [hit for rel in source_files()
             for hit in driver_copies(rel, (ROOT / rel).read_text(encoding="utf-8"))]
    assert not found, f"only smallinit/jobs.py runs many runs (workers, force once): {found}"
    assert driver_copies("smallinit/study/experiments/gamma_sweep.py",
                         "from concurrent.futures import ProcessPoolExecutor\n")
