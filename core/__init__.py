"""The ground floor: what every component stands on and nothing of the components.

The run store (:mod:`.store`, :mod:`.runs`: the record and its writer, :mod:`.lease`: one
writer per run, :mod:`.integrity`: manifests, :mod:`.atomic`: files readers never see
half-written, :mod:`.results`: runs read back as objects), configs (:mod:`.config`: TOML,
``key=value`` overrides, canonical keys; :mod:`.profiles`: every experiment's parameters at
one scale), the job driver (:mod:`.jobs`), statistics over seeds (:mod:`.stats`), errors
(:mod:`.errors`), progress bars and log lines (:mod:`.progress`), the figure style
(:mod:`.plotting`), memory budgets (:mod:`.memory`) and pinned downloads
(:mod:`.downloads`)."""
