#!/usr/bin/env bash
# One H200, device call 1 of 3 (then h200_head_start_2.sh, h200_head_start_verdict.sh). "before" is the code of
# commit 6bc6329 (OLD: a checkout of it), "after" the code of the commit that adds this file (run
# from its root). qwen3-1.7b, seq 512, bf16, checkpointing off.
#  1. plain TRL, 4x1 and 1x4, 25 steps (benchmarks/plain_steps.py): the training without
#     tracetui; it also reads the libraries into the file cache for both arms alike;
#  2. the fork server's library imports (benchmarks/preload_time.py, fresh interpreters), three
#     times each way in turn: the package table computed beside them, or where it is asked for;
#  3. issue #15's first built-in sweep, 1x4,2x2,4x1 two runs each, 30 steps, before and after:
#     each whole command against the summed time of its steps (benchmarks/wall_vs_steps.py).
#   OLD=/path/to/6bc6329 R=$OUT bash docs/results/h200_head_start.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
. docs/results/h200_head_start_arms.sh
plain 4x1 1x4
for i in 1 2 3; do
  for way in beside where_asked; do
    python3 benchmarks/preload_time.py --way $way | tee -a "$R/preload.jsonl"
  done
done
S1="$M --splits 1x4,2x2,4x1 --repeats 2 --steps 30"
arm before_3x2 "$OLD" $S1
arm after_3x2 "$NEW" $S1
tar -czf "$R/runs.tar.gz" /tmp/hs_* 2>/dev/null
