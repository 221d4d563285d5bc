"""The floor plan and the one-path rules, read with ``ast`` from the source tree (nothing
is imported).

Floor plan (lowest floor first; an arrow may only point down):

* **theory/** (``smallinit.theory``) and **kernels/** (``smallinit.kernels``): import
  nothing of ours outside their own package (they raise plain ``ValueError``).
* **core** (``core/``: run store, configs, profiles, job driver, errors, progress,
  plotting, stats, memory, downloads): imports only the core.
* **toy/** and **llm/**: import theory, kernels and the core; llm never imports toy and
  toy never imports llm.
* **the roof**: ``compare/``, ``study/`` (the experiments, the figure
  driver, the claims, the GPU check) and **paper_figs/** sit on the components; none of
  them imports the CLI.
* **cli** (``cli/``): on top of everything; nothing below it imports it.
  ``smallinit/__init__.py`` (the package's lazy re-exports) and ``smallinit/__main__.py``
  (the CLI's entry point) stand apart.

And imports of our own modules sit at the top of their module, where the graph can be
read: outside ``cli/`` (whose handlers import libraries lazily so that
``smallinit --help`` stays fast) a function-level import of ``smallinit...`` is allowed only
when its line carries ``# lazy: <reason>`` (an import cycle, an optional dependency such as
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
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: source folder -> the package it is installed as (pyproject's package-dir)
PACKAGES = {
    "smallinit": "smallinit",
    "core": "smallinit.core",
    "cli": "smallinit.cli",
    "compare": "smallinit.compare",
    "study": "smallinit.study",
    "theory": "smallinit.theory",
    "toy": "smallinit.toy",
    "llm": "smallinit.llm",
    "kernels": "smallinit.kernels",
    "paper_figs": "smallinit.paper_figs",
}
COMPONENTS = ("smallinit.theory", "smallinit.toy", "smallinit.llm", "smallinit.kernels")
ROOF = ("smallinit.compare", "smallinit.study", "smallinit.paper_figs")
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
    if within(module, "smallinit.core") and not within(name, "smallinit.core"):
        found.append(f"{where}: the core imports only the core")
    below_roof = within(module, "smallinit.core") or any(within(module, p) for p in COMPONENTS)
    if below_roof and any(within(name, p) for p in ROOF):
        found.append(f"{where}: compare, study and paper_figs sit on top of the components "
                     "and the core")
    if within(name, "smallinit.cli") and not within(module, "smallinit.cli") \
            and module != "smallinit.__main__":
        found.append(f"{where}: only the CLI (and its entry point) imports the CLI")
    return found


def source_files() -> list[str]:
    files = []
    for folder in PACKAGES:
        files += [p.relative_to(ROOT).as_posix() for p in (ROOT / folder).rglob("*.py")
                  if "out" not in p.relative_to(ROOT).parts]
    return sorted(files)


def test_the_source_tree_keeps_the_floor_plan():
    files = source_files()
    assert len(files) > 50 and "toy/scan.py" in files and "cli/figs.py" in files
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
    ("theory/phase.py", "from smallinit.core.errors import X\n", "theory imports nothing"),
    ("kernels/measure.py", "import smallinit.core.store\n", "kernels imports nothing"),
    ("theory/phase.py", "from ..toy import scan\n", "theory imports nothing"),
    ("llm/analysis/ffn.py", "from smallinit.toy.scan import fit_slopes\n", "llm never imports"),
    ("toy/scan.py", "from smallinit import llm\n", "toy never imports llm"),
    ("toy/scan.py", "from smallinit.cli import main\n", "only the CLI"),
    ("compare/run.py", "from smallinit.cli.util import x\n", "only the CLI"),
    ("study/experiments/gamma_sweep.py", "import smallinit.cli\n", "only the CLI"),
    ("paper_figs/fig01_phase_diagram.py", "from smallinit.cli import util\n", "only the CLI"),
    ("core/runs.py", "from smallinit.compare import run\n", "sit on top"),
    ("llm/run_config.py", "from smallinit.paper_figs import fig01_phase_diagram\n", "sit on top"),
    ("toy/scan.py", "from smallinit.study import experiments\n", "sit on top"),
    ("core/jobs.py", "from smallinit.toy import scan\n", "only the core"),
    ("core/profiles/__init__.py", "from smallinit.llm import config\n", "only the core"),
    ("core/store.py", "from smallinit.study.figs import x\n", "only the core"),
    ("toy/scan.py", "def f():\n    from smallinit.core.store import S\n", "inside a function"),
    ("core/runs.py", "class A:\n    def f(self):\n        import smallinit.core.errors\n",
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
    ("toy/scan.py", "from smallinit.theory import phase\nfrom smallinit.core.store import S\n"),
    ("core/store.py", "from smallinit.core.runs import Run\n"),
    ("llm/run_config.py", "from smallinit.kernels import cluster_count\n"),
    ("study/experiments/compare.py", "from smallinit.compare.run import x\n"),
    ("study/figs.py", "from smallinit.study import experiments\n"),
    ("smallinit/__main__.py", "from smallinit.cli import main\n"),
    ("cli/figs.py", "def f():\n    from smallinit.study.experiments import plan\n"),
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
    """Places outside ``core/jobs.py`` that start worker processes or keep a
    force-once set of their own: a second sweep driver in the making."""
    if rel == "core/jobs.py":
        return []
    return [f"{rel}:{n} {word}" for n, line in enumerate(source.splitlines(), 1)
            for word in DRIVER_ONLY if word in line and not line.lstrip().startswith("#")]


def test_one_job_driver_runs_every_sweep():
    found = [hit for rel in source_files()
             for hit in driver_copies(rel, (ROOT / rel).read_text(encoding="utf-8"))]
    assert not found, f"only core/jobs.py runs many runs (workers, force once): " \
                      f"{found}"
    assert driver_copies("study/experiments/gamma_sweep.py",
                         "from concurrent.futures import ProcessPoolExecutor\n")


# ----------------------------------------------------------------------------- one path per idea
ENTRY_STRING = re.compile(r"^[A-Za-z_][\w.]*\.[A-Za-z_]\w*:[A-Za-z_]\w*$")  # "pkg.mod:func"
DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")  # "pkg.mod.func"
#: keywords and dict keys whose value, given as a dotted string, names a function to call
ENTRY_WORDS = ("entry", "entry_point", "target", "_target_", "func", "fn", "function",
               "callable", "handler", "runner")
#: where a module may be looked up by its name: the packages' lazy re-exports, the CLI's
#: command dispatch (one module per command group), the figure driver (one per figure)
LOOKUP_ALLOWED = ("smallinit/__init__.py", "theory/__init__.py", "toy/__init__.py",
                  "llm/__init__.py", "cli/__init__.py", "study/figs.py")
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
            n.name for n in body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef))
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
        pairs = ([(k.arg, k.value) for k in node.keywords] if isinstance(node, ast.Call) else
                 [(k.value, v) for k, v in zip(node.keys, node.values, strict=True)
                  if _is_text(k)] if isinstance(node, ast.Dict) else
                 [(t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
                 if isinstance(node, ast.Assign) else [])
        for key, value in pairs:
            if key and key.lower() in ENTRY_WORDS and _is_text(value) and \
                    (DOTTED.match(value.value) or ENTRY_STRING.match(value.value)):
                found.append(f"{rel}:{value.lineno} gives {key}={value.value!r}: a function "
                             "named by a string")
    return sorted(set(found))


def _call_name(node) -> str:
    func = node.func if isinstance(node, ast.Call) else None
    return (func.id if isinstance(func, ast.Name) else
            func.attr if isinstance(func, ast.Attribute) else "")


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
            ours.update((a.asname or a.name).split(".")[0] for a in node.names
                        if within(a.name, "smallinit"))
        elif isinstance(node, ast.ImportFrom) and (
                node.level or within(node.module or "", "smallinit")):
            ours.update(a.asname or a.name for a in node.names)

    def is_module(node) -> bool:
        root = node
        while isinstance(root, ast.Attribute):
            root = root.value
        return (_call_name(node) in LOADERS or (isinstance(root, ast.Name) and root.id in ours)
                or (isinstance(node, ast.Subscript) and ast.unparse(node.value) == "sys.modules"))

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) in LOADERS:
            found.append(f"{rel}:{node.lineno} loads a module by its name "
                         f"({_call_name(node)})")
        if isinstance(node, ast.Call) and _call_name(node) == "getattr" and \
                len(node.args) >= 2 and _is_text(node.args[1]) and is_module(node.args[0]):
            found.append(f"{rel}:{node.lineno} looks up {node.args[1].value!r} by a string")
        if isinstance(node, ast.Subscript) and _is_text(node.slice) and (
                _call_name(node.value) in ("globals", "vars", "locals") or
                (isinstance(node.value, ast.Attribute) and node.value.attr == "__dict__")):
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
                or node.name.strip("_").lower() in OVERRIDE_NAMES):
            found.append(f"{rel}:{node.lineno} defines {node.name}, a second override function")
        prefixes = []
        if isinstance(node, ast.Call) and _call_name(node) in ("startswith", "removeprefix") \
                and node.args:
            arg = node.args[0]
            prefixes = arg.elts if isinstance(arg, ast.Tuple) else [arg]
        elif isinstance(node, ast.Compare):
            prefixes = [node.left, *node.comparators]
        for prefix in prefixes:
            if _is_text(prefix) and SECTION_PREFIX.match(prefix.value):
                found.append(f"{rel}:{node.lineno} routes keys by the prefix "
                             f"{prefix.value!r}")
        if isinstance(node, ast.ImportFrom) and node.module == "dataclasses" and \
                any(a.name == "replace" for a in node.names):
            found.append(f"{rel}:{node.lineno} imports dataclasses.replace")
        if isinstance(node, ast.Attribute) and node.attr == "replace" and \
                isinstance(node.value, ast.Name) and node.value.id == "dataclasses":
            found.append(f"{rel}:{node.lineno} calls dataclasses.replace")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "split" and node.args and \
                isinstance(node.args[0], ast.Constant) and node.args[0].value == "__":
            found.append(f"{rel}:{node.lineno} splits names on '__' into a config path")
    return [f"{hit}: change a config with smallinit.core.config.override" for hit in found]


def second_registries(rel: str, source: str) -> list[str]:
    """A registry of experiments other than the one: a module-level ``EXPERIMENTS`` outside
    the registry, or an ``Experiment(...)`` built outside the experiment modules."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else [])
        if rel != REGISTRY and any(isinstance(t, ast.Name) and t.id == "EXPERIMENTS"
                                   for t in targets):
            found.append(f"{rel}:{node.lineno} defines EXPERIMENTS: the registry is {REGISTRY}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id == "Experiment" and not rel.startswith(EXPERIMENTS):
            found.append(f"{rel}:{node.lineno} builds an Experiment outside {EXPERIMENTS}")
    return found


ONE_PATH_RULES = (string_entry_points, string_lookups, second_override_functions,
                  second_registries)


def test_one_path_per_idea():
    found = [hit for rel in source_files() for rule in ONE_PATH_RULES
             for hit in rule(rel, (ROOT / rel).read_text(encoding="utf-8"))]
    assert not found, "\n".join(found)


def test_every_experiment_module_declares_one_experiment_the_registry_lists():
    modules = sorted(p.stem for p in (ROOT / EXPERIMENTS).glob("*.py")
                     if p.stem not in ("__init__", "experiment", "llm_plan"))
    registry = (ROOT / REGISTRY).read_text(encoding="utf-8")
    for name in modules:
        source = (ROOT / EXPERIMENTS / f"{name}.py").read_text(encoding="utf-8")
        assert source.count("\nEXPERIMENT = Experiment(") == 1, name
        assert re.search(rf"\b{name}\b", registry), f"{name} is not in the registry"


@pytest.mark.parametrize(("rule", "rel", "source"), [
    (string_entry_points, "study/experiments/x.py",
     'ENTRY = "smallinit.llm.training.train:train_job"\n'),
    (string_entry_points, "study/experiments/x.py",
     'Job(entry="smallinit.llm.training.train.train_job")\n'),
    (string_entry_points, "study/experiments/x.py",
     'spec = {"target": "pkg.mod.func"}\n'),
    (string_entry_points, "study/figs.py", 'F = "smallinit.llm.training.train.train"\n'),
    (string_entry_points, "study/figs.py", 'F = "llm.training.train.train"\n'),
    (string_lookups, "study/experiments/x.py",
     'import importlib\nf = getattr(importlib.import_module("smallinit.llm.training.train"), '
     '"train")\n'),
    (string_lookups, "core/jobs.py", "from importlib import import_module\n"
     "m = import_module(name)\n"),
    (string_lookups, "core/jobs.py", "m = __import__('smallinit.core.runs')\n"),
    (string_lookups, "core/jobs.py",
     "from smallinit.llm.training import train\nf = getattr(train, 'train')\n"),
    (string_lookups, "core/jobs.py",
     "import smallinit.llm.training.train\nf = getattr(smallinit.llm.training.train, 'train')\n"),
    (string_lookups, "core/jobs.py", "import sys\nf = getattr(sys.modules[n], 'f')\n"),
    (string_lookups, "core/jobs.py", "f = globals()['train_job']\n"),
    (second_override_functions, "llm/training/anchor.py",
     "def replace_config(cfg, table):\n    return cfg\n"),
    (second_override_functions, "study/experiments/anchor_scan.py",
     "def _apply_overrides(cfg, changes):\n    return cfg\n"),
    (second_override_functions, "core/profiles/__init__.py",
     "def _merge(a, b):\n    return a | b\n"),
    (second_override_functions, "cli/llm.py", "def override(text):\n    return text\n"),
    (second_override_functions, "study/experiments/anchor_scan.py",
     "scan = {k[5:]: v for k, v in changes.items() if k.startswith('scan.')}\n"),
    (second_override_functions, "study/experiments/anchor_scan.py",
     "rest = [k.removeprefix('scan.') for k in keys if k.startswith(('model.', 'x'))]\n"),
    (second_override_functions, "study/experiments/anchor_scan.py",
     "scan = [k for k in keys if k[:5] == 'scan.']\n"),
    (second_override_functions, "study/experiments/x.py",
     "import dataclasses\ncfg = dataclasses.replace(cfg, seed=1)\n"),
    (second_override_functions, "llm/training/trained.py",
     "from dataclasses import dataclass, replace\n"),
    (second_override_functions, "study/experiments/llm_plan.py",
     "def _with(cfg, **kw):\n    for key in kw:\n        key.split('__')\n"),
    (second_registries, "llm/training/train.py", "EXPERIMENTS = {}\n"),
    (second_registries, "study/figs.py", "E = Experiment('x', (1,), '', f)\n"),
])
def test_each_one_path_rule_catches_a_planted_violation(rule, rel, source):
    assert rule(rel, source)


@pytest.mark.parametrize(("rule", "rel", "source"), [
    (string_entry_points, "cli/util.py", 'TEXT = "key=value: a:b"\n'),
    (string_entry_points, "core/progress.py",
     'log = logging.getLogger("smallinit.core.jobs")\n'),
    (string_entry_points, "study/experiments/x.py",
     'cfg = override(cfg, {"train.lr": 1e-3, "model.norm_eps": 1e-5})\n'),
    (string_entry_points, "study/experiments/x.py", 'Job(entry=train_job)\n'),
    (string_lookups, "study/figs.py",
     "import importlib\nm = importlib.import_module(module_name(7))\nf = getattr(m, 'make')\n"),
    (string_lookups, "llm/__init__.py",
     "import importlib\ndef __getattr__(name):\n"
     "    return getattr(importlib.import_module(_EXPORTS[name]), name)\n"),
    (string_lookups, "llm/training/cost.py", "t = getattr(config, 'task', None)\n"),
    (string_lookups, "llm/model/fastpath.py",
     "import torch\nf = getattr(torch._C, '_storage_Use_Count', None)\n"),
    (string_lookups, "llm/training/sinks.py",
     "import importlib.util\nok = importlib.util.find_spec('wandb') is not None\n"),
    (second_override_functions, OVERRIDE_FUNCTION,
     "def override(cfg, changes):\n    return cfg\ndef merge_tables(a, b):\n    return a\n"),
    (second_override_functions, "core/config_test.py",
     "def parse(text):\n    return text.startswith('text:') or text.startswith('.')\n"),
    (second_override_functions, "core/config.py",
     "import dataclasses\nx = dataclasses.replace(c)\n"),
    (second_override_functions, "theory/phase.py", "e = expr.replace(a, b)\n"),
    (second_override_functions, "theory/phase.py", "s = dataclasses.replace(s, a=1)\n"),
    (second_registries, REGISTRY, "EXPERIMENTS = {}\n"),
    (second_registries, "study/experiments/toy_scan.py",
     "EXPERIMENT = Experiment('toy-scan', (1,), '', specs)\n"),
])
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
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef) or \
                func.name == "__init__":
            continue
        for node in ast.walk(func):
            word = (node.id if isinstance(node, ast.Name) else
                    node.attr if isinstance(node, ast.Attribute) else
                    node.arg if isinstance(node, ast.arg) else
                    node.asname or node.name if isinstance(node, ast.alias) else "")
            if "fast" in word.lower():
                found.append(f"{rel}:{node.lineno} {func.name} mentions {word}")
    return found


