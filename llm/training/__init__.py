"""Training: the one trainer (:mod:`.train`), traced runs (:mod:`.dynamics`), held-out
evaluation (:mod:`.evaluate`) and loading a finished run (:mod:`.trained`)."""
