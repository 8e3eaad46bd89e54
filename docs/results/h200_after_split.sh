#!/usr/bin/env bash
# One H200 call (issue #30), after the environment protocol (envvars.py), the wire (wire.py) and
# the monitor's launchers left their modules and a step record carries its phases by name:
#  1. tests/test_gpu.py (the probe adds no host-device sync, in sync-debug "error" mode; the
#     memory limit), tests/test_runner_stub.py (the runner against stand-ins) and
#     tests/test_emit.py (emitted files run by `trl sft --config`, on this machine's transformers);
#  2. plain TRL (no tracetui) 4x1 and 1x4, then the first built-in sweep (qwen3-1.7b, seq 512,
#     bf16, checkpointing off, 1x4,2x2,4x1, two runs each, 30 steps): against h200_after_layout/;
#  3. `tracetui run` of the example script on qwen3-0.6b (the probe injected, TraceCallback
#     reporting over the socket with its GPU sampler), 4x1, 16 steps.
#   R=$OUT bash docs/results/h200_after_split.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
export PATH=/tmp/site/bin:$PATH
python3 -c "import torch,transformers,trl,peft;print('torch',torch.__version__,'transformers',transformers.__version__,'trl',trl.__version__,'peft',peft.__version__)" | tee "$R/versions.txt"
timeout 300 python3 -m pytest -q -p no:cacheprovider -o addopts="" -p no:xdist -rA tests/test_gpu.py tests/test_runner_stub.py tests/test_emit.py 2>&1 | tail -30 > "$R/tests.txt"
tail -3 "$R/tests.txt"
for s in 4x1 1x4; do
  timeout 90 python3 benchmarks/plain_steps.py --model qwen3-1.7b --seq-len 512 --split $s --steps 25 --warmup 5 \
    2> /dev/null | tee -a "$R/plain.jsonl"
done
timeout 170 python3 -m tracetui --export json -o "$R/builtin.json" --model qwen3-1.7b --seq-len 512 --precision bf16 \
  --no-activation-checkpointing --splits 1x4,2x2,4x1 --repeats 2 --steps 30 --runs-dir /tmp/bi 2> "$R/builtin.err"
tail -6 "$R/builtin.err"
gzip -c /tmp/bi/*/events.jsonl > "$R/builtin_events.jsonl.gz"
timeout 150 python3 -m tracetui run --export csv -o "$R/run.csv" --runs-dir /tmp/run -- python3 examples/train_lora.py \
  --no_trace --model_name_or_path qwen3-0.6b --per_device_train_batch_size 4 --gradient_accumulation_steps 1 \
  --max_steps 16 --bf16 true --output_dir /tmp/run_out --report_to none 2> "$R/run.err"
tail -4 "$R/run.err"
