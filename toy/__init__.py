"""smallinit.toy: two-layer and small-model simulations in JAX (SPEC §2-§4)."""
