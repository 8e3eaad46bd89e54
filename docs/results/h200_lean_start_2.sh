#!/usr/bin/env bash
# One H200, device call 2 of the lean start (issue #15): both built-in sweeps, before (commit
# bca617a, OLD) and after (the code of the commit that adds this file, run from its root), in
# the order before, after, after, before, with plain TRL first. Each whole command is timed to
# the end of its output against the summed time of its steps (benchmarks/wall_vs_steps.py, which
# also watches each trial's process end from outside). qwen3-1.7b, seq 512, bf16, checkpointing off.
#   OLD=/path/to/bca617a R=$OUT bash docs/results/h200_lean_start_2.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
. docs/results/h200_head_start_arms.sh
plain 4x1
S1="$M --splits 1x4,2x2,4x1 --repeats 2 --steps 30"
S2="$M --effective-batch 16 --splits 2x8,4x4,8x2,16x1 --repeats 1 --steps 20"
arm before_3x2 "$OLD" $S1
arm after_3x2 "$NEW" $S1
arm after_eb16 "$NEW" $S2
arm before_eb16 "$OLD" $S2
tar -czf "$R/runs.tar.gz" /tmp/hs_* 2>/dev/null
