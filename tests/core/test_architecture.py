"""The floor plan and the one-path rules, read with ``ast`` from the source tree (nothing
is imported).

Floor plan: the table :data:`FLOORS`, lowest floor first (an arrow may only point down):

0. **theory/** and **kernels/**: import nothing of ours outside their own folder (they raise
   plain ``ValueError``);
1. **core/** (run store, configs, profiles, job driver, errors, progress, plotting, stats,
   memory, downloads): imports only the core;
2. **toy/** and **llm/**: import theory, kernels and the core, never each other;
3. **compare/**, **study/** (the experiments, the figure driver, the claims, the report)
   and **paper_figs/** (one module per figure): study may use compare, the driver loads
   the figures, and a figure declares itself through ``study/figure.py`` (:data:`SIDEWAYS`);
4. **cli/** and **tools/** (the GPU check, benchmark helpers, the CUDA emulation: tooling
   users never import, run as ``smallinit gpu-check``): the CLI may use tools; nothing
   below imports either.

``smallinit/`` (:data:`SURFACE`: ``__init__``'s lazy re-exports and ``__main__``, the CLI's
entry point) stands apart: it may import any floor, and only the CLI imports it (its
``__version__``). No import circle joins our modules, lazy imports included
(:func:`circles`; :data:`KNOWN_CIRCLE_EDGES` would list a tolerated one: it is empty).

tests/ mirrors the floors (:func:`misplaced_tests`): a test file lives in ``tests/X``, X the
source folder whose code it tests, and reaches ``smallinit.X``; bench/ and data/ stand
apart (:data:`TESTS_APART`), and the tests of the checkout as a whole sit in tests/core
(:data:`WHOLE_CHECKOUT`).

And imports of our own modules sit at the top of their module, where the graph can be
read: outside ``cli/`` (whose handlers import libraries lazily so that
``smallinit --help`` stays fast) a function-level import of ``smallinit...`` is allowed only
when its line carries ``# lazy: <reason>`` (an optional dependency such as
cupy behind it). The same holds for the heavy third-party packages (torch, jax, sympy) in a
module that does not import them at its top anyway: lazy only where the module must be
importable without them, saying why.

One path per idea: no function is named by a string (``"module:function"``,
``"pkg.mod.function"``, ``entry="..."``) or looked up by one (``importlib.import_module``,
``getattr`` on a module) outside the packages' lazy re-exports, the CLI's command dispatch
and the figure driver (a run spec's type computes its run); one function applies dotted
overrides to a config (``smallinit.core.config.override``: no other function named like an
override or a merge, no keys routed by a section's prefix such as ``"scan."``); one
registry lists the experiments (``study/experiments/__init__.py``), each
experiment module declaring its one ``EXPERIMENT``; one job driver starts worker processes
(``core/jobs.py``); the model's forward code tests neither the device, the dtype
nor the grad mode (the fast path is its own layers, chosen when the model is built).
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The floor plan, lowest floor first: (the source folders on the floor, whether they import
#: nothing of ours outside their own folder, what the floor holds). Each folder X is installed
#: as ``smallinit.X`` (pyproject's package-dir). A module may import its own folder and any
#: folder on a lower floor (none where the floor keeps to itself); a folder beside it on its
#: floor only where :data:`SIDEWAYS` allows; never a folder on a higher floor.
FLOORS = (
    (
        ("theory", "kernels"),
        True,
        "foundations: sympy derivations and science constants; CuPy kernels, CPU fallbacks",
    ),
    (("core",), True, "ground: run store, configs, profiles, stats, job driver, progress, errors"),
    (("toy", "llm"), False, "the two halves, never each other"),
    (
        ("compare", "study", "paper_figs"),
        False,
        "toy-to-LLM; experiments registry, figure driver, claims, report; one module per figure",
    ),
    (
        ("cli", "tools"),
        False,
        "every command; tooling users never import (GPU check, benchmark helpers)",
    ),
)
#: imports between two folders of one floor that the plan allows: (importer, imported). The
#: figure driver finds and loads the figure modules, and a figure declares itself through
#: ``study/figure.py``; the circle test keeps the two directions from closing a circle.
SIDEWAYS = {
    ("study", "compare"),
    ("study", "paper_figs"),
    ("paper_figs", "study"),
    ("cli", "tools"),
}
#: apart from the floors: the public surface (``__init__``'s lazy re-exports) and the CLI's
#: entry point (``__main__``). It may import any floor; only these folders import it
SURFACE = "smallinit"
SURFACE_USERS = ("cli",)  # the CLI reads __version__
#: source folder -> the package it is installed as (pyproject's package-dir)
PACKAGES = {SURFACE: SURFACE} | {
    folder: f"smallinit.{folder}" for folders, _, _ in FLOORS for folder in folders
}
FLOOR_OF = {folder: n for n, (folders, _, _) in enumerate(FLOORS) for folder in folders}
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


def folder_of(name: str) -> str:
    """The source folder of one of our modules: ``smallinit.toy.scan`` -> ``toy``; the
    package itself and any name it re-exports (``smallinit.load_run``) -> the surface."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in FLOOR_OF else SURFACE


def _type_checking_only(tree) -> set[int]:
    """The ids of the nodes under ``if TYPE_CHECKING:``, which never run."""
    return {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
        for n in ast.walk(node)
    }


class Statement(NamedTuple):
    """One import statement: the absolute module names it names (``from X import a``
    names ``X`` and ``X.a``, which may be a submodule), its line, whether it is at module
    level, its text, whether it runs (not under ``if TYPE_CHECKING``), and ``X`` of a
    ``from X import`` (else ``None``)."""

    names: list[str]
    line: int
    top: bool
    text: str
    runs: bool
    base: str | None


def imports(module: str, is_package: bool, source: str):
    """Every import statement of ``source``, as :class:`Statement`."""
    tree = ast.parse(source)
    lines = source.splitlines()
    nested: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            nested.update(id(n) for n in ast.walk(node) if n is not node)
    never_run = _type_checking_only(tree)
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names, base = [a.name for a in node.names], None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names if a.name != "*"]
        else:
            continue
        yield Statement(
            names,
            node.lineno,
            id(node) not in nested,
            " ".join(lines[node.lineno - 1 : node.end_lineno]),
            id(node) not in never_run,
            base,
        )


