"""Training: the one trainer and the pretraining task (:mod:`.train`), the anchor task
(:mod:`.anchor`), the trainer's callbacks (:mod:`.callbacks`: :mod:`.probes`, checkpoints,
:mod:`.sinks`), held-out evaluation (:mod:`.evaluate`) and loading a finished run
(:mod:`.trained`)."""
