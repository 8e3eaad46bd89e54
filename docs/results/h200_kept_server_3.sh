#!/usr/bin/env bash
# One H200, device call 3 of the kept fork server (issue #15), the code of the commit that adds
# this file (run from its root). qwen3-1.7b, seq 512, bf16, checkpointing off.
#  1. plain TRL 4x1 (no tracetui);
#  2. a short command on the tiny preset: the session's first, it starts the kept server;
#  3. the time to a verdict (benchmarks/time_to_verdict.py, 1x4,2x2,4x1, one run each, the
#     benchmark's --warmup 5): fixed 100 steps, then --until-confident 5 (--min-steps 10), both
#     forked from the kept server; then --until-confident with TRACETUI_KEEP_SERVER=0 (its own
#     server, importing), against the same fixed command.
# Everything goes to R; after each step R (with the event logs) is packed into $OUT/kept3.tar.gz.
#   R=/tmp/kept3 bash docs/results/h200_kept_server_3.sh
set -u
R=${R:-/tmp/kept3}; mkdir -p "$R"
OLD=unused . docs/results/h200_head_start_arms.sh
save() { tar -czf "$OUT/kept3.tar.gz" -C "$R" .; }
plain 4x1; save
python3 -m tracetui --export json -o "$R/first.json" --steps 4 --warmup 1 --splits 2x2 --effective-batch 4 \
  --repeats 1 --runs-dir "$R/first_runs" 2> "$R/first.err"; save
python3 benchmarks/time_to_verdict.py --out "$R/ttv" -- $M --repeats 1 2>&1 | tee "$R/compare_kept.txt"; save
TRACETUI_KEEP_SERVER=0 python3 benchmarks/time_to_verdict.py --out "$R/ttv_own" --mode adaptive -- $M --repeats 1
cp "$R/ttv/fixed.json" "$R/ttv_own/fixed.json" && \
  python3 benchmarks/time_to_verdict.py --out "$R/ttv_own" --compare 2>&1 | tee "$R/compare_own.txt"; save