def violations(rel: str, source: str) -> list[str]:
    """The floor-plan rules (module docstring) that file ``rel`` breaks, one line each."""
    module, is_package = module_of(rel)
    found = []
    statements = list(imports(module, is_package, source))
    at_top = {name.split(".")[0] for s in statements if s.top for name in s.names}
    for names, line, top, text, _, base in statements:
        # ``from smallinit import llm`` imports smallinit.llm (the package is its parent)
        ours = [
            name
            for name in names
            if within(name, "smallinit")
            and not (name == "smallinit" and base == "smallinit" and len(names) > 1)
        ]
        heavy = [
            name
            for name in names
            if name.split(".")[0] in HEAVY and name.split(".")[0] not in at_top
        ]
        if (
            (ours or heavy)
            and not top
            and not within(module, "smallinit.cli")
            and LAZY_MARK not in text
        ):
            found.append(
                f"{rel}:{line} imports {(ours or heavy)[0]} inside a function: move "
                f"it to the top of the module, or say why it must wait with "
                f"'{LAZY_MARK} <reason>'"
            )
        for name in ours:
            found += floor_breaks(
                folder_of(module), f"{rel}:{line} imports {name}", folder_of(name)
            )
    return sorted(set(found))


def floor_breaks(importer: str, where: str, imported: str) -> list[str]:
    """Why folder ``importer`` may not import folder ``imported`` (:data:`FLOORS`), if so."""
    if importer == imported:
        return []
    if imported == SURFACE:
        return (
            []
            if importer in SURFACE_USERS
            else [f"{where}: only {', '.join(SURFACE_USERS)} imports the public surface smallinit/"]
        )
    if importer == SURFACE:
        return []
    own, other = FLOOR_OF[importer], FLOOR_OF[imported]
    folders, alone, _ = FLOORS[own]
    if alone:
        return [f"{where}: {importer}/ imports nothing of ours outside itself"]
    if other > own:
        return [
            f"{where}: {importer}/ (floor {own}) imports {imported}/ (floor {other}), a floor up"
        ]
    if other == own and (importer, imported) not in SIDEWAYS:
        return [
            f"{where}: {importer}/ imports {imported}/ beside it on floor {own}; "
            f"allowed sideways: {sorted(SIDEWAYS)}"
        ]
    return []


def source_files() -> list[str]:
    files = []
    for folder in PACKAGES:
        files += [
            p.relative_to(ROOT).as_posix()
            for p in (ROOT / folder).rglob("*.py")
            if "out" not in p.relative_to(ROOT).parts
        ]
    return sorted(files)


def test_the_source_tree_keeps_the_floor_plan():
    files = source_files()
    assert len(files) > 50 and "toy/scan.py" in files and "cli/figs.py" in files
    assert sorted(PACKAGES) == sorted(
        p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()
    ), "every top-level package folder stands on one floor of FLOORS"
    found = [v for rel in files for v in violations(rel, (ROOT / rel).read_text())]
    assert not found, "\n".join(found)


def test_pyproject_installs_each_floor_folder_as_its_subpackage():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert tool["package-dir"] == {package: folder for folder, package in PACKAGES.items()}
    assert {p.split(".")[1] if "." in p else p for p in tool["packages"]} == set(PACKAGES)


