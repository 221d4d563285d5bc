"""smallinit.kernels: CuPy kernels with CPU fallbacks, and the shared measurements.

This package imports nothing else of smallinit; toy and llm both call it.
"""
