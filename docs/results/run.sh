#!/usr/bin/env bash
# The commands behind every data set in docs/results/, as they run today, on any machine with a
# CUDA GPU (two for the h200x2_* sets) and tracetui's own dependencies; it installs nothing.
#
#   bash docs/results/run.sh [OUT] [NAME ...]     # from the repository's root
#
# OUT (default ./out) gets one folder per data set NAME (default: every one this machine can run;
# the h200x2_* sets need two GPUs; h200_unsloth, which needs Unsloth, runs only when named). Each
# folder gets the files the data set's commands write, versions.txt (the libraries and the GPU)
# and commands.txt (each command, and the files it wrote). DRY=1 writes commands.txt and runs
# nothing. PYTHON picks the interpreter (python3).
# The recorded folders ran on a lent NVIDIA H200 (143771 MiB): docs/results/README.md says
# which files of each were kept and how the recorded call differed from the function here.
set -u -o pipefail
CALLER=$PWD  # OUT is taken from where the script was called
cd "$(dirname "$0")/../.." || exit 2
PY=${PYTHON:-python3}
Q17="--model qwen3-1.7b --seq-len 512 --precision bf16"  # the first built-in sweep's model
NOCK="--no-activation-checkpointing"

# --- helpers: x notes a command in $D/commands.txt (with the files it writes), then runs it ------
x() {  # FILES COMMAND...  (unless DRY is set); a failure is noted, and the data set reported failed
  local files=$1 code; shift
  printf '%s\n    %s\n' "$files" "$*" >> "$D/commands.txt"
  printf '+ %s\n' "$*" >&2
  [ -n "${DRY:-}" ] && return 0
  "$@"; code=$?
  [ $code -eq 0 ] || { printf '    failed: exit status %s\n' $code >> "$D/commands.txt"; FAILED=1; }
  return $code
}
json_lines_of() {  # COMMAND...: the command's JSON lines of a split's steps (its other output in plain.err)
  "$@" 2>> "$D/plain.err" | grep '^{"split'
}
to() {  # FILE COMMAND...: the command's output into FILE (its stderr into stderr.txt)
  local file=$1; shift
  x "$file" "$@" > "$D/$file" 2>> "$D/stderr.txt"
}
gzip_events() {  # DIR: the event logs of the sweeps run with --runs-dir DIR, gzipped, to stdout
  cat "$1"/*/events.jsonl | gzip -c
}
events() {  # NAME: $D/NAME_events.jsonl.gz from --runs-dir $D/runs/NAME
  x "${1}_events.jsonl.gz" gzip_events "$D/runs/$1" > "$D/${1}_events.jsonl.gz"
}
sweep() {  # FILE.json|FILE.csv TRACETUI-ARGS...: a headless built-in sweep; FILE.err holds its verdict lines
  local file=$1 base=${1%.*} fmt=${1##*.}; shift
  x "$file $base.err" $PY -m tracetui --export "$fmt" -o "$D/$file" --force "$@" --runs-dir "$D/runs/$base" \
    2> "$D/$base.err"
  events "$base"
}
sweep_script() {  # FILE.json SWEEP-ARGS... -- COMMAND...: `tracetui sweep` of a training command
  local file=$1 base=${1%.*}; shift
  x "$file $base.err" $PY -m tracetui sweep --export json -o "$D/$file" --force --runs-dir "$D/runs/$base" "$@" \
    2> "$D/$base.err"
  events "$base"
}
wall() {  # NAME TRACETUI-ARGS...: a whole command timed against its steps, a line of wall_vs_steps.jsonl
  local name=$1; shift
  x "$name.json wall_vs_steps.jsonl" $PY benchmarks/wall_vs_steps.py --name "$name" --runs-dir "$D/runs/$name" -- \
    --export json -o "$D/$name.json" --force "$@" >> "$D/wall_vs_steps.jsonl"
  events "$name"
}
plain() {  # PLAIN_STEPS-ARGS...: the same training in plain TRL, no tracetui, a line of plain.jsonl
  x plain.jsonl json_lines_of $PY benchmarks/plain_steps.py "$@" >> "$D/plain.jsonl"
}
timed() {  # ARM ORDER COMMAND...: one whole command, its wall time a line of walls.tsv
  local arm=$1 order=$2 t0 t1 code; shift 2
  t0=$(date +%s.%N); x "walls.tsv ($arm $order)" "$@"; code=$?; t1=$(date +%s.%N)
  $PY -c "print('$arm\t$order\t%.1f\t$code' % ($t1 - $t0))" >> "$D/walls.tsv"
}
versions() {
  [ -n "${DRY:-}" ] && return
  { $PY -c "import sys, torch, transformers, trl, peft, accelerate; print('python', sys.version.split()[0], \
'torch', torch.__version__, 'transformers', transformers.__version__, 'trl', trl.__version__, 'peft', \
peft.__version__, 'accelerate', accelerate.__version__)"
    command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
  } > "$D/versions.txt" 2>&1
}

# --- the data sets: one function each, named after its folder ---------------------------------

h200_qwen3-1.7b() {  # the batch split on one GPU, checkpointing off and on; three invocations of one sweep
  local m="$Q17 --steps 30 --warmup 5"
  for s in 4x1 1x4; do plain --model qwen3-1.7b --seq-len 512 --split $s --steps 30 --warmup 5; done
  sweep ckpt_off.json $m --splits 1x4,2x2,4x1 $NOCK
  sweep ckpt_on.json $m --splits 1x4,2x2,4x1 --activation-checkpointing
  for i in 1 2 3; do sweep inv$i.json $m --splits 1x4,4x1 $NOCK; done
}

h200_after_layout() {  # the emitted config files run by `trl sft --config`; the first built-in sweep, plain TRL beside
  to test_emit.txt $PY -m pytest -q -p no:cacheprovider -rA tests/test_emit.py
  for s in 4x1 1x4; do plain --model qwen3-1.7b --seq-len 512 --split $s --steps 25 --warmup 5; done
  sweep builtin.json $Q17 $NOCK --splits 1x4,2x2,4x1 --repeats 2 --steps 30
}

h200_folders() {  # after the package moved into folders: the GPU tests, h200_after_layout's calls as they run today,
  # the search against the seed's method, and a `trl sft` sweep's time account against the time from outside
  to test_gpu.txt $PY -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py
  h200_after_layout
  h200_time_to_answer
  h200_account
}

h200_time_to_answer() {  # (of h200_folders) the search against the seed's method (every split, 100 steps) on a shape the tests do not use
  to search_vs_seed.json $PY benchmarks/search_vs_seed.py --out "$D/svs" --limit 300 -- --model llama-3.2-1b \
    --seq-len 512 --effective-batch 8 $NOCK
}

h200_search_e16() {  # the search against the seed's method at effective batch 16 (five splits), the search's time account kept
  to search_vs_seed.json $PY benchmarks/search_vs_seed.py --out "$D/svs" --limit 480 -- --model llama-3.2-1b \
    --seq-len 512 --effective-batch 16 $NOCK
  x "search.json seed.json" cp "$D/svs/search.json" "$D/svs/seed.json" "$D/"
  x search_events.jsonl.gz gzip_events "$D/svs/runs/search" > "$D/search_events.jsonl.gz"
}

head_starts_ab() {  # "NAME ..." TRACETUI-ARGS...: one `wall` command per NAME, in that order; without_* with
  # --no-head-start, with_* with head starts (the default)
  local names=$1 n; shift
  for n in $names; do
    case $n in without_*) wall "$n" "$@" --no-head-start ;; *) wall "$n" "$@" ;; esac
  done
}
L1B="--model llama-3.2-1b --seq-len 512"  # the head-start sets' model (no test uses it)
PLAIN_8X2="$L1B --split 8x2 --steps 25 --warmup 5"

h200_search_head_starts() {  # the search with head starts against without, A B B A, whole commands against their
  # steps (the shape of h200_search_e16); plain TRL of its two finalists beside
  for s in 16x1 8x2; do plain $L1B --split $s --steps 25 --warmup 5; done
  head_starts_ab "without_1 with_1 with_2 without_2" $L1B --effective-batch 16 $NOCK --search
}

h200_head_start_8x2() {  # (of h200_search_head_starts, whose README has the readings) does a run built early beside
  # it change what a run measures? 8x2 alone, four runs a command, with head starts and without, A B B A; plain TRL
  # first and last
  plain $PLAIN_8X2
  head_starts_ab "without_1 with_1 with_2 without_2" $L1B --effective-batch 16 $NOCK --splits 8x2 --repeats 4 --steps 20
  plain $PLAIN_8X2
}

h200_head_start_8x2_b() {  # (of h200_head_start_8x2) again with three commands an arm, A B B A A B
  plain $PLAIN_8X2
  head_starts_ab "without_1 with_1 with_2 without_2 without_3 with_3" $L1B --effective-batch 16 $NOCK --splits 8x2 \
    --repeats 4 --steps 20
  plain $PLAIN_8X2
}

h200_neighbour() {  # (of h200_head_start_8x2_b) the head start's condition on its own, no tracetui measured: plain TRL
  # 8x2 alone, or with a second plain run of the same shape built and waiting beside it; eight pairs, order alternating
  to neighbour.jsonl $PY benchmarks/neighbour.py --pairs 8 -- $L1B --split 8x2 --steps 30 --warmup 5
}

h200_account() {  # (of h200_folders) a `trl sft` sweep with --emit-config: its time account against the time measured from outside
  to fixture.txt $PY benchmarks/trl_cli_fixture.py --model qwen3-0.6b --out "$D/fixture"
  local args=(--model_name_or_path "$D/fixture/model" --dataset_name "$D/fixture/data" --max_length 512 --use_peft
              --lora_r 16 --lora_target_modules all-linear --max_steps 12 --output_dir "$D/trl_out" --save_strategy no
              --report_to none --logging_steps 100 --bf16 true)
  local s
  for s in with without; do
    local emit=(); [ $s = with ] && emit=(--emit-config "$D/best.yaml")
    x "wall_vs_steps.jsonl $s.json" $PY benchmarks/wall_vs_steps.py --name "$s" --runs-dir "$D/runs/$s" -- sweep \
      --splits 1x4,4x1 --export json -o "$D/$s.json" --force "${emit[@]}" -- trl sft "${args[@]}" >> "$D/wall_vs_steps.jsonl"
  done
}

h200_ray() {  # --ray on a one-node cluster (a Ray started for the command) against the local runner, the same sweep
  # in the same call, each whole command against its steps; plain TRL beside (the readings: h200_ray_lanes/README.md)
  for s in 4x1 1x4; do plain --model qwen3-1.7b --seq-len 512 --split $s --steps 25 --warmup 5; done
  wall local $Q17 $NOCK --splits 1x4,2x2,4x1 --repeats 2 --steps 30
  wall ray $Q17 $NOCK --splits 1x4,2x2,4x1 --repeats 2 --steps 30 --ray
}

h200_ray_lanes() {  # (of h200_ray) once each lane forks its runs from a fork server of its own: both whole commands
  # again, in one call, one run a split
  wall local $Q17 $NOCK --splits 1x4,2x2,4x1 --repeats 1 --steps 30
  wall ray $Q17 $NOCK --splits 1x4,2x2,4x1 --repeats 1 --steps 30 --ray
}

h200_knobs() {  # split x checkpointing x Liger (needs liger-kernel), QLoRA (needs bitsandbytes), plain TRL beside
  local m="--model qwen3-1.7b --seq-len 1024 --dataset synthetic-ragged --precision bf16 --effective-batch 16 --repeats 1"
  sweep knobs.json $m --steps 12 --warmup 3 --splits 2x8,4x4,8x2,16x1 --vary activation_checkpointing=on,off \
    --vary liger=off,on --emit-config "$D/knobs_best.yaml"
  sweep qlora.json $m --steps 8 --warmup 2 --splits 16x1 $NOCK --vary qlora=off,on
  plain --model qwen3-1.7b --seq-len 1024 --ragged --split 8x2 --activation-checkpointing --steps 12 --warmup 3
  plain --model qwen3-1.7b --seq-len 1024 --ragged --split 16x1 --liger --steps 12 --warmup 3
}

h200_search() {  # the search against the full grid, whole commands, 2 steps a run
  x "walls.tsv picks.txt search_vs_grid.tar.gz" env OUT="$D" bash benchmarks/search_vs_grid.sh
}

h200_search_12() {  # the same at 12 steps a run; a forked trial's start, profiled
  to trial_start.txt $PY benchmarks/trial_start.py --model qwen3-1.7b --seq-len 512 --split 4x1 --trials 3 --top 30
  x "walls.tsv picks.txt search_vs_grid.tar.gz" env OUT="$D" STEPS=12 WARMUP=2 bash benchmarks/search_vs_grid.sh \
    24:search:600 24:grid:900 80:search:600 80:grid:900
}

h200_memory_limit() {  # --memory-limit 5: 16x1 ends out of memory, the sweep goes on, 1x16 fits (checkpointing on, as recorded)
  sweep memlimit.csv $Q17 --activation-checkpointing --effective-batch 16 --splits 16x1,1x16 --steps 3 --warmup 1 \
    --memory-limit 5
  x events.jsonl gunzip -c "$D/memlimit_events.jsonl.gz" > "$D/events.jsonl"
}

h200_unsloth() {  # Unsloth's style of LoRA script (examples/unsloth_lora.py: FastLanguageModel, get_peft_model, TRL's
  # SFTTrainer with SFTConfig literals, 2x4) swept unmodified, then run plainly (no tracetui; a copy with the split's
  # two literals changed, a timer at on_step_end: benchmarks/plain_timer) at the same splits; Unsloth must be
  # importable. qwen3-0.6b shape with random weights saved to a local folder, ragged rows up to 512 tokens
  # (benchmarks/local_preset.py), Unsloth's 16-bit LoRA r 16. STEPS (20), SPLITS (1x8,2x4,8x1), PLAIN (the splits run
  # plainly: all), SWEEP=0 (the plain runs only); each whole command's time a line of walls.tsv; the model, data, runs
  # and plain copies in u/ (the recorded call's was /tmp/u)
  local repo=$PWD u=$D/u steps=${STEPS:-20} splits=${SPLITS:-1x8,2x4,8x1}
  local plain_splits=${PLAIN:-${splits//,/ }}
  local args=(--model $u/model --dataset $u/data --max-steps "$steps" --max-seq-length 512 --output-dir $u/out)
  mkdir -p $u
  (  # in $u: Unsloth writes its compiled trainer (unsloth_compiled_cache) into the working folder
    cd $u || exit 1
    export PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
    x unsloth_versions.txt $PY -c "import unsloth, trl, transformers, torch, peft, datasets, tracetui
print('unsloth', unsloth.__version__, 'trl', trl.__version__, 'transformers', transformers.__version__,
      'torch', torch.__version__, 'peft', peft.__version__, 'datasets', datasets.__version__,
      'gpu', torch.cuda.get_device_name())
for m in ('xformers', 'bitsandbytes'):
    try:
        __import__(m)
        print(m + ': importable')
    except Exception:
        print(m + ': not installed')" > "$D/unsloth_versions.txt" 2> $u/import.err || tail -30 $u/import.err
    x "unsloth_versions.txt ($u/model, $u/data)" $PY "$repo/benchmarks/local_preset.py" --model qwen3-0.6b \
      --seq-len 512 --rows 2000 --out $u >> "$D/unsloth_versions.txt" 2> /dev/null
    if [ "${SWEEP:-1}" = 1 ]; then
      timed sweep 1 timeout 300 $PY -m tracetui sweep --splits "$splits" --repeats 1 --allow-busy --export csv \
        -o "$D/sweep.csv" --force --runs-dir $u/runs -- $PY "$repo/examples/unsloth_lora.py" "${args[@]}" \
        2> "$D/sweep.err"
      x sweep.json $PY -m tracetui show $u/runs/*/events.jsonl --export json -o "$D/sweep.json" --force 2>> "$D/sweep.err"
      x events.jsonl.gz gzip_events $u/runs > "$D/events.jsonl.gz"
    fi
    for s in $plain_splits; do  # the user's own edit: the two literals changed in a copy
      sed -e "s/per_device_train_batch_size = 2,/per_device_train_batch_size = ${s%x*},/" \
          -e "s/gradient_accumulation_steps = 4,/gradient_accumulation_steps = ${s#*x},/" \
          "$repo/examples/unsloth_lora.py" > "$u/plain_$s.py" 2> /dev/null
      timed "plain_$s" 1 env PYTHONPATH="$repo/benchmarks/plain_timer:$PYTHONPATH" PLAIN_TIMER_OUT="$D/plain.jsonl" \
        timeout 100 $PY "$u/plain_$s.py" "${args[@]}" > "$u/plain_$s.log" 2>&1
    done
    [ -n "${DRY:-}" ] && exit 0
    for f in $u/plain_*.log $u/runs/*/*.log; do  # what Unsloth said in each run (its patching, an import-order warning)
      echo "== $f"; grep -h "imported before\|Unsloth\|Padding-free" "$f" | cut -c1-200 | sort | uniq -c
    done > "$D/unsloth_lines.txt" 2>&1
    tar -czf "$D/logs.tar.gz" -C $u --exclude='*/output' import.err runs $(ls plain_*.log) 2> /dev/null
    $PY - "$D/plain.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
for s in sorted({(r["micro_batch"], r["grad_accum"]) for r in rows}):
    run = [r for r in rows if (r["micro_batch"], r["grad_accum"]) == s]
    whole = [1000 * (b["end_s"] - a["end_s"]) for a, b in zip(run, run[1:])][2:]  # steps 4.. (3 warm-up)
    print(f"plain {s[0]}x{s[1]}: {len(run)} steps; median of steps 4-: begin-end "
          f"{statistics.median([r['wall_ms'] for r in run[3:]]):.1f} ms, end-end {statistics.median(whole):.1f} ms"
          if len(run) > 4 else f"plain {s}: {len(run)} steps")
EOF
    exit $FAILED
  ) || FAILED=1
}

