"""smallinit.tools: tooling that users never import (the GPU check and its parts,
benchmark helpers); what users run of it is a command (``smallinit gpu-check``). Nothing
below the top floor imports it (tests/core/test_architecture.py)."""