#: tensor attributes and calls that tell the device or the grad mode (a fast path's test)
DEVICE_ATTRS = ("is_cuda", "is_cpu", "is_mps", "is_meta", "is_xpu", "requires_grad")
MODE_CALLS = ("is_grad_enabled", "is_inference_mode_enabled", "is_inference",
              "is_autocast_enabled", "is_autocast_cpu_enabled", "is_scripting", "is_tracing",
              "is_compiling", "is_available")


def device_branches(rel: str, source: str) -> list[str]:
    """Tests of the device, the dtype or the grad mode in the plain model's code: outside a
    constructor, a read of ``x.device.type`` or of :data:`DEVICE_ATTRS`, a call of
    :data:`MODE_CALLS` (``torch.is_grad_enabled()``), or a comparison or ``if`` on
    ``.device``; inside a ``forward`` method also a comparison or ``if`` on ``.dtype``.
    (Passing ``device=x.device`` on is no branch; a helper such as ``hidden`` may refuse
    a wrong dtype.)"""
    found = []
    for func in ast.walk(ast.parse(source)):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef) or \
                func.name == "__init__":
            continue
        watched = ("device", "dtype") if func.name == "forward" else ("device",)
        tests = [n.test for n in ast.walk(func) if isinstance(n, ast.If | ast.IfExp | ast.While)]
        tests += [n for n in ast.walk(func) if isinstance(n, ast.Compare)]
        for node in ast.walk(func):
            if isinstance(node, ast.Attribute) and (node.attr in DEVICE_ATTRS or (
                    node.attr == "type" and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "device")):
                found.append(f"{rel}:{node.lineno} {func.name} reads {ast.unparse(node)}")
            if isinstance(node, ast.Call) and _call_name(node) in MODE_CALLS:
                found.append(f"{rel}:{node.lineno} {func.name} calls {_call_name(node)}")
        for test in tests:
            for node in ast.walk(test):
                if isinstance(node, ast.Attribute) and node.attr in watched:
                    found.append(f"{rel}:{node.lineno} {func.name} branches on "
                                 f"{ast.unparse(node)}")
    return sorted(set(found))


