#!/usr/bin/env bash
# Part 2 of the GPU results, on the lent 2x H200 machine (nvidia-h200-x2):
#   the probe's and TraceCallback's overhead (GPU 0, alone) while GPU 1 shows --memory-limit OOM,
#   then a parallel sweep over both GPUs (--gpus 0,1) and a DDP sweep (--nproc-per-node 2),
#   qwen3-1.7b shape at a global effective batch of 16.
R=${R:-$OUT/r}; mkdir -p "$R"
M="--model qwen3-1.7b --seq-len 512 --precision bf16"
(CUDA_VISIBLE_DEVICES=1 python3 -m tracetui --export csv -o "$R/memlimit.csv" $M --effective-batch 16 --splits 16x1,1x16 --steps 3 --warmup 1 --memory-limit 5 --runs-dir "$R/memlimit") > "$R/memlimit.out" 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=0
  python3 benchmarks/overhead.py --model qwen3-1.7b --seq-len 512 --split 4x1 --blocks 16 --block 5 --precision bf16 --json "$R/overhead_probe.json"
  python3 benchmarks/overhead.py --model qwen3-1.7b --seq-len 512 --split 4x1 --blocks 16 --block 5 --precision bf16 --callback --json "$R/overhead_callback.json"
) > "$R/overhead.out" 2>&1
wait
python3 -m tracetui --export csv -o "$R/parallel.csv" $M --gpus 0,1 --effective-batch 16 --splits 2x8,4x4,8x2,16x1 --steps 10 --warmup 3 --runs-dir "$R/parallel" > "$R/parallel.out" 2>&1
python3 -m tracetui --export csv -o "$R/ddp.csv" $M --nproc-per-node 2 --effective-batch 16 --splits 2x4,4x2,8x1 --steps 10 --warmup 3 --runs-dir "$R/ddp" > "$R/ddp.out" 2>&1
