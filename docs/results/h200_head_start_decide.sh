#!/usr/bin/env bash
# One H200 call (issue #30): do head starts earn their place? The first built-in sweep
# (qwen3-1.7b, seq 512, bf16, checkpointing off; 1x4,2x2,4x1, two runs each, 30 steps) four times
# in turn: A without head starts (--no-head-start), B with them, A, B; no fork server kept between
# commands (TRACETUI_KEEP_SERVER=0), so every command starts as a first one. Plain TRL 4x1
# (no tracetui) first, in the same call.
#   R=$OUT bash docs/results/h200_head_start_decide.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
export TRACETUI_KEEP_SERVER=0
M="--model qwen3-1.7b --seq-len 512 --precision bf16 --no-activation-checkpointing"
for s in 4x1; do
  timeout 100 python3 benchmarks/plain_steps.py --model qwen3-1.7b --seq-len 512 --split $s --steps 25 --warmup 5 \
    2> "$R/plain_$s.err" | tee -a "$R/plain.jsonl"
done
S1="$M --splits 1x4,2x2,4x1 --repeats 2 --steps 30"
for arm in A1:--no-head-start B1: A2:--no-head-start B2:; do
  name=${arm%%:*}; extra=${arm#*:}
  timeout 150 python3 benchmarks/wall_vs_steps.py --name "$name" --runs-dir "/tmp/hs_$name" -- \
    --export json -o "$R/$name.json" $S1 $extra | tee -a "$R/wall_vs_steps.jsonl"
done
tar -czf "$R/runs.tar.gz" /tmp/hs_* 2>/dev/null