h200_final_check() {  # a short built-in sweep, end to end
  sweep final_check.json $Q17 --splits 1x4,4x1 --steps 12 --warmup 2
}

h200_time_to_verdict() {  # fixed 100 steps against --until-confident 2 (checkpointing on, as recorded); the rule replayed
  local m="$Q17 --activation-checkpointing"
  x "fixed/fixed.json fixed/fixed.log fixed/runs/" $PY benchmarks/time_to_verdict.py --out "$D/fixed" --pct 2 \
    --mode fixed -- $m
  x "adaptive/adaptive.json adaptive/adaptive.log adaptive/runs/" $PY benchmarks/time_to_verdict.py \
    --out "$D/adaptive" --pct 2 --mode adaptive -- $m
  x fixed/adaptive.json cp "$D/adaptive/adaptive.json" "$D/fixed/adaptive.json"
  to compare.txt $PY benchmarks/time_to_verdict.py --out "$D/fixed" --compare
  x fixed.jsonl.gz gzip_events "$D/fixed/runs" > "$D/fixed.jsonl.gz"
  to replay.txt $PY benchmarks/replay_until_confident.py "$D/fixed.jsonl.gz" --pct 2 3 5 10
}

h200_trl_forked() {  # `tracetui sweep -- trl sft ...`: forked runs, fresh runs (--fresh), plain `trl sft` with a step timer
  to fixture.txt $PY benchmarks/trl_cli_fixture.py --model qwen3-0.6b --out "$D/fixture"
  local args=(--model_name_or_path "$D/fixture/model" --dataset_name "$D/fixture/data" --max_length 512 --use_peft
              --lora_r 16 --lora_target_modules all-linear --max_steps 12 --output_dir "$D/trl_out" --save_strategy no
              --report_to none --logging_steps 100 --bf16 true)
  for s in 1x4 4x1; do  # plain `trl sft`, a timer at on_step_end: a line of plain.jsonl per step
    x "plain.jsonl plain_$s.log" env PYTHONPATH="$PWD/benchmarks/plain_timer" PLAIN_TIMER_OUT="$D/plain.jsonl" \
      trl sft "${args[@]}" --per_device_train_batch_size "${s%x*}" --gradient_accumulation_steps "${s#*x}" \
      > "$D/plain_$s.log" 2>&1
  done
  sweep_script forked.json --splits 1x4,4x1 --repeats 2 -- trl sft "${args[@]}"
  sweep_script fresh.json --fresh --splits 1x4,4x1 --repeats 1 -- trl sft "${args[@]}"
}

