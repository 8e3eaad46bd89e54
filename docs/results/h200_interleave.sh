#!/usr/bin/env bash
# One H200, one device call, the code of the commit that added interleaved runs
# (tracetui/runner/turns.py; run then by default on a GPU, now asked for with --interleave):
#  1. issue #11's bar: plain TRL beside, three invocations of the interleaved sweep at 30 steps
#     (h200_interleave_invocations.sh; summary: bar11.txt);
#  2. issue #15: the first built-in sweep (1x4,2x2,4x1, two runs each, 30 steps), interleaved, the
#     command against the summed time of its steps (benchmarks/wall_vs_steps.py).
#   R=$OUT bash docs/results/h200_interleave.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
M="--model qwen3-1.7b --seq-len 512 --precision bf16 --no-activation-checkpointing"
STEPS=30 bash "$(dirname "$0")/h200_interleave_invocations.sh"
python3 benchmarks/wall_vs_steps.py --name builtin_3x2 --runs-dir /tmp/wvs_a -- --export json -o "$R/builtin_3x2.json" \
  $M --interleave --splits 1x4,2x2,4x1 --repeats 2 --steps 30 | tee -a "$R/wall_vs_steps.jsonl"
tar -czf "$R/runs.tar.gz" /tmp/inv1 /tmp/inv2 /tmp/inv3 /tmp/wvs_a 2>/dev/null
