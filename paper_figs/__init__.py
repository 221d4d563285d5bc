"""The paper figures, one module per figure (smallinit.study.figs runs them)."""