h200_paired_mfu() {  # paired against unpaired verdicts (trl sft and the built-in runner); MFU of the first sweep
  to test_gpu.txt $PY -m pytest -q -p no:cacheprovider tests/test_gpu.py -k no_sync
  to local.txt $PY benchmarks/local_preset.py --model qwen3-0.6b --seq-len 512 --out "$D/local"
  sweep_script trl_ragged.json --effective-batch 8 --splits 8x1 --vary activation_checkpointing=off,on --repeats 1 \
    --allow-busy -- trl sft --model_name_or_path "$D/local/model" --dataset_name "$D/local/data" --use_peft \
    --lora_r 16 --lora_alpha 32 --lora_target_modules all-linear --max_steps 12 --max_length 512 --bf16 True \
    --dtype bfloat16 --output_dir "$D/sft" --report_to none --save_strategy no --logging_steps 1 --seed 42
  to trl_ragged_paired.txt $PY benchmarks/paired_vs_unpaired.py "$D/trl_ragged_events.jsonl.gz"
  sweep builtin_ragged.json --model qwen3-0.6b --dataset synthetic-ragged --seq-len 512 --effective-batch 8 \
    --splits 8x1 --vary activation_checkpointing=off,on --repeats 1 --steps 12 --allow-busy
  to builtin_ragged_paired.txt $PY benchmarks/paired_vs_unpaired.py "$D/builtin_ragged_events.jsonl.gz"
  sweep builtin_17b.json $Q17 $NOCK --splits 1x4,4x1 --repeats 1 --steps 20 --allow-busy
  plain --model qwen3-1.7b --seq-len 512 --split 4x1 --steps 25 --warmup 5
}

