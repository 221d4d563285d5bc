"""The transformer (:mod:`.transformer`), the init schemes applied to it or to a Hugging Face
model (:mod:`.init`), and the Hugging Face conversions (:mod:`.hf`)."""
