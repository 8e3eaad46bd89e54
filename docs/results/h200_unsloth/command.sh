#!/usr/bin/env bash
# Unsloth's style of LoRA script (examples/unsloth_lora.py: FastLanguageModel, get_peft_model,
# TRL's SFTTrainer with SFTConfig literals, 2x4) swept unmodified by tracetui, then the same script
# run plainly (no tracetui; a copy with the split's two literals changed, a timer at on_step_end:
# benchmarks/plain_timer) at the same splits. qwen3-0.6b shape with random weights saved to a
# local folder, ragged text rows up to 512 tokens (benchmarks/local_preset.py), Unsloth's 16-bit
# LoRA r 16. On any machine with a CUDA GPU and Unsloth importable; where the wheel folders .whl
# (../shared/gpu-wheels.sh) and .whl-unsloth (wheels.sh beside this) are in the repository's
# root, they are installed first, each into its own folder (/tmp/site, /tmp/site-unsloth).
#   bash docs/results/h200_unsloth/command.sh [OUT]          (from the repository's root; OUT: ./out/h200_unsloth)
#   STEPS=8 PLAIN=2x4 SWEEP=0 bash docs/results/h200_unsloth/command.sh    (a check: one plain run)
set -u
R=$(realpath -m "${1:-out/h200_unsloth}"); mkdir -p "$R"
REPO=$PWD
STEPS=${STEPS:-20}
SPLITS=${SPLITS:-1x8,2x4,8x1}
PLAIN=${PLAIN:-${SPLITS//,/ }}
SWEEP=${SWEEP:-1}
into() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$@"; }
[ -d .whl ] && into /tmp/site .whl/*.whl
[ -d .whl-unsloth ] && into /tmp/site-unsloth .whl-unsloth/*.whl
# Unsloth's folder first (its trl 1.15, datasets 4.x), then tracetui's (dill, multiprocess, textual)
export PYTHONPATH=$REPO:/tmp/site-unsloth:/tmp/site PYTHONUNBUFFERED=1
mkdir -p /tmp/u && cd /tmp/u  # Unsloth writes its compiled trainer (unsloth_compiled_cache) here
python3 -c "import unsloth, trl, transformers, torch, peft, datasets, tracetui
print('unsloth', unsloth.__version__, 'trl', trl.__version__, 'transformers', transformers.__version__,
      'torch', torch.__version__, 'peft', peft.__version__, 'datasets', datasets.__version__,
      'gpu', torch.cuda.get_device_name())" > "$R/versions.txt" 2> /tmp/u/import.err || tail -30 /tmp/u/import.err
python3 -c "import xformers" 2>/dev/null && echo "xformers: importable" >> "$R/versions.txt" || echo "xformers: not installed" >> "$R/versions.txt"
python3 -c "import bitsandbytes" 2>/dev/null && echo "bitsandbytes: importable" >> "$R/versions.txt" || echo "bitsandbytes: not installed" >> "$R/versions.txt"
python3 "$REPO/benchmarks/local_preset.py" --model qwen3-0.6b --seq-len 512 --rows 2000 --out /tmp/u 2>/dev/null | tee -a "$R/versions.txt"
ARGS=(--model /tmp/u/model --dataset /tmp/u/data --max-steps "$STEPS" --max-seq-length 512 --output-dir /tmp/u/out)
if [ "$SWEEP" = 1 ]; then
  /usr/bin/time -f "sweep: command %e s" timeout 300 python3 -m tracetui sweep --splits "$SPLITS" --repeats 1 \
    --allow-busy --export csv -o "$R/sweep.csv" --runs-dir /tmp/u/runs -- \
    python3 "$REPO/examples/unsloth_lora.py" "${ARGS[@]}" 2> "$R/sweep.err"
  echo "sweep exit status $?" >> "$R/sweep.err"
  python3 -m tracetui show /tmp/u/runs/*/events.jsonl --export json -o "$R/sweep.json" 2>> "$R/sweep.err"
  cp /tmp/u/runs/*/events.jsonl "$R/events.jsonl"
  tail -8 "$R/sweep.err"
fi
for s in $PLAIN; do  # the user's own edit: the two literals changed in a copy
  sed -e "s/per_device_train_batch_size = 2,/per_device_train_batch_size = ${s%x*},/" \
      -e "s/gradient_accumulation_steps = 4,/gradient_accumulation_steps = ${s#*x},/" \
      "$REPO/examples/unsloth_lora.py" > "/tmp/u/plain_$s.py"
  /usr/bin/time -f "plain $s: command %e s" env PYTHONPATH="$REPO/benchmarks/plain_timer:$PYTHONPATH" \
    PLAIN_TIMER_OUT="$R/plain.jsonl" timeout 100 python3 "/tmp/u/plain_$s.py" "${ARGS[@]}" > "/tmp/u/plain_$s.log" 2>&1
  tail -1 "/tmp/u/plain_$s.log" >> "$R/versions.txt"
done
for f in /tmp/u/plain_*.log /tmp/u/runs/*/*.log; do  # what Unsloth said in each run (its patching, an import-order warning)
  echo "== $f"; grep -h "imported before\|Unsloth\|Padding-free" "$f" | cut -c1-200 | sort | uniq -c
done > "$R/unsloth_lines.txt" 2>&1
tar -czf "$R/logs.tar.gz" -C /tmp/u --exclude='*/output' import.err runs $(cd /tmp/u && ls plain_*.log) 2>/dev/null
python3 - "$R/plain.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for s in sorted({(r["micro_batch"], r["grad_accum"]) for r in rows}):
    run = [r for r in rows if (r["micro_batch"], r["grad_accum"]) == s]
    whole = [1000 * (b["end_s"] - a["end_s"]) for a, b in zip(run, run[1:])][2:]  # steps 4.. (3 warm-up)
    print(f"plain {s[0]}x{s[1]}: {len(run)} steps; median of steps 4-: begin-end {statistics.median([r['wall_ms'] for r in run[3:]]):.1f} ms,"
          f" end-end {statistics.median(whole):.1f} ms" if len(run) > 4 else f"plain {s}: {len(run)} steps")
EOF
