"""Figure pipeline: byte-stable files, the driver, not-yet-available figures."""

import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from smallinit.core.errors import ConfigError
from smallinit.core.jobs import RunSpec
from smallinit.core.store import RunStore
from smallinit.study.experiments import Experiment
from smallinit.study.figs import FIGURES, load_figure, make_figures

TINY_FIGURE = textwrap.dedent(
    """
    import sys
    import numpy as np
    from smallinit.core.plotting import save_figure, use_style
    import matplotlib.pyplot as plt

    with use_style():
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(4, 2))
        x = np.linspace(0, 1, 50)
        ax1.plot(x, x ** 2, label="$x^2$")
        ax1.legend()
        ax1.set_title("γ = 0.5")
        ax2.imshow(np.outer(x, x))
        save_figure(fig, sys.argv[1], "tiny")
    """
)


def test_figures_are_byte_identical_across_processes(tmp_path):
    outputs = []
    for i in range(2):
        out = tmp_path / str(i)
        subprocess.run([sys.executable, "-c", TINY_FIGURE, str(out)], check=True)
        outputs.append({p.name: p.read_bytes() for p in out.iterdir()})
    assert sorted(outputs[0]) == ["tiny.pdf", "tiny.png"]
    assert outputs[0] == outputs[1]
    assert outputs[0]["tiny.png"].startswith(b"\x89PNG")
    assert b"CreationDate" not in outputs[0]["tiny.pdf"]


SCRIPT = textwrap.dedent(
    """
    import matplotlib.pyplot as plt
    from smallinit.study.figure import Figure, single
    from smallinit.core.plotting import use_style

    def make(ctx):
        run = single(ctx.results("testfig"))
        with use_style():
            fig, ax = plt.subplots()
            ax.plot(run.arrays()["y"])
            return ctx.save(fig)

    FIGURE = Figure(number=1, title="test figure", caption=__doc__, make=make)
    """
)


@dataclass
class SquaresSpec(RunSpec):
    """The stand-in figure's run: n squares, counting its computations in calls.txt."""

    kind = "testfig"

    def compute(self, store, force):
        def body(run):
            with open(store.root / "calls.txt", "a") as fh:
                fh.write("x")
            run.save_arrays(y=np.arange(self.config["n"]) ** 2)
            return {}

        return store.get_or_run(self.kind, self.config, body, force=force)


TESTFIG = Experiment(
    "testfig", (1,), "squares", lambda profile: [SquaresSpec({"n": 20 if profile == "full" else 5})]
)


@pytest.fixture
def figs_dir(tmp_path, monkeypatch):
    """A stand-in figure package holding only figure 1 (the driver finds figures as the
    modules of ``smallinit.study.figs.PACKAGE``), drawing the one experiment ``testfig``."""
    import smallinit.study.figs as figs_mod

    folder = tmp_path / "fake_paper_figs"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "fig01_phase_diagram.py").write_text(SCRIPT)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(figs_mod, "PACKAGE", "fake_paper_figs")
    monkeypatch.setattr(figs_mod, "of_figure", lambda number: [TESTFIG] if number == 1 else [])
    monkeypatch.setenv("SMALLINIT_FIGS_OUT", str(tmp_path / "out"))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("fake_paper_figs")]:
        del sys.modules[name]


def test_driver_renders_the_figures_it_finds(figs_dir, tmp_path):
    """The driver draws every figure module of the package and no other number: the
    stand-in package has figure 1 alone."""
    store = RunStore(tmp_path / "runs")
    results = make_figures(store=store)
    assert set(results) == {1}
    assert [p.name for p in results[1]] == ["fig01_phase_diagram.png", "fig01_phase_diagram.pdf"]
    first = (tmp_path / "out" / "fig01_phase_diagram.png").read_bytes()
    make_figures(only=[1], store=store)  # second call reuses the stored run
    assert (tmp_path / "runs" / "calls.txt").read_text() == "x"
    assert (tmp_path / "out" / "fig01_phase_diagram.png").read_bytes() == first
    make_figures(only=[1], store=store, force=True)
    assert (tmp_path / "runs" / "calls.txt").read_text() == "xx"
    other = make_figures(only=[1], store=store, out_dir=tmp_path / "elsewhere")
    assert other[1][0] == tmp_path / "elsewhere" / "fig01_phase_diagram.png"


def test_a_figure_whose_arms_a_profile_cuts_is_not_drawn_and_computes_nothing(
    figs_dir, tmp_path, monkeypatch
):
    """An experiment with no runs of its own at the profile (its arm is cut) computes no
    inner runs either (fair's fig 12 would otherwise train the whole learning-rate grid) and
    its figure is listed as not drawn, while a figure with runs still draws."""
    import smallinit.study.figs as figs_mod

    cut = Experiment(
        "testfig",
        (1,),
        "cut at quick",
        lambda profile: [] if profile == "quick" else [SquaresSpec({"n": 3})],
        inner=lambda profile: [SquaresSpec({"n": 7})],
    )
    monkeypatch.setattr(figs_mod, "of_figure", lambda number: [cut] if number == 1 else [])
    store = RunStore(tmp_path / "runs")
    assert make_figures(only=[1], store=store) == {1: []}
    assert not (tmp_path / "runs" / "calls.txt").exists()
    assert not list((tmp_path / "out").glob("fig01_*"))
    assert (tmp_path / "out" / "index.html").is_file()
    drawn = make_figures(only=[1], profile="medium", store=store)
    assert [p.name for p in drawn[1]] == ["fig01_phase_diagram.png", "fig01_phase_diagram.pdf"]
    assert (tmp_path / "runs" / "calls.txt").read_text() == "xx"  # the inner run, then its own