# ----------------------------------------------------------------------------- import circles
#: modules that load others by name, which ``ast`` cannot see as imports: loader -> the
#: package whose every module it may load
LOADED_BY_NAME = {"smallinit.study.figs": "smallinit.paper_figs"}
#: circles the plan tolerates, as the edge each one passes through: none (the figure modules
#: register themselves through study/figure.py and never import the driver study/figs.py)
KNOWN_CIRCLE_EDGES: set[tuple[str, str]] = set()


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports, at module level or inside a function (a
    lazy import still closes a circle), not under ``if TYPE_CHECKING``. ``from X import a``
    points at ``X.a`` where that is a module, else at ``X``; a package's ``__init__`` that
    Python runs first is no edge of its own. ``sources`` maps paths (``toy/scan.py``) to
    their text."""
    modules = {module_of(rel)[0]: rel for rel in sources}
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for module, rel in modules.items():
        for statement in imports(module, module_of(rel)[1], sources[rel]):
            if not statement.runs:
                continue
            names, base = statement.names, statement.base
            targets = (
                names
                if base is None
                else [name if name in modules else base for name in names[1:]] or [base]
            )
            for target in targets:
                if not within(target, "smallinit"):
                    continue
                while target not in modules and "." in target:
                    target = target.rpartition(".")[0]
                if target in modules and target != module:
                    graph[module].add(target)
        if module in LOADED_BY_NAME:
            graph[module] |= {m for m in modules if within(m, LOADED_BY_NAME[module])}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle (``[a, b, ..., a]``) through every edge that lies on one: for each strongly
    connected group of modules (Tarjan), the shortest way back from each of its edges."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(node: str) -> None:  # recursion depth is bounded by the module count
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    found: dict[frozenset, list[str]] = {}
    for group in groups:
        for start in sorted(group):
            for nxt in sorted(graph[start] & group):
                path = _shortest(graph, group, nxt, start)
                circle = [start, *path]
                found.setdefault(frozenset(zip(circle, circle[1:], strict=False)), circle)
    return sorted(found.values())


def _shortest(graph, group, start: str, goal: str) -> list[str]:
    """The shortest path from ``start`` to ``goal`` inside ``group`` (breadth first)."""
    came = {start: None}
    queue = [start]
    for node in queue:
        if node == goal:
            break
        for nxt in sorted(graph[node] & group):
            if nxt not in came:
                came[nxt] = node
                queue.append(nxt)
    path = [goal]
    while path[-1] != start:
        path.append(came[path[-1]])
    return path[::-1]


def excused(circle: list[str]) -> bool:
    return any(
        within(a, x) and within(b, y)
        for x, y in KNOWN_CIRCLE_EDGES
        for a, b in zip(circle, circle[1:], strict=False)
    )


def test_no_import_circle_between_our_modules():
    sources = {rel: (ROOT / rel).read_text(encoding="utf-8") for rel in source_files()}
    graph = import_graph(sources)
    assert (
        "smallinit.kernels.gpu" in graph["smallinit.kernels.stack"]
        or "smallinit.kernels.backend" in graph["smallinit.kernels.stack"]
    )
    found = [c for c in circles(graph) if not excused(c)]
    assert not found, (
        "import circles (break each: move the shared part down a module):\n"
        + "\n".join(" -> ".join(c) for c in found)
    )


@pytest.mark.parametrize(
    ("sources", "circle"),
    [
        (
            {"kernels/a.py": "from . import b\n", "kernels/b.py": "from .a import f\n"},
            ["smallinit.kernels.a", "smallinit.kernels.b", "smallinit.kernels.a"],
        ),
        (
            {
                "cli/x.py": "def f():\n    from smallinit.cli.y import g\n",
                "cli/y.py": "def g():\n    from smallinit.cli import x  # lazy: a circle\n",
                "cli/__init__.py": "",
            },
            ["smallinit.cli.x", "smallinit.cli.y", "smallinit.cli.x"],
        ),
        (
            {
                "toy/a.py": "import smallinit.toy.b\n",
                "toy/b.py": "import smallinit.toy.c\n",
                "toy/c.py": "from smallinit.toy import a\n",
                "toy/__init__.py": "",
            },
            ["smallinit.toy.a", "smallinit.toy.b", "smallinit.toy.c", "smallinit.toy.a"],
        ),
        (
            {
                "study/figs.py": "",
                "paper_figs/fig01_x.py": "from smallinit.study.figs import one\n",
            },
            [
                "smallinit.paper_figs.fig01_x",
                "smallinit.study.figs",
                "smallinit.paper_figs.fig01_x",
            ],
        ),
    ],
)
def test_the_circle_check_finds_a_planted_circle(sources, circle):
    assert circle in circles(import_graph(sources))


def test_the_circle_check_excuses_no_circle():
    """A figure that imports the driver which loads it by name closes a circle too."""
    planted = {
        "study/figs.py": "",
        "paper_figs/fig01_x.py": "from smallinit.study import figs\n",
        "kernels/a.py": "from . import b\n",
        "kernels/b.py": "from . import a\n",
    }
    found = [c for c in circles(import_graph(planted)) if not excused(c)]
    assert found == [
        ["smallinit.kernels.a", "smallinit.kernels.b", "smallinit.kernels.a"],
        ["smallinit.paper_figs.fig01_x", "smallinit.study.figs", "smallinit.paper_figs.fig01_x"],
    ]


@pytest.mark.parametrize(
    "sources",
    [
        {"kernels/a.py": "from . import b\n", "kernels/b.py": "import math\n"},
        {
            "kernels/__init__.py": "from .a import f\n",
            "kernels/a.py": "from . import b\n",
            "kernels/b.py": "x = 1\n",
        },  # the package's __init__ runs first: no edge back to it
        {
            "theory/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from .b import B\n",
            "theory/b.py": "from .a import f\n",
        },
    ],
)
def test_the_circle_check_accepts_a_one_way_graph(sources):
    assert circles(import_graph(sources)) == []


def test_building_the_cli_parser_imports_no_heavy_library():
    """The CLI's handlers import the libraries (which import torch, jax, sympy and
    matplotlib at their tops); building the parser, all that ``smallinit --help`` does,
    imports none of them."""
    code = (
        "import sys; from smallinit.cli import build_parser; build_parser(); "
        "print(sorted(m for m in ('torch', 'jax', 'sympy', 'matplotlib') "
        "if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]", proc.stdout


def test_the_toy_commands_import_no_torch(tmp_path):
    """``smallinit toy ...`` reads its profile table in toy/ (``from_profile``), not through
    the experiment registry, which imports torch with its LLM experiments: the toy commands
    (their configs, and a run) leave torch unimported."""
    code = (
        "import sys\nfrom smallinit.cli import main\n"
        "for cmd in ('scan', 'condense', 'diagonal', 'initial-condensation'):\n"
        "    assert main(['toy', cmd, '--print-config']) == 0\n"
        f"assert main(['toy', 'diagonal', '--runs-dir', {str(tmp_path / 'runs')!r}, "
        "'--json', 'alphas=[1.0]', 'max_steps=50', 'dim=8', 'n=4']) == 0\n"
        "print(sorted(m for m in ('torch', 'jax') if m in sys.modules), file=sys.stderr)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == "['jax']", proc.stderr[-3000:]


# ----------------------------------------------------------------------------- the checker
# Each rule fed a fake source that breaks it (and one that keeps it), so that none can
# pass by checking nothing.
UP = "a floor up"
BESIDE = "beside it on floor"
ALONE = "imports nothing of ours outside itself"


@pytest.mark.parametrize(
    ("rel", "source", "rule"),
    [
        ("theory/phase.py", "from smallinit.core.errors import X\n", ALONE),
        ("kernels/measure.py", "import smallinit.core.store\n", ALONE),
        ("theory/phase.py", "from ..toy import scan\n", ALONE),
        ("theory/phase.py", "from smallinit.kernels import measure\n", ALONE),  # sideways too
        (
            "kernels/stack.py",
            "def f():\n    from smallinit.theory import phase  # lazy: x\n",
            ALONE,
        ),
        ("core/jobs.py", "from smallinit.toy import scan\n", ALONE),
        ("core/profiles/__init__.py", "from smallinit.llm import config\n", ALONE),
        ("core/store.py", "from smallinit.study.figs import x\n", ALONE),
        ("core/runs.py", "from smallinit.compare import run\n", ALONE),
        (
            "core/stats.py",
            "from smallinit.kernels import measure\n",
            ALONE,
        ),  # the core keeps to itself
        ("llm/analysis/ffn.py", "from smallinit.toy.scan import fit_slopes\n", BESIDE),
        ("toy/scan.py", "from smallinit import llm\n", BESIDE),
        ("toy/scan.py", "from smallinit.cli import main\n", UP),
        ("toy/scan.py", "from smallinit.study import experiments\n", UP),
        ("llm/run_config.py", "from smallinit.paper_figs import fig01_phase_diagram\n", UP),
        ("llm/training/train.py", "import smallinit.tools.gpu_check\n", UP),
        ("compare/run.py", "from smallinit.cli.util import x\n", UP),
        ("compare/run.py", "from smallinit.study import experiments\n", BESIDE),
        ("study/experiments/gamma_sweep.py", "import smallinit.cli\n", UP),
        ("study/report.py", "from smallinit.tools import gpu_check\n", UP),
        (
            "study/experiments/x.py",
            "def f():\n    from smallinit.tools import gpu_parts  # lazy: x\n",
            UP,
        ),
        ("paper_figs/fig01_phase_diagram.py", "from smallinit.cli import util\n", UP),
        ("paper_figs/fig01_phase_diagram.py", "from smallinit.tools import gpu_report\n", UP),
        ("tools/gpu_check.py", "from smallinit.cli.util import user_error\n", BESIDE),
        ("compare/run.py", "from smallinit.paper_figs import fig01_phase_diagram\n", BESIDE),
        ("toy/scan.py", "from smallinit import load_run\n", "public surface"),
        ("study/report.py", "import smallinit\n", "public surface"),
        ("toy/scan.py", "def f():\n    from smallinit.core.store import S\n", "inside a function"),
        (
            "core/runs.py",
            "class A:\n    def f(self):\n        import smallinit.core.errors\n",
            "inside a function",
        ),
        (
            "kernels/stack.py",
            "def f():\n    from . import gpu  # noqa: PLC0415\n",
            "inside a function",
        ),
        (
            "tools/gpu_check.py",
            "def f():\n    from smallinit.study import report\n",
            "inside a function",
        ),
        ("toy/escape.py", "def f():\n    import jax.numpy as jnp\n", "inside a function"),
        ("theory/exact.py", "import math\ndef f():\n    import sympy\n", "inside a function"),
    ],
)
def test_each_rule_catches_a_fake_source(rel, source, rule):
    found = violations(rel, source)
    assert any(rule in v for v in found), found


@pytest.mark.parametrize(
    ("rel", "source"),
    [
        ("theory/phase.py", "from .init_rules import parse_scheme\nimport sympy\n"),
        ("kernels/measure.py", "from . import cpu\nfrom .stack import measure_stack\n"),
        ("toy/scan.py", "from smallinit.theory import phase\nfrom smallinit.core.store import S\n"),
        ("core/store.py", "from smallinit.core.runs import Run\n"),
        ("llm/run_config.py", "from smallinit.kernels import cluster_count\n"),
        ("study/experiments/compare.py", "from smallinit.compare.run import x\n"),
        ("study/figs.py", "from smallinit.study import experiments\n"),
        ("smallinit/__main__.py", "from smallinit.cli import main\n"),
        ("smallinit/__init__.py", "from smallinit.core.results import load_run\n"),
        ("cli/__init__.py", "from smallinit import __version__\n"),
        ("cli/gpu_check.py", "def f():\n    from smallinit.tools.gpu_check import main\n"),
        ("tools/gpu_check.py", "from smallinit.study import report\nfrom smallinit.llm import x\n"),
        (
            "tools/gpu_parts.py",
            "from smallinit.kernels import measure\nfrom . import gpu_kernels\n",
        ),
        ("paper_figs/fig01_phase_diagram.py", "from smallinit.study.figs import single\n"),
        ("compare/run.py", "from smallinit.toy import scan\nfrom smallinit.llm import train\n"),
        (
            "llm/training/train.py",
            "from smallinit.kernels import measure\n"
            "from smallinit.theory import phase\nfrom smallinit.core.store import S\n",
        ),
        ("cli/figs.py", "def f():\n    from smallinit.study.experiments import plan\n"),
        ("kernels/stack.py", "def f():\n    from . import gpu  # lazy: needs cupy\n"),
        ("toy/scan.py", "import jax\ndef f():\n    import jax.numpy as jnp\n"),
        ("llm/training/train.py", "import torch\ndef f():\n    import torch.distributed\n"),
        ("kernels/backend.py", "def f():\n    import torch  # lazy: kernels run without torch\n"),
        ("theory/diagram.py", "def f():\n    from matplotlib.patches import Polygon\n"),
    ],
)
def test_the_checker_accepts_what_the_plan_allows(rel, source):
    assert violations(rel, source) == []


# ----------------------------------------------------------------------------- tests/ mirrors it
# A test file lives in tests/X, X the source folder whose code it tests (a test of a command
# line's own behaviour, its parsing, flags and error lines, is cli's; of a figure module,
# paper_figs'), and it reaches that folder: it imports a module of smallinit.X (at its top,
# inside a test, or in code it hands to a child Python), itself or through a shared helper
# at tests/ top; for cli, running ``python -m smallinit`` counts too. Helpers shared by
# several test files sit at tests/ top, which the root conftest puts on the import path; a
# test imports another test module only from its own folder (pytest puts that folder on
# the path, no other).
TESTS = "tests"
#: folders of tests/ that stand for no floor, and why
TESTS_APART = {
    "bench": "the benchmark suite (marked bench, run by `make bench`): each file times code "
    "of several floors side by side with its reference",
    "data": "no tests: the files the tests read, and the script that makes one of them",
}
#: tests of the checkout as a whole, not of one floor's code: the floor plan, the docs, the
#: README's Python, the install, the lock, the suite again under other kernels. They sit in
#: tests/core, the ground floor's folder, and need not import the core.
WHOLE_CHECKOUT = (
    "test_architecture.py",
    "test_docs.py",
    "test_readme_python.py",
    "test_core_packaging.py",
    "test_lock.py",
    "test_kernel_flip.py",
)


def _runs_the_cli(tree) -> bool:
    """Whether an argument list in ``tree`` holds ``"-m", "smallinit"`` (the surface's
    ``__main__``, which hands the command line to :mod:`smallinit.cli`)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple):
            words = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            if any(a == "-m" and b == SURFACE for a, b in zip(words, words[1:], strict=False)):
                return True
    return False


