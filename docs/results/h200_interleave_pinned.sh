#!/usr/bin/env bash
# One H200, one device call, after h200_interleave_60.sh (same code): do the runs of one split
# differ less, and do three invocations agree better, when every process of the sweep is held on
# the same four vCPUs? Three independent invocations of the interleaved sweep qwen3-1.7b, seq 512,
# bf16, checkpointing off, 1x4 and 4x1, two runs each, 30 steps, each under `taskset -c 4-7`;
# plain TRL beside them, under the same placement. Summary: bar11.txt.
#   R=$OUT bash docs/results/h200_interleave_pinned.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
M="--model qwen3-1.7b --seq-len 512 --precision bf16 --no-activation-checkpointing"
for s in 4x1 1x4; do
  timeout 100 taskset -c 4-7 python3 benchmarks/plain_steps.py --model qwen3-1.7b --seq-len 512 --split $s --steps 30 \
    --warmup 5 2> "$R/plain_$s.err" | tee -a "$R/plain.jsonl"
done
for i in 1 2 3; do
  /usr/bin/time -f "wall %e s" taskset -c 4-7 python3 -m tracetui --export json -o "$R/inv$i.json" $M --interleave --splits 1x4,4x1 \
    --repeats 2 --steps 30 --runs-dir /tmp/inv$i > "$R/inv$i.out" 2>&1
  tail -4 "$R/inv$i.out"
done
python3 benchmarks/interleave_bar.py "$R"/inv1.json "$R"/inv2.json "$R"/inv3.json --logs /tmp/inv1 /tmp/inv2 /tmp/inv3 \
  | tee "$R/bar11.txt"
tar -czf "$R/runs.tar.gz" /tmp/inv1 /tmp/inv2 /tmp/inv3 2>/dev/null
