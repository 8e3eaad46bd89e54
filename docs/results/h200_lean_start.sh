#!/usr/bin/env bash
# One H200, device call 1 of the lean start (issue #15): "before" is commit bca617a (OLD, the
# fork server collected once after its imports, imported the optional packages, and outlived
# tracetui by its own shutdown); "after" is the code of the commit that adds this file (run from
# its root). qwen3-1.7b, seq 512, bf16, checkpointing off.
#  1. the fork server's imports, fresh interpreters (benchmarks/preload_time.py): once to warm the
#     file cache (and compile the carried wheels), then three rounds of: before (optional packages
#     imported, a collection after), after (both off), and each change alone;
#  2. python -X importtime of the fork server's imports, before and after (importtime_*.txt.gz);
#  3. plain TRL 4x1;
#  4. the second built-in sweep (effective batch 16, 2x8,4x4,8x2,16x1, 20 steps), before and after.
#   OLD=/path/to/bca617a R=$OUT bash docs/results/h200_lean_start.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
. docs/results/h200_head_start_arms.sh
python3 benchmarks/preload_time.py --hide off --collect on > /dev/null
for i in 1 2 3; do
  for way in "--hide off --collect on" "--hide on --collect off" "--hide on --collect on" "--hide off --collect off"; do
    python3 benchmarks/preload_time.py $way | tee -a "$R/preload.jsonl"
  done
done
LIBS="import tracetui.runner.gcoff, tracetui.runner.metadata"
AFTER="torch, transformers, transformers.trainer, peft, datasets, trl.trainer.sft_config, trl.trainer.sft_trainer"
python3 -X importtime -c "$LIBS; import $AFTER" 2>&1 | gzip > "$R/importtime_before.txt.gz"
python3 -X importtime -c "$LIBS, tracetui.runner.optional; import $AFTER" 2>&1 | gzip > "$R/importtime_after.txt.gz"
plain 4x1
S2="$M --effective-batch 16 --splits 2x8,4x4,8x2,16x1 --repeats 1 --steps 20"
arm before_eb16 "$OLD" $S2
arm after_eb16 "$NEW" $S2
tar -czf "$R/runs.tar.gz" /tmp/hs_* 2>/dev/null
