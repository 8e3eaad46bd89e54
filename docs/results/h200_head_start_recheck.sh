#!/usr/bin/env bash
# One H200 call (issue #30): head starts measured again on the current code, two more pairs, in
# the order A B B A (A without head starts, --no-head-start; B with them, the default) so that a
# drift of the machine over the call weighs on both arms alike. The first built-in sweep
# (qwen3-1.7b, seq 512, bf16, checkpointing off; 1x4,2x2,4x1, two runs each, 30 steps); each
# command starts its own fork server (none outlives a command). Plain TRL 4x1 first, in the same call.
#   R=$OUT bash docs/results/h200_head_start_recheck.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
M="--model qwen3-1.7b --seq-len 512 --precision bf16 --no-activation-checkpointing"
timeout 80 python3 benchmarks/plain_steps.py --model qwen3-1.7b --seq-len 512 --split 4x1 --steps 25 --warmup 5 \
  2> /dev/null | grep '^{"split' | tee -a "$R/plain.jsonl"
S1="$M --splits 1x4,2x2,4x1 --repeats 2 --steps 30"
for arm in A1:--no-head-start B1: B2: A2:--no-head-start; do
  name=${arm%%:*}; extra=${arm#*:}
  timeout 140 python3 benchmarks/wall_vs_steps.py --name "$name" --runs-dir "/tmp/hs_$name" -- \
    --export json -o "$R/$name.json" $S1 $extra | tee -a "$R/wall_vs_steps.jsonl"
done
tar -czf "$R/runs.tar.gz" /tmp/hs_* 2>/dev/null
