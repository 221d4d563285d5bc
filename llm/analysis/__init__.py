"""Measurements of trained transformers: activation diagnostics (:mod:`.diagnostics`), FFN
and attention matrices against the toy (:mod:`.ffn`), critical γ (:mod:`.critical`) and
token-level gains (:mod:`.tokens`)."""
