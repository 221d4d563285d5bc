"""The paper figures, one module per figure (smallinit.figs runs them)."""
