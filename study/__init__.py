"""The study: the experiments behind the paper figures (:mod:`.experiments`), the figure
driver, the claims judged from stored runs and the GPU check. It sits on top of every
component and of the ground floor (:mod:`smallinit.core`)."""
