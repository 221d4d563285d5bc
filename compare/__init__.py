"""The toy-to-LLM comparison (``smallinit compare``): its config (:mod:`.comparison`), the runs
it makes (:mod:`.run`) and the table it prints (:mod:`.table`)."""
