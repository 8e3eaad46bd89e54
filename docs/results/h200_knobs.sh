#!/usr/bin/env bash
# Speed settings that leave training the same (issue: compare the other speed settings), on one
# H200 (nvidia-h200). qwen3-1.7b preset, seq 1024, ragged rows (synthetic-ragged), effective
# batch 16, bf16, 12 steps (3 warm-up), one run per trial (a screen: intervals cover step noise).
#   bash docs/results/h200_knobs.sh grid plain     # device call 1 (its 400 s limit cut it at trial 8 of 16)
#   bash docs/results/h200_knobs.sh grid2 qlora    # device call 2: the rest of the grid, QLoRA
# grid: splits 2x8,4x4,8x2,16x1 x checkpointing on/off x Liger off/on (16 trials);
# grid2: the 8 trials of 8x2 and 16x1 that call 1 did not reach, the same flags;
# plain: the same training in plain TRL (no tracetui), timer at on_step_end, for two of them;
# qlora: QLoRA off/on at 16x1 (checkpointing off), 8 steps (2 warm-up).
set -u
R=${R:-$OUT}; mkdir -p "$R"
M="--model qwen3-1.7b --seq-len 1024 --dataset synthetic-ragged --precision bf16 --effective-batch 16 --steps 12 --warmup 3 --repeats 1"
nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv > "$R/gpu.csv"
python3 -c "import torch, transformers, trl, peft, accelerate; print(torch.__version__, transformers.__version__, trl.__version__, peft.__version__, accelerate.__version__)" > "$R/versions.txt" 2>&1
sweep() {  # name, timeout, flags...
  local name=$1 limit=$2; shift 2
  /usr/bin/time -f "%e s wall" -o "$R/$name.wall" timeout "$limit" python3 -m tracetui --export json -o "$R/$name.json" $M "$@" \
    --runs-dir "/tmp/runs_$name" > "$R/$name.out" 2>&1
  gzip -c /tmp/runs_$name/*/events.jsonl > "$R/${name}_events.jsonl.gz"
}
for step in "$@"; do
  case $step in
    grid) sweep knobs 400 --splits 2x8,4x4,8x2,16x1 --vary activation_checkpointing=on,off --vary liger=off,on \
            --emit-config "$R/knobs_best.yaml" ;;
    grid2) sweep knobs2 330 --splits 8x2,16x1 --vary activation_checkpointing=on,off --vary liger=off,on ;;
    qlora) sweep qlora 200 --splits 16x1 --no-activation-checkpointing --vary qlora=off,on --steps 8 --warmup 2 ;;
    plain) for a in "--split 8x2 --activation-checkpointing" "--split 16x1 --liger"; do
             timeout 80 python3 benchmarks/plain_steps.py --model qwen3-1.7b --seq-len 1024 --ragged $a --steps 12 \
               --warmup 3 2>>"$R/plain.err" | tail -1 >> "$R/plain.jsonl"; done ;;
  esac
done
