#!/usr/bin/env bash
# One H200, device call 5 (after h200_head_start*.sh), the code of the commit that adds this file
# (the fork server imports with the cyclic collector off, tracetui/runner/gcoff.py):
#  1. the fork server's library imports (benchmarks/preload_time.py, fresh interpreters, the
#     package table beside them), three times each way in turn: collector on, collector off;
#  2. the second built-in sweep (effective batch 16, 2x8,4x4,8x2,16x1, 20 steps), whole command
#     against its steps, with plain TRL 4x1 beside it.
#   OLD=/path/to/6bc6329 R=$OUT bash docs/results/h200_head_start_gc.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
. docs/results/h200_head_start_arms.sh
for i in 1 2 3; do
  for gc in on off; do
    python3 benchmarks/preload_time.py --way beside --gc $gc | tee -a "$R/preload.jsonl"
  done
done
arm after_eb16 "$NEW" $M --effective-batch 16 --splits 2x8,4x4,8x2,16x1 --repeats 1 --steps 20
plain 4x1
tar -czf "$R/runs.tar.gz" /tmp/hs_* 2>/dev/null