head_starts() {  # ORDER: the first built-in sweep without head starts (A) and with them (B), each timed whole
  plain --model qwen3-1.7b --seq-len 512 --split 4x1 --steps 25 --warmup 5
  local arm
  for arm in "$@"; do
    case $arm in
      A*) wall "$arm" $Q17 $NOCK --splits 1x4,2x2,4x1 --repeats 2 --steps 30 --no-head-start ;;
      B*) wall "$arm" $Q17 $NOCK --splits 1x4,2x2,4x1 --repeats 2 --steps 30 ;;
    esac
  done
}
h200_head_start_decide() { head_starts A1 B1 A2 B2; }
h200_head_start_recheck() { head_starts A1 B1 B2 A2; }

h200_lean_start() {  # the fork server's imports and the command's end; both built-in sweeps and the time to a verdict, whole
  plain --model qwen3-1.7b --seq-len 512 --split 4x1 --steps 25 --warmup 5
  # the fork server's imports in fresh interpreters, three rounds after one to warm the file cache: the optional
  # packages imported or marked absent, a full collection after them or not (the fork server's way: on, off)
  x "(the file cache warmed)" $PY benchmarks/preload_time.py --hide on --collect off > /dev/null
  local round way
  for round in 1 2 3; do
    for way in "--hide off --collect on" "--hide on --collect off" "--hide on --collect on" "--hide off --collect off"; do
      x preload.jsonl $PY benchmarks/preload_time.py $way >> "$D/preload.jsonl"
    done
  done
  wall after_3x2 $Q17 $NOCK --splits 1x4,2x2,4x1 --repeats 2 --steps 30
  wall after_eb16 $Q17 $NOCK --effective-batch 16 --splits 2x8,4x4,8x2,16x1 --repeats 1 --steps 20
  x "end.json end_timeline.jsonl" $PY benchmarks/end_timeline.py -- --export json -o "$D/end.json" --force $Q17 $NOCK \
    --effective-batch 16 --splits 8x2,16x1 --repeats 1 --steps 6 --warmup 2 --runs-dir "$D/runs/end" \
    > "$D/end_timeline.jsonl"
  # the time to a verdict: fixed 100 steps against --until-confident (5), with the benchmark's warm-up of 5 steps,
  # then --until-confident with tracetui's own warm-up (3) against the same fixed command
  to compare.txt $PY benchmarks/time_to_verdict.py --out "$D/ttv" -- $Q17 $NOCK --repeats 1
  x ttv3/adaptive.json $PY benchmarks/time_to_verdict.py --out "$D/ttv3" --warmup 3 --mode adaptive -- $Q17 $NOCK \
    --repeats 1
  x ttv3/fixed.json cp "$D/ttv/fixed.json" "$D/ttv3/fixed.json"
  to compare_warmup3.txt $PY benchmarks/time_to_verdict.py --out "$D/ttv3" --compare
}

