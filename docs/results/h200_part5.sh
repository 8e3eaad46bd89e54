#!/usr/bin/env bash
# Numbers that hold (issue: checkpointing "off" was on; run-level intervals), on one H200 (nvidia-h200):
#   bash docs/results/h200_part5.sh table   # the README table: checkpointing off and on, plus plain runs
#   bash docs/results/h200_part5.sh thrice  # three independent invocations of one sweep
# Each invocation: --splits 1x4,2x2,4x1 (thrice: 1x4,4x1), 30 steps, 5 warm-up, default --repeats (2).
set -u
R=${R:-$OUT}; mkdir -p "$R"
M="--model qwen3-1.7b --seq-len 512 --precision bf16 --steps 30 --warmup 5"
nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv > "$R/gpu_$1.csv"
python3 -c "import torch, transformers, trl, peft, accelerate; print(torch.__version__, transformers.__version__, trl.__version__, peft.__version__, accelerate.__version__)" > "$R/versions_$1.txt"
if [ "$1" = table ]; then
  # plain TRL (no tracetui), timer at on_step_end: checkpointing off, 4x1 and 1x4
  for s in 4x1 1x4; do
    timeout 120 python3 benchmarks/plain_steps.py --model qwen3-1.7b --seq-len 512 --split $s --steps 30 --warmup 5 \
      2>>"$R/plain.err" | tail -1 >> "$R/plain.jsonl"
  done
  for ck in off on; do
    flag=--no-activation-checkpointing; [ $ck = on ] && flag=--activation-checkpointing
    timeout 260 python3 -m tracetui --export json -o "$R/ckpt_$ck.json" --steps-csv "$R/ckpt_${ck}_steps.csv" \
      $M --splits 1x4,2x2,4x1 $flag --runs-dir "/tmp/runs_$ck" > "$R/ckpt_$ck.out" 2>&1
    cp /tmp/runs_$ck/*/events.jsonl "$R/ckpt_${ck}_events.jsonl"
  done
else
  for i in 1 2 3; do
    timeout 180 python3 -m tracetui --export json -o "$R/inv$i.json" $M --splits 1x4,4x1 \
      --no-activation-checkpointing --runs-dir "/tmp/runs_inv$i" > "$R/inv$i.out" 2>&1
    cp /tmp/runs_inv$i/*/events.jsonl "$R/inv${i}_events.jsonl"
  done
fi
