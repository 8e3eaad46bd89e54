# Run on the lent NVIDIA H200 (driver 580.159.04; torch 2.11.0+cu130, transformers 5.17.0,
# trl 1.16.0, peft 0.21.0, accelerate 1.15.0), 2026-11-29.
python3 -m tracetui --export csv -o summary.csv --steps-csv steps.csv \
  --model qwen3-1.7b --seq-len 512 --splits 1x4,2x2,4x1 --steps 30 --warmup 5 --precision bf16 \
  --runs-dir runs
# events.jsonl is runs/<sweep id>/events.jsonl of that run.
