#!/usr/bin/env bash
# A prepared H200 session (populations and the step profile; not run yet), from the repo root
# through the device tool with .cache-offline carried (smallinit data fetch --profile fair
# --cache .cache-offline). Everything it measures lands in $OUT.
set -u
export PYTHONUNBUFFERED=1 SMALLINIT_CACHE=$PWD/.cache-offline
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . 2>&1 | tail -2
python3 -c "import json, torch, smallinit.llm.training.population; from smallinit.core import host; print(json.dumps(host.record(), indent=1))" > $OUT/host.json
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -lms 250 > $OUT/util.csv &
SMI=$!
date +%s.%N > $OUT/marks.txt
timeout 150 python3 -m smallinit.llm.training.population_bench --members 40 --sizes 32 128 \
    --steps 20 --warmup 5 > $OUT/population_bench.json; echo "bench rc $?"
date +%s.%N >> $OUT/marks.txt
timeout 210 python3 bench-results/gpu/prepared/fair_plain_runs.py /tmp/runs 3 \
    > $OUT/fair_plain_runs.json; echo "fair rc $?"
date +%s.%N >> $OUT/marks.txt
kill $SMI
tar czf $OUT/runs.tgz --exclude='*.pt' --exclude='*.safetensors' --exclude='checkpoints' -C /tmp runs
timeout 110 python3 -m smallinit.study.gpu_parts step_profile $OUT/step_profile.json; echo "profile rc $?"
ls -la $OUT
