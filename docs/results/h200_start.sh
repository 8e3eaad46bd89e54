#!/usr/bin/env bash
# Time around the measured steps (issue: faster to an answer), on one H200 (nvidia-h200), one
# device call: the same sweep twice, each a whole command timed from start to exit, trials
# started as fresh interpreters (TRACETUI_START=spawn, the old way) and forked from the fork
# server that imported torch/transformers/TRL/PEFT once (the default).
#   bash docs/results/h200_start.sh
# qwen3-1.7b preset, seq 512, bf16, checkpointing off, splits 1x4,4x1, two runs each, 15 steps
# of which 3 warm-up.
set -u
R=${R:-$OUT}; mkdir -p "$R"
M="--model qwen3-1.7b --seq-len 512 --precision bf16 --no-activation-checkpointing --splits 1x4,4x1 --repeats 2 --steps 15 --warmup 3"
for how in spawn forkserver; do
  t0=$(date +%s.%N)
  TRACETUI_START=$how timeout 130 python3 -m tracetui --export json -o "$R/$how.json" $M --runs-dir "/tmp/runs_$how" \
    > "$R/$how.out" 2>&1
  code=$?
  t1=$(date +%s.%N)
  python3 -c "print('$how\t%.1f\t$code' % ($t1 - $t0))" >> "$R/walls.tsv"
  gzip -c /tmp/runs_$how/*/events.jsonl > "$R/${how}_events.jsonl.gz"
done
cat "$R/walls.tsv"