#: an import of ours in a code string: ``from smallinit.X``, ``import smallinit.X``, or the
#: names after ``from smallinit import``
CODE_IMPORT = re.compile(
    r"\b(?:from|import)\s+smallinit\.(\w+)|\bfrom\s+smallinit\s+import\s+\(?([\w\s,]+)"
)


def folders_reached(source: str) -> set[str]:
    """The source folders a test's ``source`` imports (anywhere in it, and in the code
    strings it hands to a child Python; docstrings do not count), plus ``cli`` when it
    runs ``python -m smallinit``."""
    tree = ast.parse(source)
    reached = {"cli"} if _runs_the_cli(tree) else set()
    reached |= {
        folder_of(name)
        for statement in imports("tests.x", False, source)
        for name in statement.names
        if within(name, SURFACE)
    }
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    for node in ast.walk(tree):
        if _is_text(node) and id(node) not in docstrings:
            for folder, names in CODE_IMPORT.findall(node.value):
                reached |= {folder} if folder else set(re.findall(r"\w+", names))
    return reached & set(FLOOR_OF)


def misplaced_tests(
    rel: str, source: str, siblings: frozenset[str] = frozenset(), helpers=None
) -> list[str]:
    """How file ``rel`` of tests/ (``tests/toy/test_scan.py``) breaks the mirror: a test
    at tests/ top, a folder that is no source folder of :data:`FLOORS` (nor one of
    :data:`TESTS_APART`), a helper inside a floor's folder, a test that reaches no module
    of its folder's package (:func:`folders_reached`), or one that imports a test module
    of another folder. ``siblings``: the test modules beside it; ``helpers``: the shared
    helper modules at tests/ top, name -> source."""
    helpers = helpers or {}
    parts = rel.split("/")
    name = parts[-1]
    if len(parts) == 2:
        if name.startswith("test_"):
            return [f"{rel} is a test at the top of tests/: put it in the folder it tests"]
        return []
    folder = parts[1]
    if folder in TESTS_APART:
        return []
    if folder not in FLOOR_OF:
        return [f"{rel}: tests/{folder}/ names no source folder of FLOORS ({sorted(FLOOR_OF)})"]
    if name == "conftest.py":
        return []
    if not name.startswith("test_"):
        return [f"{rel} is a helper inside tests/{folder}/: shared helpers sit at tests/ top"]
    if folder == "core" and name in WHOLE_CHECKOUT:
        return []
    found = []
    tree = ast.parse(source)
    imported = {
        alias.name.split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Import)
        for alias in n.names
    } | {
        n.module.split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module and not n.level
    }
    reached = folders_reached(source)
    for module in sorted(imported):
        if module in helpers:
            reached |= folders_reached(helpers[module])
        elif module.startswith("test_") and module not in siblings:
            found.append(
                f"{rel} imports {module}, a test module of another folder: move the part "
                "it shares to a helper at tests/ top"
            )
    if folder not in reached:
        found.append(
            f"{rel} is in tests/{folder}/ but reaches no module of smallinit.{folder} "
            f"(it reaches {sorted(reached) or 'none of ours'}): move it to the folder of "
            "the code it tests"
        )
    return found


