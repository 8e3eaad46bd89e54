#!/usr/bin/env bash
# One H200, device call 3 of the lean start (issue #15), the code of the commit that adds this
# file (run from its root). qwen3-1.7b, seq 512, bf16, checkpointing off.
#  1. plain TRL 4x1;
#  2. where a command's end goes (benchmarks/end_timeline.py): a short sweep whose last run holds
#     32 GiB, as the second built-in sweep's does;
#  3. the time to a verdict (benchmarks/time_to_verdict.py): 1x4,2x2,4x1, one run each, fixed 100
#     steps against --until-confident 5, --min-steps 10, with the benchmark's --warmup 5 (as in
#     ../h200_head_start/); then --until-confident with tracetui's own default warm-up (3 steps),
#     against the same fixed command;
#  4. the second built-in sweep once more (effective batch 16, 2x8,4x4,8x2,16x1, 20 steps).
# Everything goes to R; after each step R (with the event logs) is packed into $OUT/call3.tar.gz.
#   R=/tmp/call3 bash docs/results/h200_lean_start_3.sh
set -u
R=${R:-/tmp/call3}; mkdir -p "$R"
OLD=unused . docs/results/h200_head_start_arms.sh
save() { cp -r /tmp/hs_* "$R/" 2>/dev/null; tar -czf "$OUT/call3.tar.gz" -C "$R" .; }
plain 4x1; save
python3 benchmarks/end_timeline.py -- --export json -o "$R/end.json" $M --effective-batch 16 --splits 8x2,16x1 \
  --repeats 1 --steps 6 --warmup 2 --runs-dir /tmp/hs_end | tee "$R/end_timeline.jsonl"; save
python3 benchmarks/time_to_verdict.py --out "$R/ttv" -- $M --repeats 1 2>&1 | tee "$R/compare.txt"; save
python3 benchmarks/time_to_verdict.py --out "$R/ttv3" --warmup 3 --mode adaptive -- $M --repeats 1
cp "$R/ttv/fixed.json" "$R/ttv3/fixed.json" && \
  python3 benchmarks/time_to_verdict.py --out "$R/ttv3" --compare 2>&1 | tee "$R/compare_warmup3.txt"; save
arm after_eb16 "$NEW" $M --effective-batch 16 --splits 2x8,4x4,8x2,16x1 --repeats 1 --steps 20; save
