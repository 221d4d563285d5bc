"""Fair's pretraining runs whose configs are known before any run (TrainSpec: the tuning
runs and fixed-rate runs), on the GPU (the profile fair with the overlay
``llm-sweeps.base.train.device="cuda"``: its own run keys, bf16 autocast), grouped by shape
and trained as populations; prints one JSON object: per population its size, shape, wall
seconds and tokens/s, and the total. Usage: python fair_plain_runs.py RUNS_DIR [MAX_GROUPS]"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict

import torch

from smallinit.core import profiles
from smallinit.llm.run_config import RunConfig
from smallinit.llm.training import population as pop
from smallinit.study import preflight


def main() -> None:
    runs_dir = sys.argv[1]
    max_groups = int(sys.argv[2]) if len(sys.argv) > 2 else 99
    profile = profiles.derive("fair", None, {"llm-sweeps.base.train.device": "cuda"})
    specs, _ = preflight.profile_specs(profile)
    groups: dict[str, list[RunConfig]] = defaultdict(list)
    for spec in specs:
        if type(spec).__name__ == "TrainSpec" and isinstance(spec.config, RunConfig):
            groups[pop.shape_key(spec.config)].append(spec.config)
    out = []
    t_all = time.perf_counter()
    for key, cfgs in sorted(groups.items(), key=lambda kv: -len(kv[1]))[:max_groups]:
        t0 = time.perf_counter()
        runs = pop.train_population(cfgs, runs_dir=runs_dir)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        c = cfgs[0]
        tokens = len(cfgs) * c.train.steps * c.train.batch_size * c.model.context
        out.append({"shape": key, "members": len(cfgs), "d_model": c.model.d_model,
                    "n_layers": c.model.n_layers, "steps": c.train.steps,
                    "batch": c.train.batch_size, "context": c.model.context,
                    "wall_s": wall, "train_tokens_per_s": tokens / wall,
                    "states": sorted({r.state for r in runs}),
                    "val_loss": [r.summary.get("val_loss") for r in runs],
                    "keys": [r.key for r in runs]})
        print(json.dumps(out[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"profile": profile, "groups": out, "wall_s": time.perf_counter() - t_all,
                      "device": torch.cuda.get_device_name()}, indent=1))


if __name__ == "__main__":
    main()