def test_tests_mirror_the_floors():
    root = ROOT / TESTS
    helpers = {p.stem: p.read_text(encoding="utf-8") for p in root.glob("*.py")}
    files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    assert len(files) > 100
    found = [
        hit
        for p in files
        for hit in misplaced_tests(
            p.relative_to(ROOT).as_posix(),
            p.read_text(encoding="utf-8"),
            frozenset(q.stem for q in p.parent.glob("test_*.py")),
            helpers,
        )
    ]
    assert not found, "\n".join(found)
    folders = {p.name for p in root.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(FLOOR_OF) | set(TESTS_APART), "one test folder per source folder"
    assert all((root / "core" / name).is_file() for name in WHOLE_CHECKOUT), WHOLE_CHECKOUT


#: stand-ins for the shared helpers at tests/ top
RUNS_CLI = "import subprocess, sys\nsubprocess.run([sys.executable, '-m', 'smallinit', 'x'])\n"
PLANTED_HELPERS = {"badinput": RUNS_CLI, "kernel_cases": "import numpy\n"}


@pytest.mark.parametrize(
    ("rel", "source", "rule"),
    [
        ("tests/core/test_x.py", "from smallinit.cli import main\n", "reaches no module"),
        (
            "tests/study/test_fig13.py",
            "from smallinit.paper_figs import fig13_gain_budget\n",
            "smallinit.study",
        ),
        ("tests/theory/test_cli.py", RUNS_CLI, "reaches no module of smallinit.theory"),
        ("tests/core/test_x.py", "import badinput\n", "reaches no module of smallinit.core"),
        ("tests/kernels/test_x.py", "import kernel_cases\n", "reaches no module"),
        ("tests/toy/test_x.py", '"""import smallinit.toy"""\nx = 1\n', "reaches no module"),
        ("tests/llm/test_x.py", "CODE = 'import smallinit.toy'\n", "reaches no module"),
        ("tests/figures/test_x.py", "import smallinit.paper_figs\n", "names no source folder"),
        ("tests/test_loose.py", "from smallinit.toy import scan\n", "at the top of tests/"),
        ("tests/llm/cases.py", "from smallinit.llm import x\n", "helper inside"),
        (
            "tests/paper_figs/test_x.py",
            "import smallinit.paper_figs\nfrom test_llm_reasoning import all_cells\n",
            "test module of another folder",
        ),
        ("tests/study/test_docs.py", "import re\n", "reaches no module"),
    ],
)
def test_the_mirror_check_catches_a_planted_misplaced_file(rel, source, rule):
    found = misplaced_tests(rel, source, frozenset({"test_x"}), PLANTED_HELPERS)
    assert any(rule in hit for hit in found), found


@pytest.mark.parametrize(
    ("rel", "source"),
    [
        ("tests/cli/test_x.py", RUNS_CLI),
        ("tests/cli/test_x.py", "import badinput\n"),
        ("tests/cli/test_x.py", "from smallinit import cli\n"),
        ("tests/toy/test_x.py", "CODE = 'import sys\\nfrom smallinit.toy import scan'\n"),
        ("tests/core/test_x.py", "def test_a():\n    from smallinit.core import stats\n"),
        ("tests/llm/test_x.py", "from smallinit.llm import x\nfrom test_y import tiny\n"),
        ("tests/core/test_docs.py", "import re\n"),
        ("tests/bench/test_bench_x.py", "from smallinit.llm import x\n"),
        ("tests/data/make_reference.py", "import numpy\n"),
        ("tests/conftest.py", "import pytest\n"),
        ("tests/badinput.py", RUNS_CLI),
    ],
)
def test_the_mirror_check_accepts_a_file_in_its_place(rel, source):
    assert misplaced_tests(rel, source, frozenset({"test_x", "test_y"}), PLANTED_HELPERS) == []


# ----------------------------------------------------------------------------- one job driver
#: what only the job driver does: start worker processes, and remember which runs it forced
DRIVER_ONLY = ("ProcessPoolExecutor", "multiprocessing", "get_context(", "_FORCED", "ray.remote")


def driver_copies(rel: str, source: str) -> list[str]:
    """Places outside ``core/jobs.py`` that start worker processes or keep a
    force-once set of their own: a second sweep driver in the making."""
    if rel == "core/jobs.py":
        return []
    return [
        f"{rel}:{n} {word}"
        for n, line in enumerate(source.splitlines(), 1)
        for word in DRIVER_ONLY
        if word in line and not line.lstrip().startswith("#")
    ]


def test_one_job_driver_runs_every_sweep():
    found = [
        hit
        for rel in source_files()
        for hit in driver_copies(rel, (ROOT / rel).read_text(encoding="utf-8"))
    ]
    assert not found, f"only core/jobs.py runs many runs (workers, force once): {found}"
    assert driver_copies(
        "study/experiments/gamma_sweep.py", "from concurrent.futures import ProcessPoolExecutor\n"
    )


# ----------------------------------------------------------------------------- one path per idea
ENTRY_STRING = re.compile(r"^[A-Za-z_][\w.]*\.[A-Za-z_]\w*:[A-Za-z_]\w*$")  # "pkg.mod:func"
DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")  # "pkg.mod.func"
#: keywords and dict keys whose value, given as a dotted string, names a function to call
ENTRY_WORDS = (
    "entry",
    "entry_point",
    "target",
    "_target_",
    "func",
    "fn",
    "function",
    "callable",
    "handler",
    "runner",
)
#: where a module may be looked up by its name: the packages' lazy re-exports, the CLI's
#: command dispatch (one module per command group), the figure driver (one per figure)
LOOKUP_ALLOWED = (
    "smallinit/__init__.py",
    "theory/__init__.py",
    "toy/__init__.py",
    "llm/__init__.py",
    "cli/__init__.py",
    "study/figs.py",
)
#: calls that load a module given its name or path
LOADERS = ("import_module", "__import__", "spec_from_file_location", "run_module", "run_path")
OVERRIDE_FUNCTION = "core/config.py"
#: words that make a function name an override function's (split on "_"), and whole names
OVERRIDE_WORDS = {"override", "overrides", "merge", "merged"}
OVERRIDE_NAMES = {"replace_config", "update_config", "deep_update"}
#: a config section's prefix ("scan."), by which keys would be routed around the override
SECTION_PREFIX = re.compile(r"^[A-Za-z_]\w*\.$")
REGISTRY = "study/experiments/__init__.py"
EXPERIMENTS = "study/experiments/"


@functools.cache
def top_level_names() -> dict[str, frozenset[str]]:
    """Each module of the source tree -> the functions and classes defined at its top."""
    index = {}
    for rel in source_files():
        body = ast.parse((ROOT / rel).read_text(encoding="utf-8")).body
        index[module_of(rel)[0]] = frozenset(
            n.name
            for n in body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        )
    return index


def names_a_function(text: str) -> bool:
    """Whether ``text`` is a ``"module:function"`` string, or a dotted one whose head is a
    module of ours (``smallinit.llm...``, or a source folder: ``llm...``) defining its
    last name at its top."""
    if ENTRY_STRING.match(text):
        return True
    if not DOTTED.match(text):
        return False
    module, _, name = text.rpartition(".")
    if module.split(".")[0] in PACKAGES and not within(module, "smallinit"):
        module = f"smallinit.{module}"
    return name in top_level_names().get(module, ())


def _is_text(node) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def string_entry_points(rel: str, source: str) -> list[str]:
    """Strings that name a function (the driver does not look functions up by name: a
    spec's type computes its run): a ``"module:function"`` or ``"pkg.mod.function"``
    constant (:func:`names_a_function`), and any dotted or ``:`` string given as
    ``entry=`` (or another of :data:`ENTRY_WORDS`: keyword, dict key or assigned name)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if _is_text(node) and names_a_function(node.value):
            found.append(f"{rel}:{node.lineno} names {node.value!r} by a string")
        pairs = (
            [(k.arg, k.value) for k in node.keywords]
            if isinstance(node, ast.Call)
            else [(k.value, v) for k, v in zip(node.keys, node.values, strict=True) if _is_text(k)]
            if isinstance(node, ast.Dict)
            else [(t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
            if isinstance(node, ast.Assign)
            else []
        )
        for key, value in pairs:
            if (
                key
                and key.lower() in ENTRY_WORDS
                and _is_text(value)
                and (DOTTED.match(value.value) or ENTRY_STRING.match(value.value))
            ):
                found.append(
                    f"{rel}:{value.lineno} gives {key}={value.value!r}: a function "
                    "named by a string"
                )
    return sorted(set(found))


def _call_name(node) -> str:
    func = node.func if isinstance(node, ast.Call) else None
    return (
        func.id
        if isinstance(func, ast.Name)
        else func.attr
        if isinstance(func, ast.Attribute)
        else ""
    )


def string_lookups(rel: str, source: str) -> list[str]:
    """Functions found by a name at run time, outside :data:`LOOKUP_ALLOWED`: a call of a
    module loader (:data:`LOADERS`), ``getattr`` with a constant name on a module (one a
    loader returns, one from ``sys.modules``, or a name this file imports from our
    packages), and ``globals()`` / ``vars()`` / ``__dict__`` indexed by a constant."""
    if rel in LOOKUP_ALLOWED:
        return []
    tree = ast.parse(source)
    ours = set()  # names this file binds by importing our modules
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            ours.update(
                (a.asname or a.name).split(".")[0]
                for a in node.names
                if within(a.name, "smallinit")
            )
        elif isinstance(node, ast.ImportFrom) and (
            node.level or within(node.module or "", "smallinit")
        ):
            ours.update(a.asname or a.name for a in node.names)

    def is_module(node) -> bool:
        root = node
        while isinstance(root, ast.Attribute):
            root = root.value
        return (
            _call_name(node) in LOADERS
            or (isinstance(root, ast.Name) and root.id in ours)
            or (isinstance(node, ast.Subscript) and ast.unparse(node.value) == "sys.modules")
        )

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) in LOADERS:
            found.append(f"{rel}:{node.lineno} loads a module by its name ({_call_name(node)})")
        if (
            isinstance(node, ast.Call)
            and _call_name(node) == "getattr"
            and len(node.args) >= 2
            and _is_text(node.args[1])
            and is_module(node.args[0])
        ):
            found.append(f"{rel}:{node.lineno} looks up {node.args[1].value!r} by a string")
        if (
            isinstance(node, ast.Subscript)
            and _is_text(node.slice)
            and (
                _call_name(node.value) in ("globals", "vars", "locals")
                or (isinstance(node.value, ast.Attribute) and node.value.attr == "__dict__")
            )
        ):
            found.append(f"{rel}:{node.lineno} looks up {node.slice.value!r} by a string")
    return [f"{hit}: import the function and call it" for hit in found]


def second_override_functions(rel: str, source: str) -> list[str]:
    """Config changes that bypass ``smallinit.core.config.override``, outside the override
    function's module (theory and kernels, which import nothing of ours and hold no run
    config, are not asked): ``dataclasses.replace`` (or a ``replace`` imported from
    dataclasses); a ``split("__")`` of keyword names into paths; a function named like an
    override (``override``, ``_apply_overrides``, ``_merge``, ``replace_config``:
    :data:`OVERRIDE_WORDS`, :data:`OVERRIDE_NAMES`); keys routed by a section's prefix
    (``key.startswith("scan.")``, ``removeprefix``, or compared with ``"scan."``)."""
    if rel == OVERRIDE_FUNCTION or rel.startswith(("theory/", "kernels/")):
        return []
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (
            OVERRIDE_WORDS & set(node.name.lower().split("_"))
            or node.name.strip("_").lower() in OVERRIDE_NAMES
        ):
            found.append(f"{rel}:{node.lineno} defines {node.name}, a second override function")
        prefixes = []
        if (
            isinstance(node, ast.Call)
            and _call_name(node) in ("startswith", "removeprefix")
            and node.args
        ):
            arg = node.args[0]
            prefixes = arg.elts if isinstance(arg, ast.Tuple) else [arg]
        elif isinstance(node, ast.Compare):
            prefixes = [node.left, *node.comparators]
        for prefix in prefixes:
            if _is_text(prefix) and SECTION_PREFIX.match(prefix.value):
                found.append(f"{rel}:{node.lineno} routes keys by the prefix {prefix.value!r}")
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "dataclasses"
            and any(a.name == "replace" for a in node.names)
        ):
            found.append(f"{rel}:{node.lineno} imports dataclasses.replace")
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "replace"
            and isinstance(node.value, ast.Name)
            and node.value.id == "dataclasses"
        ):
            found.append(f"{rel}:{node.lineno} calls dataclasses.replace")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "split"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == "__"
        ):
            found.append(f"{rel}:{node.lineno} splits names on '__' into a config path")
    return [f"{hit}: change a config with smallinit.core.config.override" for hit in found]


def second_registries(rel: str, source: str) -> list[str]:
    """A registry of experiments other than the one: a module-level ``EXPERIMENTS`` outside
    the registry, or an ``Experiment(...)`` built outside the experiment modules."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else ([node.target] if isinstance(node, ast.AnnAssign) else [])
        )
        if rel != REGISTRY and any(
            isinstance(t, ast.Name) and t.id == "EXPERIMENTS" for t in targets
        ):
            found.append(f"{rel}:{node.lineno} defines EXPERIMENTS: the registry is {REGISTRY}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "Experiment"
            and not rel.startswith(EXPERIMENTS)
        ):
            found.append(f"{rel}:{node.lineno} builds an Experiment outside {EXPERIMENTS}")
    return found


