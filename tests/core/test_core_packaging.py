"""A regular (non-editable) install puts only `smallinit` into site-packages."""

import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: the folders pyproject maps into the package (each top-level folder X is smallinit.X)
FOLDERS = sorted(
    set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
            "package-dir"
        ].values()
    )
)
SOURCES = ["pyproject.toml", "README.md", *FOLDERS]


def test_regular_install_has_one_top_level_package(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, src / name)
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    top = sorted(p.name for p in target.iterdir() if p.name != "bin")
    assert top[0] == "smallinit"
    assert len(top) == 2 and top[1].startswith("smallinit-") and top[1].endswith(".dist-info")
    pkg = target / "smallinit"
    for component in (
        "theory",
        "toy",
        "llm",
        "kernels",
        "core",
        "cli",
        "compare",
        "study",
        "tools",
    ):
        assert (pkg / component / "__init__.py").is_file()
    assert (pkg / "core" / "style" / "smallinit.mplstyle").is_file()
    # the figure scripts, the profiles and the CUDA emulation's header ship in the package
    assert (pkg / "paper_figs" / "fig01_phase_diagram.py").is_file()
    assert {p.name for p in (pkg / "core" / "profiles").glob("*.toml")} >= {
        "quick.toml",
        "full.toml",
    }
    assert (pkg / "tools" / "emulation" / "cuda_host.h").is_file()
    assert (pkg / "study" / "experiments" / "gamma_sweep.py").is_file()
    # the installed copy imports on its own (no site: only the target directory is on the path)
    probe = "import smallinit.theory.init_rules as r; print(r.__file__)"
    out = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(target)},
        cwd=tmp_path,
        check=True,
    ).stdout
    assert out.strip().startswith(str(pkg))


def test_sdist_ships_the_science_document(tmp_path):
    """The code cites docs/science.md; MANIFEST.in puts docs/*.md into the source
    distribution, built here with setuptools' own PEP 517 hook (no `build` needed)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in [*SOURCES, "MANIFEST.in", "docs"]:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, src / name)
    out = tmp_path / "dist"
    hook = "import sys; from setuptools import build_meta; build_meta.build_sdist(sys.argv[1])"
    subprocess.run([sys.executable, "-c", hook, str(out)], cwd=src, check=True, capture_output=True)
    (sdist,) = out.glob("smallinit-*.tar.gz")
    top = sdist.name.removesuffix(".tar.gz")
    with tarfile.open(sdist) as tar:
        names = set(tar.getnames())
        for doc in ("science.md", "README.md"):
            assert f"{top}/docs/{doc}" in names, f"docs/{doc} is missing from {sdist.name}"
        shipped = tar.extractfile(f"{top}/docs/science.md").read()
    assert shipped == (ROOT / "docs" / "science.md").read_bytes()
    assert f"{top}/theory/init_rules.py" in names  # the code it documents, too
