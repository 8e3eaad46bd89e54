# Run on the lent NVIDIA H200 (driver in gpu.csv; library versions in versions.txt), 2026-11-30,
# from a clean export of this repository at the commit that added docs/results/h200_part5.sh:
bash docs/results/h200_part5.sh plain off   # device call 1 (plain.jsonl kept from this call)
bash docs/results/h200_part5.sh off on      # device call 2 (ckpt_off.*, ckpt_on.*)
# that is, for "off" and "on":
python3 -m tracetui --export json -o ckpt_off.json --model qwen3-1.7b --seq-len 512 --precision bf16 \
  --steps 30 --warmup 5 --splits 1x4,2x2,4x1 --no-activation-checkpointing --runs-dir runs
python3 -m tracetui --export json -o ckpt_on.json --model qwen3-1.7b --seq-len 512 --precision bf16 \
  --steps 30 --warmup 5 --splits 1x4,2x2,4x1 --activation-checkpointing --runs-dir runs
# and the plain TRL reference (no tracetui), timer at on_step_end:
python3 benchmarks/plain_steps.py --model qwen3-1.7b --seq-len 512 --split 4x1 --steps 30 --warmup 5
python3 benchmarks/plain_steps.py --model qwen3-1.7b --seq-len 512 --split 1x4 --steps 30 --warmup 5
# *_events.jsonl.gz: the sweeps' event logs (gunzip, then `tracetui show FILE`); gpu_tests.txt:
# tests/test_gpu.py from device call 3, the probe under torch.cuda.set_sync_debug_mode("error").
# first_run_checkpointing_on/: the first session's run, which asked for checkpointing off and got
# it on (TRL's SFTConfig default); kept because earlier figures cite it.
# ckpt_off.json, ckpt_on.json: recomputed from the event logs by `tracetui show EVENTS --export json`
# after the speedup intervals became simultaneous over a group's pairs (the .out files: as run).
