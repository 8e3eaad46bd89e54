#!/usr/bin/env bash
# One H200, one device call, the code of the commit that adds this file (run from its root):
#  1. plain TRL, 4x1, 25 steps (benchmarks/plain_steps.py): the training without tracetui;
#  2. the fork server's imports (its PRELOAD, in a fresh interpreter), three times each way in
#     turn: with the package table computed beside them (tracetui.runner.metadata first), and
#     without (the same imports, the table computed where TRL and transformers ask for it);
#  3. issue #15's time to a verdict (benchmarks/time_to_verdict.py): 1x4,2x2,4x1, one run each,
#     fixed 100 steps against --until-confident at its default, whole commands timed.
#   R=$OUT bash docs/results/h200_head_start_verdict.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
M="--model qwen3-1.7b --seq-len 512 --precision bf16 --no-activation-checkpointing"
timeout 80 python3 benchmarks/plain_steps.py --model qwen3-1.7b --seq-len 512 --split 4x1 --steps 25 --warmup 5 \
  2> "$R/plain_4x1.err" | tee -a "$R/plain.jsonl"
for i in 1 2 3; do
  for way in beside where_asked; do
    python3 benchmarks/preload_time.py --way $way | tee -a "$R/preload.jsonl"
  done
done
python3 benchmarks/time_to_verdict.py --out "$R/ttv" -- $M --repeats 1 2>&1 | tee "$R/compare.txt"
