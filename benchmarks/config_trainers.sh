#!/usr/bin/env bash
# The config-file trainers for real, on the CPU and offline: builds an axolotl, a LLaMA-Factory
# and a transformers 4.56 virtual environment from the package index, writes a tiny local model,
# tokenizer and data set into each (benchmarks/config_trainers_fixtures.py), and runs for each
# trainer first its own plain command, then the same command under `tracetui sweep`:
#
#   axolotl train axolotl.yml
#   tracetui sweep --export csv --splits 1x4,2x2 --repeats 1 -- $ENVS/axolotl/bin/axolotl train axolotl.yml
#   llamafactory-cli train llamafactory.yaml
#   tracetui sweep --export csv --splits 1x4,2x2 --repeats 1 -- $ENVS/llamafactory/bin/llamafactory-cli train llamafactory.yaml
#   trl sft ...   (transformers 4.56.2, TRL 0.23.1: the oldest transformers the probe supports)
#   tracetui sweep --export csv --splits 1x4,2x2 --repeats 1 -- $ENVS/tf456/bin/trl sft ...
#
# Writes under $OUT: NAME.plain.log (the plain command's output), NAME.sweep.csv (the sweep's
# summary), NAME.sweep.err (its stderr), NAME.dry-run.txt (each trial's command and changed keys),
# NAME.freeze.txt (the environment's packages), and summary.tsv (name, what, exit status, seconds).
#
# How the environments are built (each skipped when it exists; REBUILD=1 builds it again):
#   - torch 2.13.0 first (this machine has its CPU build locally; pip then keeps it rather than
#     pulling a CUDA torch for the trainer), then the trainer with torch==2.13.0 on the same line.
#   - axolotl 0.19.0 asks torch<=2.13.0,>=2.11.0: the CPU torch 2.13.0 satisfies it.
#   - llamafactory 0.9.5 asks torchvision and torchaudio; the index's builds of both for Linux
#     are CUDA builds that do not load beside a CPU torch (torchvision: "RuntimeError: operator
#     torchvision::nms does not exist", raised through every `import transformers`; torchaudio:
#     "OSError: libc10_cuda.so: cannot open shared object file"). LLaMA-Factory imports neither
#     for text training except `import torchaudio` at the top of its data/mm_plugin.py, so
#     torchvision is uninstalled and torchaudio's compiled libraries are moved aside (it then
#     imports without its extension, as a build without one does).
#   - tf456: transformers 4.56.*, TRL 0.23.*, PEFT 0.17.* (the releases of that time), accelerate,
#     datasets.
#
# What each command needs here:
#   - HF_HUB_OFFLINE=1 throughout (local files only).
#   - AXOLOTL_DO_NOT_TRACK=1: axolotl's telemetry (PostHog) otherwise waits at exit for an upload
#     that cannot happen offline; a plain `axolotl train` then never exits after training.
#   - axolotl train (its default --launcher accelerate) execs `accelerate launch -m
#     axolotl.cli.train CFG`, finding `accelerate` on PATH: the plain command runs with the
#     environment's bin first on PATH, as an activated environment has it; the sweep is typed
#     with the program's full path, and tracetui runs it as if its environment were activated.
#
# Usage: bash benchmarks/config_trainers.sh [axolotl] [llamafactory] [tf456]   (default: all three)
#   ENVS (/work/envs), WORK (/tmp/config_trainers: fixtures, trainer outputs, sweep runs),
#   OUT (out/config_trainers), STEPS (12: max_steps of each run), TRACETUI (the command that runs
#   tracetui; default: python3's interpreter by its full path, -m tracetui), REBUILD.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ENVS=${ENVS:-/work/envs}
WORK=${WORK:-/tmp/config_trainers}
OUT=${OUT:-out/config_trainers}
STEPS=${STEPS:-12}
# tracetui as installed for this python3, by its interpreter's path
TRACETUI=${TRACETUI:-"$(python3 -c 'import sys; print(sys.executable)') -m tracetui"}
TORCH=torch==2.13.0
SPLITS=1x4,2x2
mkdir -p "$OUT" "$WORK"
OUT=$(cd "$OUT" && pwd)
export HF_HUB_OFFLINE=1 AXOLOTL_DO_NOT_TRACK=1
[ -f "$OUT/summary.tsv" ] || printf 'name\twhat\texit\tseconds\n' > "$OUT/summary.tsv"

# timed NAME WHAT LOG CMD...: run CMD (output to LOG), add a line to summary.tsv
timed() {
  local name=$1 what=$2 log=$3; shift 3
  local t0 t1 code
  t0=$(date +%s.%N)
  "$@" > "$log" 2>&1
  code=$?
  t1=$(date +%s.%N)
  awk -v n="$name" -v w="$what" -v c="$code" -v a="$t0" -v b="$t1" 'BEGIN { printf "%s\t%s\t%s\t%.1f\n", n, w, c, b - a }' \
    | tee -a "$OUT/summary.tsv"
  return $code
}

