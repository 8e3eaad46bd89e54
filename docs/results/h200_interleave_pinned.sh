#!/usr/bin/env bash
# One H200, one device call, after h200_interleave_60.sh (same code): do the runs of one split
# differ less, and do three invocations agree better, when every process of the sweep, and the
# plain runs, are held on the same four vCPUs? Three invocations of the interleaved sweep at 30
# steps under `taskset -c 4-7` (h200_interleave_invocations.sh; summary: bar11.txt).
#   R=$OUT bash docs/results/h200_interleave_pinned.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
STEPS=30 PIN=4-7 bash "$(dirname "$0")/h200_interleave_invocations.sh"
tar -czf "$R/runs.tar.gz" /tmp/inv1 /tmp/inv2 /tmp/inv3 2>/dev/null
