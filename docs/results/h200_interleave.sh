#!/usr/bin/env bash
# One H200, one device call, the code of the commit that adds this file (interleaved runs,
# tracetui/runner/turns.py; run then by default on a GPU, now asked for with --interleave):
#  1. plain TRL beside it (benchmarks/plain_steps.py, 4x1 and 1x4, 30 steps);
#  2. issue #11's bar: three independent invocations of the same sweep, one after another:
#     qwen3-1.7b, seq 512, bf16, checkpointing off, 1x4 and 4x1, two runs each, 30 steps;
#     each invocation's 95% interval for the 4x1-over-1x4 speedup against the other two
#     estimates, and how far apart the three estimates are (summary: bar11.txt);
#  3. issue #15: the first built-in sweep (1x4,2x2,4x1, two runs each, 30 steps), the command
#     against the summed time of its steps (benchmarks/wall_vs_steps.py).
#   R=$OUT bash docs/results/h200_interleave.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
M="--model qwen3-1.7b --seq-len 512 --precision bf16 --no-activation-checkpointing"
for s in 4x1 1x4; do
  timeout 100 python3 benchmarks/plain_steps.py --model qwen3-1.7b --seq-len 512 --split $s --steps 30 --warmup 5 \
    2> "$R/plain_$s.err" | tee -a "$R/plain.jsonl"
done
for i in 1 2 3; do
  /usr/bin/time -f "wall %e s" python3 -m tracetui --export json -o "$R/inv$i.json" $M --interleave --splits 1x4,4x1 --repeats 2 \
    --steps 30 --runs-dir /tmp/inv$i > "$R/inv$i.out" 2>&1
  tail -5 "$R/inv$i.out"
done
python3 benchmarks/wall_vs_steps.py --name builtin_3x2 --runs-dir /tmp/wvs_a -- --export json -o "$R/builtin_3x2.json" \
  $M --interleave --splits 1x4,2x2,4x1 --repeats 2 --steps 30 | tee -a "$R/wall_vs_steps.jsonl"
python3 benchmarks/interleave_bar.py "$R"/inv1.json "$R"/inv2.json "$R"/inv3.json --logs /tmp/inv1 /tmp/inv2 /tmp/inv3 \
  | tee "$R/bar11.txt"
tar -czf "$R/runs.tar.gz" /tmp/inv1 /tmp/inv2 /tmp/inv3 /tmp/wvs_a 2>/dev/null