ONE_PATH_RULES = (string_entry_points, string_lookups, second_override_functions, second_registries)


def test_one_path_per_idea():
    found = [
        hit
        for rel in source_files()
        for rule in ONE_PATH_RULES
        for hit in rule(rel, (ROOT / rel).read_text(encoding="utf-8"))
    ]
    assert not found, "\n".join(found)


def test_every_experiment_module_declares_one_experiment_the_registry_lists():
    modules = sorted(
        p.stem
        for p in (ROOT / EXPERIMENTS).glob("*.py")
        if p.stem not in ("__init__", "experiment", "llm_plan")
    )
    registry = (ROOT / REGISTRY).read_text(encoding="utf-8")
    for name in modules:
        source = (ROOT / EXPERIMENTS / f"{name}.py").read_text(encoding="utf-8")
        assert source.count("\nEXPERIMENT = Experiment(") == 1, name
        assert re.search(rf"\b{name}\b", registry), f"{name} is not in the registry"


@pytest.mark.parametrize(
    ("rule", "rel", "source"),
    [
        (
            string_entry_points,
            "study/experiments/x.py",
            'ENTRY = "smallinit.llm.training.train:train_job"\n',
        ),
        (
            string_entry_points,
            "study/experiments/x.py",
            'Job(entry="smallinit.llm.training.train.train_job")\n',
        ),
        (string_entry_points, "study/experiments/x.py", 'spec = {"target": "pkg.mod.func"}\n'),
        (string_entry_points, "study/figs.py", 'F = "smallinit.llm.training.train.train"\n'),
        (string_entry_points, "study/figs.py", 'F = "llm.training.train.train"\n'),
        (
            string_lookups,
            "study/experiments/x.py",
            "import importlib\n"
            'f = getattr(importlib.import_module("smallinit.llm.training.train"), "train")\n',
        ),
        (
            string_lookups,
            "core/jobs.py",
            "from importlib import import_module\nm = import_module(name)\n",
        ),
        (string_lookups, "core/jobs.py", "m = __import__('smallinit.core.runs')\n"),
        (
            string_lookups,
            "core/jobs.py",
            "from smallinit.llm.training import train\nf = getattr(train, 'train')\n",
        ),
        (
            string_lookups,
            "core/jobs.py",
            "import smallinit.llm.training.train\n"
            "f = getattr(smallinit.llm.training.train, 'train')\n",
        ),
        (string_lookups, "core/jobs.py", "import sys\nf = getattr(sys.modules[n], 'f')\n"),
        (string_lookups, "core/jobs.py", "f = globals()['train_job']\n"),
        (
            second_override_functions,
            "llm/training/anchor.py",
            "def replace_config(cfg, table):\n    return cfg\n",
        ),
        (
            second_override_functions,
            "study/experiments/anchor_scan.py",
            "def _apply_overrides(cfg, changes):\n    return cfg\n",
        ),
        (
            second_override_functions,
            "core/profiles/__init__.py",
            "def _merge(a, b):\n    return a | b\n",
        ),
        (second_override_functions, "cli/llm.py", "def override(text):\n    return text\n"),
        (
            second_override_functions,
            "study/experiments/anchor_scan.py",
            "scan = {k[5:]: v for k, v in changes.items() if k.startswith('scan.')}\n",
        ),
        (
            second_override_functions,
            "study/experiments/anchor_scan.py",
            "rest = [k.removeprefix('scan.') for k in keys if k.startswith(('model.', 'x'))]\n",
        ),
        (
            second_override_functions,
            "study/experiments/anchor_scan.py",
            "scan = [k for k in keys if k[:5] == 'scan.']\n",
        ),
        (
            second_override_functions,
            "study/experiments/x.py",
            "import dataclasses\ncfg = dataclasses.replace(cfg, seed=1)\n",
        ),
        (
            second_override_functions,
            "llm/training/trained.py",
            "from dataclasses import dataclass, replace\n",
        ),
        (
            second_override_functions,
            "study/experiments/llm_plan.py",
            "def _with(cfg, **kw):\n    for key in kw:\n        key.split('__')\n",
        ),
        (second_registries, "llm/training/train.py", "EXPERIMENTS = {}\n"),
        (second_registries, "study/figs.py", "E = Experiment('x', (1,), '', f)\n"),
    ],
)
def test_each_one_path_rule_catches_a_planted_violation(rule, rel, source):
    assert rule(rel, source)


