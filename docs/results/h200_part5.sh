#!/usr/bin/env bash
# Numbers that hold (checkpointing "off" was on; run-level intervals), on one H200 (nvidia-h200).
#   bash docs/results/h200_part5.sh plain off      # device call 1
#   bash docs/results/h200_part5.sh on inv1        # device call 2
#   bash docs/results/h200_part5.sh inv2 inv3 gpu  # device call 3
# plain: the same training in plain TRL (no tracetui), timer at on_step_end, checkpointing off;
# off/on: the README table, --splits 1x4,2x2,4x1, checkpointing off / on;
# invN: three independent invocations of one sweep (1x4,4x1, checkpointing off);
# every sweep 30 steps, 5 warm-up, default --repeats (2); gpu: tests/test_gpu.py.
set -u
R=${R:-$OUT}; mkdir -p "$R"
M="--model qwen3-1.7b --seq-len 512 --precision bf16 --steps 30 --warmup 5"
nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv > "$R/gpu.csv"
python3 -c "import torch, transformers, trl, peft, accelerate; print(torch.__version__, transformers.__version__, trl.__version__, peft.__version__, accelerate.__version__)" > "$R/versions.txt"
sweep() {  # name, timeout, flags...
  local name=$1 limit=$2; shift 2
  timeout "$limit" python3 -m tracetui --export json -o "$R/$name.json" $M "$@" --runs-dir "/tmp/runs_$name" > "$R/$name.out" 2>&1
  cp /tmp/runs_$name/*/events.jsonl "$R/${name}_events.jsonl"
}
for step in "$@"; do
  case $step in
    plain) for s in 4x1 1x4; do
             timeout 100 python3 benchmarks/plain_steps.py --model qwen3-1.7b --seq-len 512 --split $s --steps 30 \
               --warmup 5 2>>"$R/plain.err" | tail -1 >> "$R/plain.jsonl"; done ;;
    off) sweep ckpt_off 280 --splits 1x4,2x2,4x1 --no-activation-checkpointing ;;
    on) sweep ckpt_on 330 --splits 1x4,2x2,4x1 --activation-checkpointing ;;
    inv*) sweep "$step" 190 --splits 1x4,4x1 --no-activation-checkpointing ;;
    gpu) timeout 200 python3 -m pytest -q tests/test_gpu.py > "$R/gpu_tests.txt" 2>&1 ;;
  esac
done
