#!/usr/bin/env bash
# One H200, one device call, the code of the commit that adds this file:
#  1. issue #15's two built-in sweeps, each command against the summed time of its steps
#     (benchmarks/wall_vs_steps.py): qwen3-1.7b, seq 512, bf16, checkpointing off;
#     1x4,2x2,4x1 two runs each, 30 steps; effective batch 16, 2x8,4x4,8x2,16x1, 20 steps;
#  2. plain TRL beside them (benchmarks/plain_steps.py, 4x1 and 1x4, 30 steps);
#  3. issue #11: does CPU placement explain how much steps and runs of one split differ?
#     4x1 in four fresh processes, 30 steps, under three placements of the whole command:
#     as the system places it, on vCPUs 4-7, on vCPU 4 alone; the machine's CPU layout beside.
#   R=$OUT bash docs/results/h200_wall_and_pinning.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
{ lscpu; echo; cat /sys/devices/system/node/online 2>&1; nvidia-smi topo -m 2>&1; } > "$R/cpu_layout.txt"
M="--model qwen3-1.7b --seq-len 512 --precision bf16 --no-activation-checkpointing"
python3 benchmarks/wall_vs_steps.py --name builtin_3x2 --runs-dir /tmp/wvs_a -- --export json -o "$R/builtin_3x2.json" \
  $M --splits 1x4,2x2,4x1 --repeats 2 --steps 30 | tee -a "$R/wall_vs_steps.jsonl"
python3 benchmarks/wall_vs_steps.py --name builtin_eb16 --runs-dir /tmp/wvs_b -- --export json -o "$R/builtin_eb16.json" \
  $M --effective-batch 16 --splits 2x8,4x4,8x2,16x1 --repeats 1 --steps 20 | tee -a "$R/wall_vs_steps.jsonl"
for s in 4x1 1x4; do
  timeout 100 python3 benchmarks/plain_steps.py --model qwen3-1.7b --seq-len 512 --split $s --steps 30 --warmup 5 \
    2> "$R/plain_$s.err" | tee -a "$R/plain.jsonl"
done
for arm in free 4-7 4; do
  pre=""; [ $arm != free ] && pre="taskset -c $arm"
  $pre python3 -m tracetui --export json -o "$R/pin_$arm.json" $M --splits 4x1 --repeats 4 --steps 30 \
    --runs-dir /tmp/pin_$arm > "$R/pin_$arm.out" 2>&1
  tail -3 "$R/pin_$arm.out"
done
tar -czf "$R/runs.tar.gz" /tmp/wvs_a /tmp/wvs_b /tmp/pin_* 2>/dev/null