def test_the_models_forward_code_never_mentions_the_fast_path():
    sources = {rel: (ROOT / rel).read_text(encoding="utf-8") for rel in PLAIN_MODEL}
    forwards = [node for source in sources.values() for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.FunctionDef) and node.name == "forward"]
    assert len(forwards) >= 4  # the attention's, the MLP's, the block's, the model's
    found = [hit for rel, source in sources.items() for hit in fast_path_mentions(rel, source)]
    assert not found, ("the plain model branches on the fast path; put it in a layer of "
                       f"llm/model/fastlayers.py, chosen at build time: {found}")
    found = [hit for rel, source in sources.items() for hit in device_branches(rel, source)]
    assert not found, ("the plain model branches on the device, dtype or grad mode; put the "
                       f"fast path in llm/model/fastlayers.py, chosen at build time: {found}")


@pytest.mark.parametrize("source", [
    "class RMSNorm:\n    def forward(self, x):\n        if fastpath.enabled(x):\n"
    "            return rms(x)\n        return x\n",
    "class Attention:\n    def split_heads(self, qkv):\n        return fast_rope(qkv)\n",
    "class MLP:\n    def forward(self, x):\n        from smallinit.llm.model import fastpath\n"
    "        return x\n",
    "class Head:\n    def forward(self, x, use_fast=True):\n        return x\n",
    "def forward(self, x):\n    return self.norm.fast(x)\n",
])
def test_the_fast_path_check_catches_a_fake_source(source):
    assert fast_path_mentions("llm/model/layers.py", source)


