#!/usr/bin/env bash
# One H200, device call 4 (after h200_head_start*.sh), the code of the commit that adds this file:
# does a run built early and waiting beside a run's measured steps change them? The second
# built-in sweep (effective batch 16, 2x8,4x4,8x2,16x1, 20 steps) four times in turn: without
# head starts (A: --no-head-start, one run after another), with them (B, the default), A, B.
#   OLD=/path/to/6bc6329 R=$OUT bash docs/results/h200_head_start_ab.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
. docs/results/h200_head_start_arms.sh
S2="$M --effective-batch 16 --splits 2x8,4x4,8x2,16x1 --repeats 1 --steps 20"
arm A1_eb16 "$NEW" $S2 --no-head-start
arm B1_eb16 "$NEW" $S2
arm A2_eb16 "$NEW" $S2 --no-head-start
arm B2_eb16 "$NEW" $S2
tar -czf "$R/runs.tar.gz" /tmp/hs_* 2>/dev/null