@pytest.mark.parametrize(
    ("rule", "rel", "source"),
    [
        (string_entry_points, "cli/util.py", 'TEXT = "key=value: a:b"\n'),
        (
            string_entry_points,
            "core/progress.py",
            'log = logging.getLogger("smallinit.core.jobs")\n',
        ),
        (
            string_entry_points,
            "study/experiments/x.py",
            'cfg = override(cfg, {"train.lr": 1e-3, "model.norm_eps": 1e-5})\n',
        ),
        (string_entry_points, "study/experiments/x.py", "Job(entry=train_job)\n"),
        (
            string_lookups,
            "study/figs.py",
            "import importlib\nm = importlib.import_module(module_name(7))\n"
            "f = getattr(m, 'make')\n",
        ),
        (
            string_lookups,
            "llm/__init__.py",
            "import importlib\ndef __getattr__(name):\n"
            "    return getattr(importlib.import_module(_EXPORTS[name]), name)\n",
        ),
        (string_lookups, "llm/training/cost.py", "t = getattr(config, 'task', None)\n"),
        (
            string_lookups,
            "llm/model/fastpath.py",
            "import torch\nf = getattr(torch._C, '_storage_Use_Count', None)\n",
        ),
        (
            string_lookups,
            "llm/training/sinks.py",
            "import importlib.util\nok = importlib.util.find_spec('wandb') is not None\n",
        ),
        (
            second_override_functions,
            OVERRIDE_FUNCTION,
            "def override(cfg, changes):\n    return cfg\ndef merge_tables(a, b):\n    return a\n",
        ),
        (
            second_override_functions,
            "core/config_test.py",
            "def parse(text):\n    return text.startswith('text:') or text.startswith('.')\n",
        ),
        (
            second_override_functions,
            "core/config.py",
            "import dataclasses\nx = dataclasses.replace(c)\n",
        ),
        (second_override_functions, "theory/phase.py", "e = expr.replace(a, b)\n"),
        (second_override_functions, "theory/phase.py", "s = dataclasses.replace(s, a=1)\n"),
        (second_registries, REGISTRY, "EXPERIMENTS = {}\n"),
        (
            second_registries,
            "study/experiments/toy_scan.py",
            "EXPERIMENT = Experiment('toy-scan', (1,), '', specs)\n",
        ),
    ],
)
def test_the_one_path_rules_accept_what_is_allowed(rule, rel, source):
    assert rule(rel, source) == []


