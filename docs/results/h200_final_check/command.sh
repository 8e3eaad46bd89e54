# The session's last code, end to end on the lent NVIDIA H200 (2026-11-30, a clean export of the
# commit that added settings that fail every run), 12 steps, to check nothing broke on a GPU:
python3 -m tracetui --export json -o final_check.json --model qwen3-1.7b --seq-len 512 --precision bf16 \
  --splits 1x4,4x1 --steps 12 --warmup 2 --runs-dir runs
# 4x1 4.04x faster than 1x4 (95% CI 2.51-6.52x), run level (two runs each); other processes used
# 0.004-0.015 CPU cores (tracetui's own process tree not counted); checkpointing read back off.
