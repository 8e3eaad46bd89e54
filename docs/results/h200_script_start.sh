#!/usr/bin/env bash
# One H200: where a swept script's start goes (issue #15), the code of the commit that adds this
# file (run from its root).
#  1. plain TRL 4x1, qwen3-1.7b, seq 512 (no tracetui);
#  2. the libraries' imports in a fresh interpreter, three times (what every script run pays);
#  3. tracetui sweep --splits 1x4,4x1 -- python examples/train_lora.py on qwen3-0.6b, 20 steps:
#     each run's start_interpreter_s, start_script_s, start_trainer_s in the summary.
# Everything goes to R, packed into $OUT/script.tar.gz after each step.
#   R=/tmp/script bash docs/results/h200_script_start.sh
set -u
R=${R:-/tmp/script}; mkdir -p "$R"
OLD=unused . docs/results/h200_head_start_arms.sh
save() { tar -czf "$OUT/script.tar.gz" -C "$R" .; }
plain 4x1; save
for i in 1 2 3; do
  python3 -c "import time; t=time.perf_counter(); import torch, transformers, trl, peft, datasets; from trl import SFTTrainer; print(f'imports {time.perf_counter()-t:.2f} s')" 2>/dev/null | tee -a "$R/imports.txt"
done; save
/usr/bin/time -f "command %e s" python3 -m tracetui sweep --splits 1x4,4x1 --repeats 1 --export json -o "$R/script.json" \
  --runs-dir "$R/runs" -- python3 examples/train_lora.py --no_trace --model_name_or_path qwen3-0.6b --max_steps 20 \
  2> "$R/script.err"; tail -5 "$R/script.err"; save
