#!/usr/bin/env bash
# Trials forked from the fork server (the default since docs/results/h200_start_3), one H200, one
# device call:
#  1. issue #14's bar again: the search against the full grid (benchmarks/search_vs_grid.sh,
#     qwen3-1.7b, seq 1024, checkpointing off, effective batch 64, --memory-limit 24 and 80,
#     2 steps of which 1 warm-up), each a whole command, timed;
#  2. issue #15's first built-in sweep: qwen3-1.7b, seq 512, bf16, checkpointing off, 1x4,2x2,4x1,
#     two runs each, 30 steps (benchmarks/wall_vs_steps.py: the command against its summed steps);
#  3. plain TRL beside it (benchmarks/plain_steps.py, 4x1 and 1x4, 30 steps).
#   R=$OUT bash docs/results/h200_faster.sh
set -u
R=${R:-$OUT}; mkdir -p "$R/search"
OUT=$R/search bash benchmarks/search_vs_grid.sh 24:search:150 24:grid:220 80:search:150 80:grid:220 > "$R/search/stdout.txt" 2>&1
tail -20 "$R/search/stdout.txt"
python3 benchmarks/wall_vs_steps.py --name builtin_3x2 --runs-dir /tmp/wvs_a -- --export json -o "$R/builtin_3x2.json" \
  --model qwen3-1.7b --seq-len 512 --precision bf16 --no-activation-checkpointing --splits 1x4,2x2,4x1 --repeats 2 \
  --steps 30 | tee -a "$R/wall_vs_steps.jsonl"
for s in 4x1 1x4; do
  timeout 100 python3 benchmarks/plain_steps.py --model qwen3-1.7b --seq-len 512 --split $s --steps 30 --warmup 5 \
    2> "$R/plain_$s.err" | tee -a "$R/plain.jsonl"
done
tar -czf "$R/runs.tar.gz" /tmp/wvs_a 2>/dev/null
