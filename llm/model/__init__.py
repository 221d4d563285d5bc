"""The transformer (:mod:`.transformer`) and its layers (:mod:`.layers`; with the CPU fast
path's functions, :mod:`.fastpath`, in :mod:`.fastlayers`), decoding with a key/value cache
(:mod:`.generate`), the table of its weight matrices that its modules declare
(:mod:`.matrices`), the init schemes applied to it or to a Hugging Face model (:mod:`.init`),
and the Hugging Face conversions (:mod:`.hf`)."""
