#!/usr/bin/env bash
# Sharded LoRA across two GPUs (issue: FSDP as a setting to compare), on nvidia-h200-x2.
# qwen3-8b preset (random weights), seq 1024, bf16, effective batch 16 over 2 ranks, checkpointing
# off; splits 1x8x2, 2x4x2, 4x2x2, 8x1x2 crossed with sharding ddp/fsdp; 10 steps (3 warm-up), one
# run per trial. plain: the same training in plain TRL under torchrun (no tracetui), timer at
# on_step_end, DDP and FSDP at one split. fit: 8x1x2 under --memory-limit 86 (GiB per GPU), which
# call 1 measured at 88.1 GiB per rank with DDP and 80.9 with FSDP.
#   bash docs/results/h200x2_fsdp.sh sweep          # device call 1
#   bash docs/results/h200x2_fsdp.sh plain fit      # device call 2 (with docs/results/h200_start.sh)
set -u
R=${R:-$OUT}; mkdir -p "$R"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv > "$R/gpu.csv"
nvidia-smi topo -m > "$R/topo.txt" 2>&1
python3 -c "import torch, transformers, trl, peft, accelerate; print(torch.__version__, transformers.__version__, trl.__version__, peft.__version__, accelerate.__version__)" > "$R/versions.txt" 2>&1
for step in "$@"; do
  case $step in
    sweep) /usr/bin/time -f "%e s wall" -o "$R/fsdp.wall" timeout "${LIMIT:-560}" python3 -m tracetui --export json \
             -o "$R/fsdp.json" --model qwen3-8b --seq-len 1024 --precision bf16 --nproc-per-node 2 \
             --effective-batch 16 --splits 1x8,2x4,4x2,8x1 --vary sharding=ddp,fsdp --no-activation-checkpointing \
             --steps 10 --warmup 3 --repeats 1 --runs-dir /tmp/runs_fsdp > "$R/fsdp.out" 2>&1
           gzip -c /tmp/runs_fsdp/*/events.jsonl > "$R/fsdp_events.jsonl.gz"
           tar czf "$R/fsdp_logs.tgz" /tmp/runs_fsdp/*/*.log ;;
    fit) /usr/bin/time -f "%e s wall" -o "$R/fit.wall" timeout 200 python3 -m tracetui --export json \
           -o "$R/fit.json" --model qwen3-8b --seq-len 1024 --precision bf16 --nproc-per-node 2 \
           --effective-batch 16 --splits 8x1 --vary sharding=ddp,fsdp --no-activation-checkpointing \
           --memory-limit 86 --steps 8 --warmup 2 --repeats 1 --runs-dir /tmp/runs_fit > "$R/fit.out" 2>&1
         gzip -c /tmp/runs_fit/*/events.jsonl > "$R/fit_events.jsonl.gz" ;;
    plain) for f in "" "--fsdp"; do
             timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node 2 benchmarks/plain_steps.py \
               --model qwen3-8b --seq-len 1024 --split 4x2 --steps 10 --warmup 3 $f 2>>"$R/plain.err" | tail -1 >> "$R/plain.jsonl"
           done ;;
  esac
done
