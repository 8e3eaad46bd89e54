#!/usr/bin/env bash
# One H200, one device call, after h200_interleave.sh (same code): issue #11's bar again with
# runs twice as long: plain TRL beside, three invocations of the interleaved sweep at 60 steps
# (h200_interleave_invocations.sh; summary: bar11.txt).
#   R=$OUT bash docs/results/h200_interleave_60.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
STEPS=60 bash "$(dirname "$0")/h200_interleave_invocations.sh"
tar -czf "$R/runs.tar.gz" /tmp/inv1 /tmp/inv2 /tmp/inv3 2>/dev/null
