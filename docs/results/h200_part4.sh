#!/usr/bin/env bash
# time_to_verdict again with the stopping rule as it stands (must hold three steps running), on one
# H200 (nvidia-h200), alone on the machine, in two device calls back to back on the same machine:
#   bash docs/results/h200_part4.sh adaptive; bash docs/results/h200_part4.sh fixed
# then, here: python3 benchmarks/time_to_verdict.py --out docs/results/h200_time_to_verdict_3 --compare
set -u
R=${R:-$OUT/r}; mkdir -p "$R"
M="--model qwen3-1.7b --seq-len 512 --precision bf16"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv > "$R/gpus_$1.csv"
timeout 500 python3 benchmarks/time_to_verdict.py --out "$R/ttv" --mode "$1" -- $M > "$R/ttv_$1.out" 2>&1
