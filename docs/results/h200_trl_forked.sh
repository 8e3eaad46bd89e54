#!/usr/bin/env bash
# One H200 call (issue #33): TRL's own command line swept by tracetui, its runs forked from
# tracetui's server, against the same sweep with --fresh and plain `trl sft` runs (no tracetui,
# a timer at on_step_end: benchmarks/plain_timer) in the same call. qwen3-0.6b shape with random
# weights, rows of 512 tokens, LoRA r 16 on all linear layers, bf16, 12 steps a run.
#   R=$OUT bash docs/results/h200_trl_forked.sh       (from the repository's root)
set -u
R=${R:-$OUT}; mkdir -p "$R"
REPO=$PWD
export PATH=/tmp/site/bin:$PATH
python3 -c "import torch,transformers,trl,peft;print('torch',torch.__version__,'transformers',transformers.__version__,'trl',trl.__version__,'peft',peft.__version__)" | tee "$R/versions.txt"
python3 benchmarks/trl_cli_fixture.py --model qwen3-0.6b --out /tmp/q 2>/dev/null | tee -a "$R/versions.txt"
cd /tmp/q
ARGS=(--model_name_or_path model --dataset_name data --max_length 512 --use_peft --lora_r 16
      --lora_target_modules all-linear --max_steps 12 --output_dir o --save_strategy no --report_to none
      --logging_steps 100 --bf16 true)
for s in 1x4 4x1; do
  /usr/bin/time -f "plain $s: command %e s" env PYTHONPATH="$REPO/benchmarks/plain_timer:$PYTHONPATH" \
    PLAIN_TIMER_OUT="$R/plain_$s.jsonl" timeout 150 trl sft "${ARGS[@]}" \
    --per_device_train_batch_size ${s%x*} --gradient_accumulation_steps ${s#*x} > /tmp/q/plain_$s.log 2>&1
  tail -1 /tmp/q/plain_$s.log | tee -a "$R/versions.txt"
done
cat "$R"/plain_*.jsonl > "$R/plain.jsonl"; rm -f "$R"/plain_1x4.jsonl "$R"/plain_4x1.jsonl
/usr/bin/time -f "command %e s" timeout 250 python3 -m tracetui sweep --splits 1x4,4x1 --repeats 2 --export json \
  -o "$R/forked.json" --runs-dir /tmp/rf -- trl sft "${ARGS[@]}" 2> "$R/forked.err"
tail -4 "$R/forked.err"
/usr/bin/time -f "command %e s" timeout 200 python3 -m tracetui sweep --fresh --splits 1x4,4x1 --repeats 1 \
  --export json -o "$R/fresh.json" --runs-dir /tmp/rs -- trl sft "${ARGS[@]}" 2> "$R/fresh.err"
tail -4 "$R/fresh.err"
tar -czf "$R/events.tar.gz" -C / tmp/rf tmp/rs --exclude='*/output' 2>/dev/null
