"""The figure pipeline behind ``smallinit figs`` and ``make figs``.

``paper_figs/`` holds one script per figure of SPEC §7, named ``figNN_name.py``. A script
defines ``NUMBER``, ``TITLE`` and ``make(ctx: FigureContext) -> list[Path]``: it gets (or
computes, through the run store, so a second call is fast) its experiment's results for
``ctx.profile`` and saves the drawing with ``ctx.save(fig)``. A figure whose script does
not exist yet is listed as not yet available; nothing is drawn in its place.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
import time
from pathlib import Path
from types import ModuleType

from smallinit.errors import ConfigError, check_choice
from smallinit.runs import RunStore

log = logging.getLogger(__name__)

#: SPEC §7: figure number -> file stem suffix (``figNN_<name>``).
FIGURES: dict[int, str] = {
    1: "phase_diagram",
    2: "rd_vs_width",
    3: "condensation",
    4: "lazy_vs_rich",
    5: "transformer_phase",
    6: "anchor_phase",
    7: "gamma_sweep",
    8: "eps_gating",
    9: "critical_init",
    10: "condense_expand",
    11: "token_gains",
}
PROFILES = ("quick", "full")


@dataclasses.dataclass
class FigureContext:
    """What a figure script receives: where to read results and write its files."""

    number: int
    profile: str
    out_dir: Path
    store: RunStore
    force: bool = False

    @property
    def stem(self) -> str:
        return f"fig{self.number:02d}_{FIGURES[self.number]}"

    def save(self, fig, suffix: str = "") -> list[Path]:
        """Save ``fig`` as ``figNN_name[suffix].png`` and ``.pdf`` in the output folder."""
        from smallinit.plotting import save_figure

        return save_figure(fig, self.out_dir, self.stem + suffix)


def figures_dir() -> Path:
    """``$SMALLINIT_FIGS_DIR``, else the checkout's ``paper_figs/``, else ``./paper_figs``."""
    env = os.environ.get("SMALLINIT_FIGS_DIR")
    if env:
        return Path(env)
    beside_package = Path(__file__).resolve().parent.parent / "paper_figs"
    if beside_package.is_dir():
        return beside_package
    return Path.cwd() / "paper_figs"


def figure_scripts(folder: Path | None = None) -> dict[int, Path]:
    """Existing figure scripts by number."""
    folder = folder or figures_dir()
    found = {}
    for number, name in FIGURES.items():
        path = folder / f"fig{number:02d}_{name}.py"
        if path.is_file():
            found[number] = path
    return found


def load_script(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"smallinit_paper_figs.{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "make", None)):
        raise ConfigError(f"figure script {path} has no make(ctx) function")
    return module


def make_figures(
    only: list[int] | None = None,
    profile: str = "quick",
    out_dir: Path | None = None,
    store: RunStore | None = None,
    force: bool = False,
) -> dict[int, list[Path] | None]:
    """Render the chosen figures; value ``None`` marks a figure not yet available."""
    check_choice("profile", profile, PROFILES)
    for n in only or []:
        check_choice("figure number", n, FIGURES)
    folder = figures_dir()
    if not folder.is_dir():
        raise ConfigError(f"figure scripts folder {folder} does not exist; run from a checkout "
                          "or set SMALLINIT_FIGS_DIR")
    out_dir = Path(out_dir) if out_dir else folder / "out"
    store = store or RunStore()
    scripts = figure_scripts(folder)
    results: dict[int, list[Path] | None] = {}
    for number in sorted(only or FIGURES):
        if number not in scripts:
            results[number] = None
            continue
        ctx = FigureContext(number, profile, out_dir, store, force)
        t0 = time.perf_counter()
        results[number] = list(load_script(scripts[number]).make(ctx))
        log.info("fig %02d done in %.1f s", number, time.perf_counter() - t0)
    return results