def test_a_figure_that_raises_leaves_the_others_and_the_report_page(
    figs_dir, tmp_path, monkeypatch, capsys
):
    """A figure script's exception is that figure's result (logged with its traceback): the
    other figures are drawn, the report page is written, and the CLI exits 1 naming it."""
    import smallinit.study.figs as figs_mod
    from smallinit.cli import main

    (figs_dir / "fake_paper_figs" / "fig02_rd_vs_width.py").write_text(
        "from smallinit.study.figure import Figure\n"
        "def make(ctx):\n    raise IndexError('list index out of range')\n"
        "FIGURE = Figure(number=2, title='', caption='', make=make)\n"
    )
    monkeypatch.setattr(figs_mod, "of_figure", lambda n: [TESTFIG] if n in (1, 2) else [])
    results = make_figures(only=[2, 1], store=RunStore(tmp_path / "runs"))
    assert isinstance(results[2], figs_mod.FigureFailed)
    assert str(results[2]) == "fig 2 failed: IndexError: list index out of range"
    assert [p.name for p in results[1]] == ["fig01_phase_diagram.png", "fig01_phase_diagram.pdf"]
    page = (tmp_path / "out" / "index.html").read_text()
    assert "fig01_phase_diagram.png" in page and "fig02_" not in page
    assert main(["figs", "--only", "1,2", "--runs-dir", str(tmp_path / "runs")]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == (
        "fig  2 rd_vs_width        fig 2 failed: IndexError: list index out of "
        "range (traceback in the log above)"
    )


def test_driver_rejects_bad_profile_and_number(figs_dir):
    with pytest.raises(ConfigError, match="profile='fast' is not allowed"):
        make_figures(profile="fast")
    with pytest.raises(ConfigError, match="figure number=99 is not allowed"):
        make_figures(only=[99])


def test_a_figure_module_must_declare_its_own_number(figs_dir, tmp_path):
    """A module whose ``FIGURE`` is another number's (a copied script) is refused with
    its name, not drawn under the wrong number."""
    (figs_dir / "fake_paper_figs" / "fig02_rd_vs_width.py").write_text(
        "from smallinit.study.figure import Figure\n"
        "FIGURE = Figure(number=1, title='', caption='', make=print)\n"
    )
    with pytest.raises(
        ConfigError, match="fig02_rd_vs_width declares FIGURE=.*must be Figure\\(number=2"
    ):
        load_figure(2)
    with pytest.raises(ConfigError, match="figure number=3 is not allowed"):
        load_figure(3)


def test_the_figures_are_the_packages_figure_modules_in_order():
    """No list to keep: the driver finds every ``figNN_<name>`` module, sorted by number,
    each declaring its own ``FIGURE`` with its number, title, caption and ``make``."""
    import smallinit.study.figs as figs_mod

    modules = figs_mod.figure_modules()
    assert list(modules) == sorted(modules) == list(FIGURES) == list(range(1, 14))
    for number, name in modules.items():
        figure = load_figure(number)
        assert name == f"smallinit.paper_figs.fig{number:02d}_{FIGURES[number]}"
        assert figure.number == number and figure.title and figure.caption
        assert figure.make.__module__ == name


def test_a_figure_reads_only_the_experiments_the_registry_lists_for_it(tmp_path):
    from smallinit.study.figs import FigureContext

    ctx = FigureContext(1, "quick", tmp_path, {"testfig": None})
    with pytest.raises(
        ConfigError,
        match="figure 1 reads experiment 'toy-scan', which the registry does not list for it",
    ):
        ctx.results("toy-scan")


def test_figure_scripts_come_from_the_package_not_the_environment(tmp_path, monkeypatch):
    """SMALLINIT_FIGS_DIR (the old output/scripts variable) can no longer make the driver
    execute code from a user folder: scripts are the package's modules."""
    import smallinit.paper_figs
    import smallinit.study.figs as figs_mod

    evil = tmp_path / "evil"
    evil.mkdir()
    marker = tmp_path / "executed"
    (evil / "fig01_phase_diagram.py").write_text(
        f"open({str(marker)!r}, 'w').write('pwned')\nNUMBER = 1\ndef make(ctx):\n    return []\n"
    )
    monkeypatch.setenv("SMALLINIT_FIGS_DIR", str(evil))
    package = Path(smallinit.paper_figs.__file__).resolve().parent
    assert set(figs_mod.figure_modules()) == set(FIGURES)
    for number in FIGURES:
        figure = figs_mod.load_figure(number)
        module = sys.modules[figure.make.__module__]
        assert Path(module.__file__).resolve().parent == package
        assert figure.number == number
    assert not marker.exists()


def test_output_folder_is_its_own_choice(tmp_path, monkeypatch):
    import smallinit.study.figs as figs_mod

    monkeypatch.setenv("SMALLINIT_FIGS_OUT", str(tmp_path / "figs"))
    assert figs_mod.default_out_dir() == tmp_path / "figs"
    monkeypatch.delenv("SMALLINIT_FIGS_OUT")
    # in a checkout: paper_figs/out beside the package (what `make figs` writes)
    assert figs_mod.default_out_dir().parts[-2:] == ("paper_figs", "out")
