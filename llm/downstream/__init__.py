"""Downstream benchmarks: task items (:mod:`.tasks`), the scorer (:mod:`.scoring`), runs
over a trained model (:mod:`.run`) and their reports (:mod:`.report`)."""
