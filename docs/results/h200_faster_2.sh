#!/usr/bin/env bash
# Second call of docs/results/h200_faster.sh's measurements (fork server default), one H200:
#  1. issue #14's search against the full grid under --memory-limit 24, at 8 steps of which 2
#     warm-up (6 measured: enough for an interval, so the picks can be compared by interval);
#  2. issue #15's second built-in sweep: effective batch 16, 2x8,4x4,8x2,16x1, qwen3-1.7b,
#     seq 512, bf16, checkpointing off, 20 steps, the command against its summed steps.
#   R=$OUT bash docs/results/h200_faster_2.sh
set -u
R=${R:-$OUT}; mkdir -p "$R/search"
OUT=$R/search STEPS=8 WARMUP=2 bash benchmarks/search_vs_grid.sh 24:search:120 24:grid:320 > "$R/search/stdout.txt" 2>&1
tail -24 "$R/search/stdout.txt"
python3 benchmarks/wall_vs_steps.py --name builtin_eb16 --runs-dir /tmp/wvs_b -- --export json -o "$R/builtin_eb16.json" \
  --model qwen3-1.7b --seq-len 512 --precision bf16 --no-activation-checkpointing --effective-batch 16 \
  --splits 2x8,4x4,8x2,16x1 --repeats 1 --steps 20 | tee -a "$R/wall_vs_steps.jsonl"
tar -czf "$R/runs.tar.gz" /tmp/wvs_b 2>/dev/null
