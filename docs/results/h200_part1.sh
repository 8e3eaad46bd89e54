#!/usr/bin/env bash
# Part 1 of the GPU results, run on the lent 2x H200 machine (nvidia-h200-x2), one GPU each:
#   GPU 0: time_to_verdict, fixed 100 steps
#   GPU 1: time_to_verdict, --until-confident; the GPU tests; the H200 screenshots; --memory-limit OOM
# Results land in $R (tarred back).
R=${R:-$OUT/r}; mkdir -p "$R"
M="--model qwen3-1.7b --seq-len 512 --precision bf16"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv > "$R/gpus.csv"
python3 -c "import torch,transformers,trl,peft,accelerate;print(torch.__version__,transformers.__version__,trl.__version__,peft.__version__,accelerate.__version__)" > "$R/versions.txt"
(CUDA_VISIBLE_DEVICES=0 python3 benchmarks/time_to_verdict.py --out "$R/ttv" --mode fixed -- $M) > "$R/ttv_fixed.out" 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=1
  python3 benchmarks/time_to_verdict.py --out "$R/ttv" --mode adaptive -- $M
  python3 -m pytest -q tests/test_gpu.py
  python3 docs/make_screenshots.py --prefix h200_qwen3-1.7b --out "$R" -- $M --splits 1x4,2x2,4x1 --steps 15 --warmup 3 --runs-dir "$R/shots"
  python3 -m tracetui --export csv -o "$R/memlimit.csv" $M --effective-batch 16 --splits 16x1,1x16 --steps 3 --warmup 1 --memory-limit 5 --runs-dir "$R/memlimit"
) > "$R/gpu1.out" 2>&1 &
wait
python3 benchmarks/time_to_verdict.py --out "$R/ttv" --compare > "$R/ttv_compare.out" 2>&1
