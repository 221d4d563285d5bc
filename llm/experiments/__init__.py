"""Experiments made of many runs: the LLM sweeps behind figs 7-11 (:mod:`.sweeps`) and the
anchor-task scans behind fig 6 (:mod:`.anchor`)."""
