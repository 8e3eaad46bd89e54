#!/usr/bin/env bash
# One H200, device call 2 of 2 (the first: h200_head_start.sh), same code and arms:
#  1. plain TRL, 4x1, 25 steps;
#  2. issue #15's second built-in sweep, effective batch 16, 2x8,4x4,8x2,16x1, 20 steps, before
#     and after, whole commands against their steps;
#  3. issue #15's time to a verdict (benchmarks/time_to_verdict.py, the code after): 1x4,2x2,4x1,
#     one run each, fixed 100 steps against --until-confident at its default, whole commands.
#   OLD=/path/to/6bc6329 R=$OUT bash docs/results/h200_head_start_verdict.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
. docs/results/h200_head_start_arms.sh
plain 4x1
S2="$M --effective-batch 16 --splits 2x8,4x4,8x2,16x1 --repeats 1 --steps 20"
arm before_eb16 "$OLD" $S2
arm after_eb16 "$NEW" $S2
python3 benchmarks/time_to_verdict.py --out "$R/ttv" -- $M --repeats 1 2>&1 | tee "$R/compare.txt"
tar -czf "$R/runs.tar.gz" /tmp/hs_* "$R/ttv/runs" 2>/dev/null && rm -rf "$R/ttv/runs"
