"""The LLM sweep experiments of figs 7-12 by name, with the figure each one draws.

A module of its own so that the names can be read without torch or sympy: the CLI offers
them as ``smallinit llm sweep --experiment`` choices when it builds its parser, which must
stay fast (``smallinit --help``). :data:`smallinit.llm.experiments.sweeps.EXPERIMENTS` maps
the same names to the functions that make their runs.
"""

from __future__ import annotations

FIGURE_OF: dict[str, int] = {"gamma-sweep": 7, "eps-gating": 8, "critical-init": 9,
                             "condense-expand": 10, "token-gains": 11,
                             "gain-scaling": 12}
