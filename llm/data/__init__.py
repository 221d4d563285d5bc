"""Data: corpora and their BPE tokenizer (:mod:`.corpus`, :mod:`.tokenizer`), the synthetic
mixture (:mod:`.synthetic`) and the anchor-function task (:mod:`.anchor`)."""