build() {  # build NAME: the virtual environment $ENVS/NAME
  local name=$1 venv=$ENVS/$1
  if [ -x "$venv/bin/python" ] && [ -z "${REBUILD:-}" ]; then
    echo "$name: $venv exists (REBUILD=1 builds it again)"
  else
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install "$TORCH" || return 1
    case $name in
      axolotl)
        "$venv/bin/pip" install "$TORCH" axolotl==0.19.0 || return 1 ;;
      llamafactory)
        "$venv/bin/pip" install "$TORCH" llamafactory==0.9.5 || return 1
        "$venv/bin/pip" uninstall -y torchvision
        local lib
        lib=$("$venv/bin/python" -c 'import importlib.util as u, os; print(os.path.join(os.path.dirname(u.find_spec("torchaudio").origin), "lib"))')
        mkdir -p "$venv/torchaudio-cuda-libs" && mv "$lib"/*.so "$venv/torchaudio-cuda-libs/" ;;
      tf456)
        "$venv/bin/pip" install "$TORCH" "transformers==4.56.*" "trl==0.23.*" "peft==0.17.*" accelerate datasets \
          || return 1 ;;
    esac
  fi
  "$venv/bin/pip" freeze > "$OUT/$name.freeze.txt"
  "$venv/bin/pip" check >> "$OUT/$name.freeze.txt" 2>&1 || true  # llamafactory: torchvision is missing on purpose
}

fixtures() {  # fixtures NAME: model, tokenizer, data and configs in $WORK/NAME
  rm -rf "${WORK:?}/$1"
  "$ENVS/$1/bin/python" "$HERE/config_trainers_fixtures.py" "$WORK/$1" --steps "$STEPS" > "$OUT/$1.fixtures.log" 2>&1
}

activated() {  # activated NAME CMD...: CMD with the environment's bin first on PATH
  local name=$1; shift
  PATH="$ENVS/$name/bin:$PATH" "$@"
}

sweep() {  # sweep NAME CMD...: tracetui's dry run, then its sweep, of CMD in $WORK/NAME
  local name=$1; shift
  local tag=$name
  $TRACETUI sweep --dry-run --splits "$SPLITS" --repeats 1 -- "$@" > "$OUT/$tag.dry-run.txt" 2>&1
  timed "$tag" sweep "$OUT/$tag.sweep.err" $TRACETUI sweep --export csv -o "$OUT/$tag.sweep.csv" --force \
    --splits "$SPLITS" --repeats 1 --runs-dir "$WORK/$name/runs" -- "$@"
  [ -f "$OUT/$tag.sweep.csv" ] && python3 -c '
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    print(sys.argv[2], r["split"], r["status"], "median step", r["step_ms_median"], "ms;", r["comparison"] or r["message"])
' "$OUT/$tag.sweep.csv" "$tag"
}

trl_sft() {  # the tf456 run: TRL's own command line on the fixtures' prompt/completion rows
  local w=$WORK/tf456
  "$ENVS/tf456/bin/trl" sft --model_name_or_path "$w/model" --dataset_name "$w/data/sft" --output_dir "$w/trl-out" \
    --use_peft --lora_r 8 --lora_alpha 16 --lora_target_modules q_proj k_proj v_proj o_proj \
    --max_length 256 --max_steps "$STEPS" --logging_steps 1 --save_strategy no --report_to none --bf16 false "$@"
}

run() {  # run NAME: build, fixtures, plain command, sweep
  local name=$1
  build "$name" > "$OUT/$name.build.log" 2>&1 || { echo "$name: build failed: see $OUT/$name.build.log"; tail -n 20 "$OUT/$name.build.log"; return 1; }
  fixtures "$name" || { echo "$name: fixtures failed: see $OUT/$name.fixtures.log"; return 1; }
  cd "$WORK/$name" || return 1
  case $name in
    axolotl)
      timed axolotl plain "$OUT/axolotl.plain.log" activated axolotl axolotl train axolotl.yml
      sweep axolotl "$ENVS/axolotl/bin/axolotl" train axolotl.yml ;;
    llamafactory)
      timed llamafactory plain "$OUT/llamafactory.plain.log" "$ENVS/llamafactory/bin/llamafactory-cli" train llamafactory.yaml
      sweep llamafactory "$ENVS/llamafactory/bin/llamafactory-cli" train llamafactory.yaml ;;
    tf456)
      timed tf456 plain "$OUT/tf456.plain.log" trl_sft --per_device_train_batch_size 1 --gradient_accumulation_steps 4
      local w=$WORK/tf456
      sweep tf456 "$ENVS/tf456/bin/trl" sft --model_name_or_path "$w/model" --dataset_name "$w/data/sft" \
        --output_dir "$w/trl-out" --use_peft --lora_r 8 --lora_alpha 16 --lora_target_modules q_proj k_proj v_proj o_proj \
        --max_length 256 --max_steps "$STEPS" --logging_steps 1 --save_strategy no --report_to none --bf16 false ;;
  esac
  cd - > /dev/null || return 1
  return 0
}

names=("$@"); [ ${#names[@]} -eq 0 ] && names=(axolotl llamafactory tf456)
for name in "${names[@]}"; do
  run "$name"
done
cat "$OUT/summary.tsv"
