"""The paper's figures by number (docs/science.md §7), found by their file names: number ->
the stem suffix of its module ``paper_figs/figNN_<name>.py``.

Nothing lists the figures by hand: a module of the figure package named ``figNN_<name>``
is figure ``NN`` (and declares its ``FIGURE``, :class:`smallinit.study.figure.Figure`).
Listing the package's file names imports none of the figure modules, nor the driver
(:mod:`smallinit.study.figs`, which imports the whole study), so that
``smallinit figs --only N`` checks ``N`` at once.
"""

from __future__ import annotations

import pkgutil
import re

import smallinit.paper_figs

#: a figure module's name: fig, two digits, _, its name
FIGURE_MODULE = re.compile(r"fig(\d\d)_(\w+)")


def figure_names(path) -> dict[int, str]:
    """The figure modules of the package folder(s) ``path`` (a package's ``__path__``):
    number -> name, sorted by number."""
    found = {}
    for info in pkgutil.iter_modules(path):
        match = FIGURE_MODULE.fullmatch(info.name)
        if match:
            found[int(match[1])] = match[2]
    return dict(sorted(found.items()))


FIGURES: dict[int, str] = figure_names(smallinit.paper_figs.__path__)