# ----------------------------------------------------------------------------- the plain model
#: the model as it reads (nanoGPT's model.py in two files); the CPU fast path subclasses its
#: layers in llm/model/fastlayers.py and is chosen when a model is built
PLAIN_MODEL = ("llm/model/layers.py", "llm/model/transformer.py")


def fast_path_mentions(rel: str, source: str) -> list[str]:
    """Every name, attribute, argument or import containing "fast" inside a function of
    ``source`` other than a constructor (which may choose the layers, once): a fast-path
    branch in the plain model's forward code."""
    found = []
    for func in ast.walk(ast.parse(source)):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef) or func.name == "__init__":
            continue
        for node in ast.walk(func):
            word = (
                node.id
                if isinstance(node, ast.Name)
                else node.attr
                if isinstance(node, ast.Attribute)
                else node.arg
                if isinstance(node, ast.arg)
                else node.asname or node.name
                if isinstance(node, ast.alias)
                else ""
            )
            if "fast" in word.lower():
                found.append(f"{rel}:{node.lineno} {func.name} mentions {word}")
    return found


#: tensor attributes and calls that tell the device or the grad mode (a fast path's test)
DEVICE_ATTRS = ("is_cuda", "is_cpu", "is_mps", "is_meta", "is_xpu", "requires_grad")
MODE_CALLS = (
    "is_grad_enabled",
    "is_inference_mode_enabled",
    "is_inference",
    "is_autocast_enabled",
    "is_autocast_cpu_enabled",
    "is_scripting",
    "is_tracing",
    "is_compiling",
    "is_available",
)


def device_branches(rel: str, source: str) -> list[str]:
    """Tests of the device, the dtype or the grad mode in the plain model's code: outside a
    constructor, a read of ``x.device.type`` or of :data:`DEVICE_ATTRS`, a call of
    :data:`MODE_CALLS` (``torch.is_grad_enabled()``), or a comparison or ``if`` on
    ``.device``; inside a ``forward`` method also a comparison or ``if`` on ``.dtype``.
    (Passing ``device=x.device`` on is no branch; a helper such as ``hidden`` may refuse
    a wrong dtype.)"""
    found = []
    for func in ast.walk(ast.parse(source)):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef) or func.name == "__init__":
            continue
        watched = ("device", "dtype") if func.name == "forward" else ("device",)
        tests = [n.test for n in ast.walk(func) if isinstance(n, ast.If | ast.IfExp | ast.While)]
        tests += [n for n in ast.walk(func) if isinstance(n, ast.Compare)]
        for node in ast.walk(func):
            if isinstance(node, ast.Attribute) and (
                node.attr in DEVICE_ATTRS
                or (
                    node.attr == "type"
                    and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "device"
                )
            ):
                found.append(f"{rel}:{node.lineno} {func.name} reads {ast.unparse(node)}")
            if isinstance(node, ast.Call) and _call_name(node) in MODE_CALLS:
                found.append(f"{rel}:{node.lineno} {func.name} calls {_call_name(node)}")
        for test in tests:
            for node in ast.walk(test):
                if isinstance(node, ast.Attribute) and node.attr in watched:
                    found.append(f"{rel}:{node.lineno} {func.name} branches on {ast.unparse(node)}")
    return sorted(set(found))


def test_the_models_forward_code_never_mentions_the_fast_path():
    sources = {rel: (ROOT / rel).read_text(encoding="utf-8") for rel in PLAIN_MODEL}
    forwards = [
        node
        for source in sources.values()
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef) and node.name == "forward"
    ]
    assert len(forwards) >= 4  # the attention's, the MLP's, the block's, the model's
    found = [hit for rel, source in sources.items() for hit in fast_path_mentions(rel, source)]
    assert not found, (
        "the plain model branches on the fast path; put it in a layer of "
        f"llm/model/fastlayers.py, chosen at build time: {found}"
    )
    found = [hit for rel, source in sources.items() for hit in device_branches(rel, source)]
    assert not found, (
        "the plain model branches on the device, dtype or grad mode; put the "
        f"fast path in llm/model/fastlayers.py, chosen at build time: {found}"
    )


@pytest.mark.parametrize(
    "source",
    [
        "class RMSNorm:\n    def forward(self, x):\n        if fastpath.enabled(x):\n"
        "            return rms(x)\n        return x\n",
        "class Attention:\n    def split_heads(self, qkv):\n        return fast_rope(qkv)\n",
        "class MLP:\n    def forward(self, x):\n        from smallinit.llm.model import fastpath\n"
        "        return x\n",
        "class Head:\n    def forward(self, x, use_fast=True):\n        return x\n",
        "def forward(self, x):\n    return self.norm.fast(x)\n",
    ],
)
def test_the_fast_path_check_catches_a_fake_source(source):
    assert fast_path_mentions("llm/model/layers.py", source)


@pytest.mark.parametrize(
    "source",
    [
        "class RMSNorm:\n    def forward(self, x):\n        if x.device.type == 'cpu':\n"
        "            return rms(x)\n        return x\n",
        "class MLP:\n    def forward(self, x):\n        if torch.is_grad_enabled():\n"
        "            return self.slow(x)\n        return self.quick(x)\n",
        "class MLP:\n    def forward(self, x):\n        return a(x) if x.dtype == torch.float32 "
        "else b(x)\n",
        "class Attention:\n    def forward(self, x):\n"
        "        if x.is_cuda and not x.requires_grad:\n"
        "            return x\n        return x\n",
        "class Attention:\n    def split_heads(self, qkv):\n        ok = qkv.device == CPU\n"
        "        return ok\n",
        "class Block:\n    def forward(self, x):\n"
        "        while torch.is_inference_mode_enabled():\n"
        "            break\n        return x\n",
    ],
)
def test_the_device_branch_check_catches_a_fake_source(source):
    assert device_branches("llm/model/transformer.py", source)


def test_the_device_branch_check_lets_the_model_pass_the_device_on():
    source = (
        "class A:\n    def __init__(self, x):\n        self.cpu = x.device.type == 'cpu'\n"
        "    def forward(self, x):\n        m = torch.ones(2, device=x.device)\n"
        "        return m.to(x.dtype)\n"
        "    def hidden(self, idx):\n        if idx.dtype == torch.bool:\n"
        "            raise TypeError(idx.dtype)\n        return idx\n"
    )
    assert device_branches("llm/model/layers.py", source) == []


def test_the_fast_path_check_lets_the_constructor_choose_the_layers():
    source = (
        "class Transformer:\n    def __init__(self, parts=FAST_PARTS):\n"
        "        self.head = FastHead()\n    def forward(self, h):\n"
        "        return self.head(h)\n"
    )
    assert fast_path_mentions("llm/model/transformer.py", source) == []