h200_start_3() {  # forked trials against fresh interpreters, in the order A B plain B A (a drift falls on both)
  printf 'arm\torder\twall_s\texit\n' > "$D/walls.tsv"
  start_arm spawn 1; start_arm forkserver 1
  for s in 1x4 4x1; do plain --model qwen3-1.7b --seq-len 512 --split $s --steps 12 --warmup 3; done
  start_arm forkserver 2; start_arm spawn 2
}
start_arm() {  # spawn|forkserver ORDER: one sweep, its trials started that way (TRACETUI_START)
  timed "$1" "$2" env TRACETUI_START="$1" $PY -m tracetui --export json -o "$D/$1_$2.json" --force $Q17 $NOCK \
    --splits 1x4,4x1 --repeats 2 --steps 12 --warmup 3 --runs-dir "$D/runs/$1_$2" 2> "$D/$1_$2.err"
}

h200_script_start() {  # where a swept script's start goes: interpreter, the script's imports and set-up, the trainer
  plain --model qwen3-1.7b --seq-len 512 --split 4x1 --steps 25 --warmup 5
  to imports.txt $PY -c "import time; t = time.perf_counter(); import torch, transformers, trl, peft, datasets; \
from trl import SFTTrainer; print(f'imports {time.perf_counter() - t:.2f} s')"
  sweep_script script.json --splits 1x4,4x1 --repeats 1 -- $PY examples/train_lora.py --no_trace \
    --model_name_or_path qwen3-0.6b --max_steps 20
}

