"""smallinit.llm: transformer, γ-initialization, training and analysis (SPEC §1, §5, §6)."""
