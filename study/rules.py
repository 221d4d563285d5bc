"""The two sets of verdict rules the claims can be judged by (docs/science.md §13).

``13.1``: §13 with §13.1, one one-sided test per claim at α 0.05, the rules the files in
``bench-results/claims/rules-13.1/`` were judged by. ``13.2``: §13.2, the claims of a
profile decided as one family (Holm), exact tests where the spread is degenerate, and
`not at this scale` only from an equivalence test. §13.2 is the rules of record; §13.1
stays readable. This module imports nothing, so the command line can offer the choice
without loading the statistics."""

RULES = ("13.1", "13.2")
DEFAULT_RULES = "13.2"
