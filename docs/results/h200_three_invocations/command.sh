# Three independent invocations of one sweep on the lent NVIDIA H200, 2026-11-30 (device call 3),
# from a clean export of this repository at the commit that added docs/results/h200_part5.sh:
bash docs/results/h200_part5.sh inv1 inv2 inv3 gpu
# each of them:
python3 -m tracetui --export json -o invN.json --model qwen3-1.7b --seq-len 512 --precision bf16 \
  --steps 30 --warmup 5 --splits 1x4,4x1 --no-activation-checkpointing --runs-dir runs
# inv3.json was lost to the device's limit on returned files and rebuilt from its event log
# with `tracetui show inv3_events.jsonl --export json -o inv3.json` (the same analysis code).
# call1_ckpt_off.*: device call 1's checkpointing-off sweep (1x4,2x2,4x1), a fourth invocation; its
# summary failed to write (a broken import at that commit, fixed after) and was rebuilt the same
# way; GPU sampling failed in that call (a schema mismatch, fixed after), so it has no GPU columns.
# All invN.json and call1_ckpt_off.json: recomputed from their event logs by `tracetui show` with
# the current analysis (simultaneous intervals change only call1's three-split figures).
