#!/usr/bin/env bash
# One H200 call (issue #31: paired comparisons, and how far each trial is from the peak), with the
# code of the commit that adds this file (run from its root):
#  0. tests/test_gpu.py's no-sync check: the probe's new reads (each step's row fingerprint, the
#     positions its loss scores, its micro-batch shapes) add no host-device synchronisation;
#  1. the issue's sweep: TRL's own `trl sft` on ragged text rows, effective batch 8, 8x1 with
#     activation checkpointing off and on, one run each, 12 steps (3 warm-up), on qwen3-0.6b's
#     published shape with random weights saved to a local folder first (benchmarks/local_preset.py:
#     byte tokenizer, rows of synthetic-ragged's lengths up to 512 tokens); then the verdict paired
#     (as tracetui gives it) and unpaired (the steps' fingerprints left out) side by side, with each
#     trial's steps and the per-step ratio (benchmarks/paired_vs_unpaired.py);
#  2. the same comparison with tracetui's built-in runner (synthetic-ragged, seq 512);
#  3. the built-in qwen3-1.7b sweep (seq 512, bf16, checkpointing off, 1x4,4x1, one run each, 20
#     steps): FLOPs per step, TFLOP/s and MFU per split; plain TRL 4x1 (benchmarks/plain_steps.py,
#     25 steps, 5 warm-up) in the same call: its tokens/s, and the MFU its step time gives with the
#     same FLOPs per step.
# Expected about 250 s of device time (every command has a timeout; at most about 450 s in all).
#   R=$OUT bash docs/results/h200_paired_mfu.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
python3 -c "import torch,transformers,trl,peft;print('torch',torch.__version__,'transformers',transformers.__version__,'trl',trl.__version__,'peft',peft.__version__)" | tee "$R/versions.txt"
git log --oneline -1 2>/dev/null | tee -a "$R/versions.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$R/versions.txt"

timeout 50 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k no_sync 2>&1 | tail -4 > "$R/test_gpu.txt"
tail -1 "$R/test_gpu.txt"

# 1. trl sft, swept
timeout 60 python3 benchmarks/local_preset.py --model qwen3-0.6b --seq-len 512 --out /tmp/local 2> "$R/local.err" \
  | tee "$R/local.json"
timeout 150 python3 -m tracetui sweep --effective-batch 8 --splits 8x1 --vary ckpt=off,on --repeats 1 --allow-busy \
  --export json -o "$R/trl_ragged.json" --runs-dir /tmp/tr -- trl sft --model_name_or_path /tmp/local/model \
  --dataset_name /tmp/local/data --use_peft --lora_r 16 --lora_alpha 32 --lora_target_modules all-linear \
  --max_steps 12 --max_length 512 --bf16 True --dtype bfloat16 --output_dir /tmp/sft --report_to none \
  --save_strategy no --logging_steps 1 --seed 42 2> "$R/trl_ragged.err"
tail -5 "$R/trl_ragged.err"
python3 benchmarks/paired_vs_unpaired.py /tmp/tr/*/events.jsonl 2>&1 | tee "$R/trl_ragged_paired.txt"
gzip -c /tmp/tr/*/events.jsonl > "$R/trl_ragged_events.jsonl.gz"

# 2. the built-in runner, the same comparison
timeout 90 python3 -m tracetui --model qwen3-0.6b --dataset synthetic-ragged --seq-len 512 --effective-batch 8 \
  --splits 8x1 --vary ckpt=off,on --repeats 1 --steps 12 --allow-busy --export json -o "$R/builtin_ragged.json" \
  --runs-dir /tmp/br 2> "$R/builtin_ragged.err"
tail -4 "$R/builtin_ragged.err"
python3 benchmarks/paired_vs_unpaired.py /tmp/br/*/events.jsonl 2>&1 | tee "$R/builtin_ragged_paired.txt"
gzip -c /tmp/br/*/events.jsonl > "$R/builtin_ragged_events.jsonl.gz"

# 3. MFU of the built-in qwen3-1.7b sweep, plain TRL beside it
timeout 110 python3 -m tracetui --export json -o "$R/builtin_17b.json" --model qwen3-1.7b --seq-len 512 \
  --precision bf16 --no-activation-checkpointing --splits 1x4,4x1 --repeats 1 --steps 20 --allow-busy \
  --runs-dir /tmp/b17 2> "$R/builtin_17b.err"
tail -5 "$R/builtin_17b.err"
gzip -c /tmp/b17/*/events.jsonl > "$R/builtin_17b_events.jsonl.gz"
timeout 75 python3 benchmarks/plain_steps.py --model qwen3-1.7b --seq-len 512 --split 4x1 --steps 25 --warmup 5 \
  2> /dev/null | tee "$R/plain.jsonl"
python3 - "$R" <<'EOF' | tee "$R/mfu.txt"
import json, sys
r = sys.argv[1]
f = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
s = json.load(open(f"{r}/builtin_17b.json"))
for row in s["splits"]:
    print(f"tracetui {row['trial']}: {f(row['step_ms_median'], '.1f')} ms/step, {f(row['tokens_per_s'], '.0f')} tok/s, "
          f"{f(row['tflop_per_step'], '.3g')} TFLOP/step (hardware {f(row['hw_tflop_per_step'], '.3g')}), "
          f"{f(row['tflops'], '.3g')} TFLOP/s, MFU {f(row['mfu_pct'], '.1f')}% ({row['mfu_note']})")
best = next(row for row in s["splits"] if row["trial"] == "4x1")
for line in open(f"{r}/plain.jsonl"):
    if not line.startswith('{"'):
        continue  # the trainer's own log lines
    p = json.loads(line)
    tflops = best["tflop_per_step"] / (p["median_ms"] / 1000)
    mfu = 100 * tflops / best["peak_tflops"] if best["peak_tflops"] else None
    print(f"plain TRL {p['split']}: {p['median_ms']:.1f} ms/step, {4 * p['seq_len'] / p['median_ms'] * 1000:.0f} tok/s, "
          f"{tflops:.3g} TFLOP/s, MFU {f(mfu, '.1f')}% (tracetui's FLOPs per step of 4x1)")
print("recommendation:", s["recommendation"])
EOF