h200_overhead_2() {  # the probe's and TraceCallback's cost: on/off alternating every step, and their own host time
  # (the recorded readings: docs/benchmarks.md)
  local m="--model qwen3-1.7b --seq-len 512 --split 4x1 --precision bf16 --block 1"
  to probe.txt $PY benchmarks/overhead.py $m --blocks 400 --json "$D/probe.json"
  to callback.txt $PY benchmarks/overhead.py $m --blocks 200 --callback --json "$D/callback.json"
}

h200_wall_and_pinning() {  # both built-in sweeps against their steps; 4x1 in four processes under three CPU placements
  to cpu_layout.txt lscpu
  wall builtin_3x2 $Q17 $NOCK --splits 1x4,2x2,4x1 --repeats 2 --steps 30
  wall builtin_eb16 $Q17 $NOCK --effective-batch 16 --splits 2x8,4x4,8x2,16x1 --repeats 1 --steps 20
  for s in 4x1 1x4; do plain --model qwen3-1.7b --seq-len 512 --split $s --steps 30 --warmup 5; done
  sweep pin_free.json $Q17 $NOCK --splits 4x1 --repeats 4 --steps 30
  local cpus
  for cpus in 4-7 4; do  # the whole command on these vCPUs
    x "pin_$cpus.json pin_$cpus.err" taskset -c "$cpus" $PY -m tracetui --export json -o "$D/pin_$cpus.json" --force \
      $Q17 $NOCK --splits 4x1 --repeats 4 --steps 30 --runs-dir "$D/runs/pin_$cpus" 2> "$D/pin_$cpus.err"
  done
}

