#!/usr/bin/env bash
# Part 3 of the GPU results (second session), one H200 (nvidia-h200), alone on the machine, in two
# device calls run back to back on the same machine:
#   a: time_to_verdict --mode adaptive; probe overhead, alternating every step (paired quartets)
#   b: time_to_verdict --mode fixed (100 steps); TraceCallback overhead, alternating every step
# then, here: python3 benchmarks/time_to_verdict.py --out docs/results/h200_time_to_verdict_2 --compare
# Results land in $R (tarred back).
set -u
R=${R:-$OUT/r}; mkdir -p "$R"
M="--model qwen3-1.7b --seq-len 512 --precision bf16"
O="--model qwen3-1.7b --seq-len 512 --split 4x1 --precision bf16 --block 1"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv > "$R/gpus_$1.csv"
case "$1" in
a)
  timeout 300 python3 benchmarks/time_to_verdict.py --out "$R/ttv" --mode adaptive -- $M > "$R/ttv_adaptive.out" 2>&1
  timeout 250 python3 benchmarks/overhead.py $O --blocks 400 --json "$R/overhead_probe.json" > "$R/overhead_probe.txt" 2>&1
  ;;
b)
  timeout 430 python3 benchmarks/time_to_verdict.py --out "$R/ttv" --mode fixed -- $M > "$R/ttv_fixed.out" 2>&1
  timeout 140 python3 benchmarks/overhead.py $O --blocks 200 --callback --json "$R/overhead_callback.json" > "$R/overhead_callback.txt" 2>&1
  ;;
esac
