#!/usr/bin/env bash
# A prepared H200 session (not run yet), from the repo root through the device tool with
# .cache-offline carried (made here by `smallinit data fetch --profile fair --cache
# .cache-offline`: the machine has no network). One command, under 10 minutes (the parts'
# timeouts add up to 505 s), 8 files in $OUT:
#   host.json              the host record (GPU, driver, torch, CUDA)
#   population_bench.json  step throughput: 40 runs as one population (eager) against the
#                          same runs one after another in one process, d_model 32 and 128
#   population_compiled.json  the same at d_model 128 with the population's step compiled
#                          and replayed as CUDA graphs (figs --population-exec)
#   figs.log               the tail of `smallinit figs --profile fair` on the GPU, whole
#   fair-h200.json         `smallinit claims --profile fair --json` on that store
#                          (commit it as bench-results/claims/fair-h200.json)
#   util.csv               nvidia-smi's GPU utilization and memory every 250 ms
#   runs.txt               `smallinit runs ls` of that store (which runs finished)
#   timings.json           wall seconds of the install, the bench, figs and claims, their
#                          exit codes, and the GPU utilization while figs trained
#                          (summarize.py over util.csv)
# Usage: OUT=/some/dir bash bench-results/gpu/prepared/run.sh [DRY]; DRY=1 runs every part at
# toy size on a CPU (the bench --tiny, figs --plan instead of training) to check the script.
set -u
DRY=${1:-0}
export PYTHONUNBUFFERED=1 SMALLINIT_CACHE=${SMALLINIT_CACHE:-$PWD/.cache-offline}
HERE=bench-results/gpu/prepared
RUNS=${RUNS:-/tmp/fair-h200-runs}
PY=${PY:-python3}
# fair pins its transformers to the CPU (device = "cpu" in quick's tables); on the GPU they
# are the same runs at train.device = "cuda" (their own keys, profile fair+HASH)
OVERLAY=(llm-sweeps.base.train.device=cuda anchor.train.device=cuda)
mark() { echo "$1 $(date +%s.%N)" >> "$OUT/marks.txt"; }
: > "$OUT/marks.txt"

mark install_start
$PY -m pip install -q --no-deps --no-build-isolation --no-index -e . 2>&1 | tail -2
echo "install_rc ${PIPESTATUS[0]}" >> "$OUT/marks.txt"
mark install_end
$PY -c "import json; from smallinit.core import host; print(json.dumps(host.record(), indent=1))" \
    > "$OUT/host.json"

SMI=""
if [ "$DRY" = 0 ]; then
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -lms 250 \
        > "$OUT/util.csv" &
    SMI=$!
fi

mark bench_start
if [ "$DRY" = 0 ]; then
    timeout 60 $PY -m smallinit.tools.population_bench --members 40 --sizes 32 128 \
        --steps 20 --warmup 5 --executions eager > "$OUT/population_bench.json"
    echo "bench_rc $?" >> "$OUT/marks.txt"
    timeout 100 $PY -m smallinit.tools.population_bench --members 40 --sizes 128 \
        --steps 20 --warmup 5 --executions compile cudagraphs \
        > "$OUT/population_compiled.json"
    echo "compiled_rc $?" >> "$OUT/marks.txt"
else
    timeout 60 $PY -m smallinit.tools.population_bench --tiny --warmup 1 \
        --executions eager > "$OUT/population_bench.json"
    echo "bench_rc $?" >> "$OUT/marks.txt"
fi
mark bench_end

mark figs_start
if [ "$DRY" = 0 ]; then
    timeout 280 $PY -m smallinit figs --profile fair --runs-dir "$RUNS" --population auto \
        "${OVERLAY[@]}" > "$OUT/figs.full.log" 2>&1
else
    timeout 280 $PY -m smallinit figs --profile fair --runs-dir "$RUNS" --population auto \
        --plan "${OVERLAY[@]}" > "$OUT/figs.full.log" 2>&1
fi
echo "figs_rc $?" >> "$OUT/marks.txt"
mark figs_end
tail -n 200 "$OUT/figs.full.log" > "$OUT/figs.log"
rm -f "$OUT/figs.full.log"

[ -n "$SMI" ] && kill "$SMI"
mark claims_start
timeout 45 $PY -m smallinit claims --profile fair --runs-dir "$RUNS" --json "${OVERLAY[@]}" \
    > "$OUT/fair-h200.json"
echo "claims_rc $?" >> "$OUT/marks.txt"
mark claims_end
timeout 20 $PY -m smallinit runs ls --runs-dir "$RUNS" > "$OUT/runs.txt" 2>&1

$PY $HERE/summarize.py "$OUT/marks.txt" "$OUT/util.csv" > "$OUT/timings.json"
rm -f "$OUT/marks.txt"
ls -la "$OUT"
