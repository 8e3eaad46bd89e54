# sourced by h200_head_start*.sh: one whole command of the code at a root, timed against its steps
M="--model qwen3-1.7b --seq-len 512 --precision bf16 --no-activation-checkpointing"
NEW=$PWD; OLD=${OLD:?a checkout of commit 6bc6329}
arm() {  # NAME CODE-ROOT ARGS...
  local name=$1 root=$2; shift 2
  (cd "$root" && PYTHONPATH=$root:/tmp/site python3 "$NEW/benchmarks/wall_vs_steps.py" --name "$name" \
    --runs-dir "/tmp/hs_$name" -- --export json -o "$R/$name.json" "$@") | tee -a "$R/wall_vs_steps.jsonl"
}
plain() {  # SPLIT...: the same training without tracetui
  for s in "$@"; do
    timeout 100 python3 benchmarks/plain_steps.py --model qwen3-1.7b --seq-len 512 --split $s --steps 25 --warmup 5 \
      2> "$R/plain_$s.err" | tee -a "$R/plain.jsonl"
  done
}
