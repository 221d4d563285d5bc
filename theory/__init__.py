"""smallinit.theory: exact results, derived with sympy (docs/science.md §2-§5).

This package imports nothing else of smallinit: every number the toy and LLM modules
compare against comes from here.
"""