gpu_tests() {  # the tests that need a GPU (the probe adds no host-device synchronisation)
  to test_gpu.txt $PY -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py
}

h200x2_parallel() {  # two GPUs, different splits at the same time (--gpus 0,1); checkpointing on, as recorded
  sweep parallel.csv $Q17 --activation-checkpointing --gpus 0,1 --effective-batch 16 --splits 2x8,4x4,8x2,16x1 \
    --steps 10 --warmup 3
}

h200x2_ddp() {  # data parallel over two GPUs (--nproc-per-node 2), global effective batch 16; checkpointing on, as recorded
  sweep ddp.csv $Q17 --activation-checkpointing --nproc-per-node 2 --effective-batch 16 --splits 2x4,4x2,8x1 \
    --steps 10 --warmup 3
}

h200x2_fsdp() {  # FSDP against DDP on qwen3-8b over two GPUs; a memory limit only the sharded run fits; plain TRL under torchrun
  local m="--model qwen3-8b --seq-len 1024 --precision bf16 --nproc-per-node 2 --effective-batch 16 $NOCK --repeats 1"
  sweep fsdp.json $m --splits 1x8,2x4,4x2,8x1 --vary sharding=ddp,fsdp --steps 10 --warmup 3
  sweep fit.json $m --splits 8x1 --vary sharding=ddp,fsdp --memory-limit 86 --steps 8 --warmup 2
  local f
  for f in "" --fsdp; do  # DDP, then FSDP
    x plain.jsonl json_lines_of $PY -m torch.distributed.run --standalone --nproc-per-node 2 \
      benchmarks/plain_steps.py --model qwen3-8b --seq-len 1024 --split 4x2 --steps 10 --warmup 3 $f >> "$D/plain.jsonl"
  done
}

