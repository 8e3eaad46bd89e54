#!/usr/bin/env bash
# One H200 call (issue #30), after the worker's SIGTERM during its set-up became an `interrupted`
# run instead of a traceback (seen in CI once, the sweep stopped by Ctrl-C twice early):
#  1. tests/test_lifetime.py (the stop signals, Ctrl-C twice, the new set-up test: all on this
#     machine's Python 3.12 and torch), tests/test_gpu.py (no added host-device sync; the memory
#     limit) and tests/test_emit.py (emitted files run by `trl sft --config` on transformers 5.17);
#  2. plain TRL (no tracetui) 4x1 and 1x4, then the first built-in sweep (qwen3-1.7b, seq 512,
#     bf16, checkpointing off, 1x4,2x2,4x1, two runs each, 30 steps): against h200_after_split/.
# Two calls (one command may take 10 minutes): PART=tests, then PART=timings.
#   R=$OUT PART=tests bash docs/results/h200_worker_setup_signal.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
export PATH=/tmp/site/bin:$PATH
python3 -c "import torch,transformers,trl,peft;print('torch',torch.__version__,'transformers',transformers.__version__,'trl',trl.__version__,'peft',peft.__version__)" | tee "$R/versions.txt"
if [ "${PART:-tests}" = tests ]; then
timeout 500 python3 -m pytest -q -p no:cacheprovider -o addopts="" -p no:xdist -rA tests/test_lifetime.py tests/test_gpu.py \
  tests/test_emit.py 2>&1 | tail -40 > "$R/tests.txt"
tail -3 "$R/tests.txt"
exit
fi
for s in 4x1 1x4; do
  timeout 90 python3 benchmarks/plain_steps.py --model qwen3-1.7b --seq-len 512 --split $s --steps 25 --warmup 5 \
    2> /dev/null | tee -a "$R/plain.jsonl"
done
timeout 170 python3 -m tracetui --export json -o "$R/builtin.json" --model qwen3-1.7b --seq-len 512 --precision bf16 \
  --no-activation-checkpointing --splits 1x4,2x2,4x1 --repeats 2 --steps 30 --runs-dir /tmp/bi 2> "$R/builtin.err"
tail -6 "$R/builtin.err"
gzip -c /tmp/bi/*/events.jsonl > "$R/builtin_events.jsonl.gz"
