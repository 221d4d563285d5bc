#!/usr/bin/env bash
# A prepared H200 session for the step's speed (not run yet), from the repo root through the
# device tool, in one call under 10 minutes; five files land in $OUT:
#   gpu_check.json  the GPU check with its goals judged (plain loss), step profile included
#   speed.json      the same model with train.loss_chunk=8192: eager, compiled, step profile
#   gram_paths.json the Gram path per dtype the check's kernels part measured fastest
#   smi.txt, speed.log  nvidia-smi before the runs, and everything printed
set -u
export PYTHONUNBUFFERED=1
exec > >(tee "$OUT/speed.log") 2>&1
nvidia-smi > "$OUT/smi.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . 2>&1 | tail -2
# every part whose limit fits the budget in this order (full_run's 240 s would not: the
# full profile's own MFU stays the first check's, which measured_mfu.py prefers)
timeout 390 python3 -m smallinit.tools.gpu_check "$OUT" --budget 370 \
    --parts environment,kernels,gpu_tests,throughput,compiled,step_profile
echo "check rc $? at ${SECONDS} s"
left=$((575 - SECONDS))
timeout "$left" python3 bench-results/gpu/prepared/speed.py "$OUT/speed.json" --chunk 8192
echo "speed rc $? at ${SECONDS} s"
cp kernels/gram_paths.json "$OUT/gram_paths.json"
ls -la "$OUT"
