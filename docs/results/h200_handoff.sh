#!/usr/bin/env bash
# One H200 call (issues #29 and #30), with the GPU machine's own transformers (5.17) and TRL:
#  1. tests/test_emit.py: a swept `trl sft` command's --emit-config file and a built-in sweep's,
#     each then run by TRL's own CLI (`trl sft --config FILE`), checked from what the trainer
#     saved (training_args.bin, adapter_config.json) against the recommendation and the run
#     measured; the field names those of the installed transformers;
#  2. plain TRL (no tracetui) 4x1 and 1x4, then the first built-in sweep (qwen3-1.7b, seq 512,
#     bf16, checkpointing off, 1x4,2x2,4x1, two runs each, 30 steps) with the code of this
#     commit: its numbers against the head-start call's (h200_head_start_decide/).
#   R=$OUT bash docs/results/h200_handoff.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
export PATH=/tmp/site/bin:$PATH
python3 -c "import torch,transformers,trl,peft;print('torch',torch.__version__,'transformers',transformers.__version__,'trl',trl.__version__,'peft',peft.__version__)" | tee "$R/versions.txt"
git log --oneline -1 2>/dev/null | tee -a "$R/versions.txt"
timeout 240 python3 -m pytest -q -p no:cacheprovider -rA tests/test_emit.py 2>&1 | tail -25 > "$R/test_emit.txt"
tail -3 "$R/test_emit.txt"
for s in 4x1 1x4; do
  timeout 90 python3 benchmarks/plain_steps.py --model qwen3-1.7b --seq-len 512 --split $s --steps 25 --warmup 5 \
    2> /dev/null | tee -a "$R/plain.jsonl"
done
timeout 170 python3 -m tracetui --export json -o "$R/builtin.json" --model qwen3-1.7b --seq-len 512 --precision bf16 \
  --no-activation-checkpointing --splits 1x4,2x2,4x1 --repeats 2 --steps 30 --runs-dir /tmp/bi 2> "$R/builtin.err"
tail -6 "$R/builtin.err"
gzip -c /tmp/bi/*/events.jsonl > "$R/builtin_events.jsonl.gz"
