"""smallinit.toy: two-layer and small-model simulations in JAX (docs/science.md §2-§4)."""