# the CPU benchmarks whose output docs/ cites (the recorded ones ran on a 2-core CPU machine)
trial_start_cpu() { to trial_start_cpu.txt $PY benchmarks/trial_start.py --device cpu --trials 3 --top 25; }
tui_throughput() { to tui_throughput.txt $PY benchmarks/tui_throughput.py --seconds 6; }
watch_flood() { to watch_flood.txt $PY benchmarks/watch_flood.py --events 1000000; }
ray_events() {  # the driver's events/s and memory per trial through --ray, a Ray cluster of 8 small nodes here
  to ray_events.txt $PY benchmarks/ray_events.py --nodes 8 --trials 48 --steps 2000 --costs
  x ray_events.txt $PY benchmarks/ray_events.py --nodes 8 --trials 48 --steps 100 --stall-ms 2 >> "$D/ray_events.txt" \
    2>> "$D/stderr.txt"
}

ONE_GPU="h200_qwen3-1.7b h200_after_layout h200_folders h200_search_e16 h200_search_head_starts h200_head_start_8x2 h200_head_start_8x2_b h200_neighbour h200_ray h200_ray_lanes h200_knobs h200_search h200_search_12 h200_memory_limit h200_final_check
  h200_time_to_verdict h200_trl_forked h200_paired_mfu h200_head_start_decide h200_head_start_recheck h200_lean_start
  h200_start_3 h200_script_start h200_overhead_2 h200_wall_and_pinning gpu_tests trial_start_cpu tui_throughput watch_flood
  ray_events"
TWO_GPUS="h200x2_parallel h200x2_ddp h200x2_fsdp"
NAMED_ONLY="h200_unsloth"  # needs Unsloth, which tracetui does not: run when named
ALL=" $(echo $ONE_GPU $TWO_GPUS $NAMED_ONLY) "

OUT=${1:-out}
case $ALL in
  *" $OUT "*) echo "run.sh: the output folder comes first: bash docs/results/run.sh OUT $*" >&2; exit 2 ;;
esac
shift $(( $# > 0 ? 1 : 0 ))
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  names=($ONE_GPU)
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  [ "$gpus" -ge 2 ] && names+=($TWO_GPUS)
fi
for name in "${names[@]}"; do
  case $ALL in
    *" $name "*) ;;
    *) echo "run.sh: no data set '$name'; the names:$ALL" >&2; exit 2 ;;
  esac
done
status=0
for name in "${names[@]}"; do
  D=$(cd "$CALLER" && realpath -m "$OUT/$name"); mkdir -p "$D"; : > "$D/commands.txt"
  echo "== $name -> $D" >&2
  FAILED=0
  versions
  "$name"
  [ $FAILED = 0 ] || { echo "run.sh: a command of $name failed (see $D/commands.txt)" >&2; status=1; }
done
exit $status
