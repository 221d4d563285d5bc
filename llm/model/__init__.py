"""The transformer (:mod:`.transformer`), the table of its weight matrices that its modules
declare (:mod:`.matrices`), the init schemes applied to it or to a Hugging Face model
(:mod:`.init`), and the Hugging Face conversions (:mod:`.hf`)."""
