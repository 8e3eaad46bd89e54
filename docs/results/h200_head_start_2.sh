#!/usr/bin/env bash
# One H200, device call 2 of 3 (1: h200_head_start.sh, with commit 8d14be1, whose head starts
# waited for the current run's first step and for the run before to exit; 3:
# h200_head_start_verdict.sh). "after" is now the code of the commit that adds this file: the next
# run starts with the current one's first turn, and its warm-up may begin while the run before
# exits. "before" is commit 6bc6329 (OLD). qwen3-1.7b, seq 512, bf16, checkpointing off.
#  1. plain TRL, 4x1, 25 steps;
#  2. the first built-in sweep again, with the code after: 1x4,2x2,4x1 two runs each, 30 steps;
#  3. the second built-in sweep, effective batch 16, 2x8,4x4,8x2,16x1, 20 steps, before and after.
#   OLD=/path/to/6bc6329 R=$OUT bash docs/results/h200_head_start_2.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
. docs/results/h200_head_start_arms.sh
plain 4x1
arm after_3x2 "$NEW" $M --splits 1x4,2x2,4x1 --repeats 2 --steps 30
S2="$M --effective-batch 16 --splits 2x8,4x4,8x2,16x1 --repeats 1 --steps 20"
arm before_eb16 "$OLD" $S2
arm after_eb16 "$NEW" $S2
tar -czf "$R/runs.tar.gz" /tmp/hs_* 2>/dev/null
