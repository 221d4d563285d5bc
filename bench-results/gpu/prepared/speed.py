"""The step with the chunked loss on: tokens/s, MFU, the output layer and loss's share, and
the step profile, eager and compiled, in one JSON (the check itself measures the plain loss).

``python3 bench-results/gpu/prepared/speed.py OUT.json [--chunk N] [--dry]``: the GPU
check's throughput model (:func:`smallinit.tools.gpu_parts.run_config`) with
``train.loss_chunk=N`` (default 8192 tokens of the 16,384 a step holds; dry: 24 of 128, on
the CPU at the check's toy size); each measurement in a ``try`` of its own and the JSON
rewritten after each, so a run cut short keeps what finished.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--chunk", type=int, default=None)
    parser.add_argument("--dry", action="store_true")
    args = parser.parse_args(argv)
    chunk = args.chunk if args.chunk is not None else (24 if args.dry else 8192)
    if chunk < 1:
        parser.error(f"--chunk {chunk}: give a positive number of tokens")
    from smallinit.tools.gpu_check import LOSS_CHUNK_ENV

    os.environ[LOSS_CHUNK_ENV] = str(chunk)
    if args.dry:
        os.environ["SMALLINIT_FASTPATH"] = "0"  # the ops a GPU runs, as the dry check
    from smallinit.tools import gpu_parts  # after the variables: read at import and call

    result: dict = {"dry": args.dry, "loss_chunk": chunk, "started": time.time()}
    steps = {"throughput": gpu_parts.throughput, "compiled": gpu_parts.compiled,
             "step_profile": gpu_parts.step_profile}
    ok = True
    for name, step in steps.items():
        t0 = time.perf_counter()
        try:
            result[name] = step(args.dry)
        except Exception:
            result[name] = {"error": traceback.format_exc()[-3000:]}
            ok = False
        result[name + "_wall_s"] = round(time.perf_counter() - t0, 1)
        print(f"speed: {name} in {result[name + '_wall_s']} s", file=sys.stderr, flush=True)
        args.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