@pytest.mark.parametrize("source", [
    "class RMSNorm:\n    def forward(self, x):\n        if x.device.type == 'cpu':\n"
    "            return rms(x)\n        return x\n",
    "class MLP:\n    def forward(self, x):\n        if torch.is_grad_enabled():\n"
    "            return self.slow(x)\n        return self.quick(x)\n",
    "class MLP:\n    def forward(self, x):\n        return a(x) if x.dtype == torch.float32 "
    "else b(x)\n",
    "class Attention:\n    def forward(self, x):\n        if x.is_cuda and not x.requires_grad:\n"
    "            return x\n        return x\n",
    "class Attention:\n    def split_heads(self, qkv):\n        ok = qkv.device == CPU\n"
    "        return ok\n",
    "class Block:\n    def forward(self, x):\n        while torch.is_inference_mode_enabled():\n"
    "            break\n        return x\n",
])
def test_the_device_branch_check_catches_a_fake_source(source):
    assert device_branches("llm/model/transformer.py", source)


def test_the_device_branch_check_lets_the_model_pass_the_device_on():
    source = ("class A:\n    def __init__(self, x):\n        self.cpu = x.device.type == 'cpu'\n"
              "    def forward(self, x):\n        m = torch.ones(2, device=x.device)\n"
              "        return m.to(x.dtype)\n"
              "    def hidden(self, idx):\n        if idx.dtype == torch.bool:\n"
              "            raise TypeError(idx.dtype)\n        return idx\n")
    assert device_branches("llm/model/layers.py", source) == []


def test_the_fast_path_check_lets_the_constructor_choose_the_layers():
    source = ("class Transformer:\n    def __init__(self, parts=FAST_PARTS):\n"
              "        self.head = FastHead()\n    def forward(self, h):\n"
              "        return self.head(h)\n")
    assert fast_path_mentions("llm/model/transformer.py", source) == []
