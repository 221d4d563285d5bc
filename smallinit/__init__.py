"""smallinit: how the scale of initialization decides what a network learns.

Core package: the run store (:mod:`smallinit.runs`), configs (:mod:`smallinit.config`),
errors (:mod:`smallinit.errors`), progress bars (:mod:`smallinit.progress`) and the shared
figure style (:mod:`smallinit.plotting`). The components are installed beneath it:
``smallinit.theory``, ``smallinit.toy``, ``smallinit.llm``, ``smallinit.kernels``.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("smallinit")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
