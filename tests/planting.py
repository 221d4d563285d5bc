"""Planted errors in Python sources: a fresh copy of a module with one edit, so that a test
can show that its check fails on a wrong copy of the code it guards (the CUDA kernels' own
planted errors are in tests/kernels/test_kernels_emulated.py)."""

from __future__ import annotations

import inspect
import itertools
import sys
import types

_COPIES = itertools.count()


def planted_copy(module: types.ModuleType, text: str, replacement: str) -> types.ModuleType:
    """A new module from ``module``'s source with ``text`` (which must occur exactly once)
    replaced; the original module is untouched. Relative imports resolve in the original's
    package. The copy stays in ``sys.modules`` under a name of its own (dataclasses and
    type hints look a class's module up there)."""
    source = inspect.getsource(module)
    assert source.count(text) == 1, f"{text!r} does not occur exactly once in {module.__name__}"
    name = f"{module.__name__}__planted{next(_COPIES)}"
    copy = types.ModuleType(name)
    copy.__file__ = module.__file__
    copy.__package__ = module.__package__
    sys.modules[name] = copy
    code = compile(source.replace(text, replacement), f"<planted {module.__name__}>", "exec")
    exec(code, copy.__dict__)
    return copy
