#!/usr/bin/env bash
# Issue #11's bar on one H200, the part the h200_interleave*.sh scripts share: plain TRL beside
# (benchmarks/plain_steps.py, 4x1 and 1x4, 30 steps), then three independent invocations, one
# after another, of the interleaved sweep qwen3-1.7b, seq 512, bf16, checkpointing off, 1x4 and
# 4x1, two runs each, STEPS steps (default 30); each invocation's 95% interval for the
# 4x1-over-1x4 speedup against the other two estimates, and how far apart the three are
# (bar11.txt). PIN: a CPU list every process is held on (taskset -c PIN), none by default.
# Event logs are left in /tmp/inv1../tmp/inv3 for the caller to keep.
#   R=$OUT STEPS=60 PIN=4-7 bash docs/results/h200_interleave_invocations.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
STEPS=${STEPS:-30}
PRE=""; [ -n "${PIN:-}" ] && PRE="taskset -c $PIN"
M="--model qwen3-1.7b --seq-len 512 --precision bf16 --no-activation-checkpointing"
for s in 4x1 1x4; do
  timeout 100 $PRE python3 benchmarks/plain_steps.py --model qwen3-1.7b --seq-len 512 --split $s --steps 30 --warmup 5 \
    2> "$R/plain_$s.err" | tee -a "$R/plain.jsonl"
done
for i in 1 2 3; do
  /usr/bin/time -f "wall %e s" $PRE python3 -m tracetui --export json -o "$R/inv$i.json" $M --interleave \
    --splits 1x4,4x1 --repeats 2 --steps "$STEPS" --runs-dir /tmp/inv$i > "$R/inv$i.out" 2>&1
  tail -4 "$R/inv$i.out"
done
python3 benchmarks/interleave_bar.py "$R"/inv1.json "$R"/inv2.json "$R"/inv3.json --logs /tmp/inv1 /tmp/inv2 /tmp/inv3 \
  | tee "$R/bar11.txt"
