#!/usr/bin/env bash
# One H200, device call 3 of 3 (1: h200_head_start.sh, 2: h200_head_start_2.sh), the code of the
# commit that adds h200_head_start_2.sh (run from its root):
#  1. plain TRL, 4x1, 25 steps;
#  2. issue #15's time to a verdict (benchmarks/time_to_verdict.py): 1x4,2x2,4x1, one run each,
#     fixed 100 steps against --until-confident at its default, whole commands timed.
#   OLD=/path/to/6bc6329 R=$OUT bash docs/results/h200_head_start_verdict.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
. docs/results/h200_head_start_arms.sh
plain 4x1
python3 benchmarks/time_to_verdict.py --out "$R/ttv" -- $M --repeats 1 2>&1 | tee "$R/compare.txt"
tar -czf "$R/runs.tar.gz" "$R/ttv/runs" 2>/dev/null && rm -rf "$R/ttv/runs"
