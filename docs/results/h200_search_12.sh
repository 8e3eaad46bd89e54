#!/usr/bin/env bash
# Issue #14's bar at 12 steps a run (2 warm-up), one H200, two device calls:
#   call 1: R=$OUT PART=24 bash docs/results/h200_search_12.sh   (also: where a start's time goes)
#   call 2: R=$OUT PART=80 bash docs/results/h200_search_12.sh
# Each: the search and the full grid (benchmarks/search_vs_grid.sh: qwen3-1.7b, seq 1024,
# checkpointing off, effective batch 64) under --memory-limit PART, each a whole command, timed.
# Call 1 also profiles the fork server's imports (python -X importtime) and a trial's start
# (benchmarks/trial_start.py) on that machine, for issue #15.
set -u
R=${R:-$OUT}; PART=${PART:-24}; mkdir -p "$R/search$PART"
if [ "$PART" = 24 ]; then
  python3 -X importtime -c "import tracetui.runner.lifetime as l, importlib; [importlib.import_module(m) for m in l.PRELOAD]" 2> "$R/importtime.txt"
  sort -t'|' -k2 -n -r "$R/importtime.txt" | head -15
  timeout 120 python3 benchmarks/trial_start.py --model qwen3-1.7b --seq-len 512 --split 4x1 --trials 3 --top 30 > "$R/trial_start.txt" 2>&1
  head -4 "$R/trial_start.txt"
  OUT=$R/search$PART STEPS=12 WARMUP=2 bash benchmarks/search_vs_grid.sh 24:search:150 24:grid:420 > "$R/search$PART/stdout.txt" 2>&1
else
  OUT=$R/search$PART STEPS=12 WARMUP=2 bash benchmarks/search_vs_grid.sh 80:search:150 80:grid:480 > "$R/search$PART/stdout.txt" 2>&1
fi
tail -30 "$R/search$PART/stdout.txt"
