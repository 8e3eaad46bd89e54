#!/usr/bin/env bash
# One H200, one device call: issue #15's two built-in sweeps, before and after head starts and
# the fork server's package table computed beside its imports. Each whole command is timed
# against the summed time of the steps it measured (benchmarks/wall_vs_steps.py); "before" is the
# code of commit 6bc6329 (OLD: a checkout of it), "after" the code of the commit that adds this
# file (run from its root). qwen3-1.7b, seq 512, bf16, checkpointing off:
#   1x4,2x2,4x1 two runs each, 30 steps; effective batch 16, 2x8,4x4,8x2,16x1, 20 steps.
# Plain TRL first (benchmarks/plain_steps.py, 4x1 and 1x4): the same training without tracetui,
# which also reads the libraries into the file cache for both arms alike.
#   OLD=/path/to/6bc6329 R=$OUT bash docs/results/h200_head_start.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
NEW=$PWD; OLD=${OLD:?a checkout of commit 6bc6329}
M="--model qwen3-1.7b --seq-len 512 --precision bf16 --no-activation-checkpointing"
for s in 4x1 1x4; do
  timeout 100 python3 benchmarks/plain_steps.py --model qwen3-1.7b --seq-len 512 --split $s --steps 25 --warmup 5 \
    2> "$R/plain_$s.err" | tee -a "$R/plain.jsonl"
done
arm() {  # NAME CODE-ROOT ARGS...: one whole command of the code at CODE-ROOT
  local name=$1 root=$2; shift 2
  (cd "$root" && PYTHONPATH=$root:/tmp/site python3 "$NEW/benchmarks/wall_vs_steps.py" --name "$name" \
    --runs-dir "/tmp/hs_$name" -- --export json -o "$R/$name.json" "$@") | tee -a "$R/wall_vs_steps.jsonl"
}
S1="$M --splits 1x4,2x2,4x1 --repeats 2 --steps 30"
S2="$M --effective-batch 16 --splits 2x8,4x4,8x2,16x1 --repeats 1 --steps 20"
arm before_3x2 "$OLD" $S1
arm after_3x2 "$NEW" $S1
arm before_eb16 "$OLD" $S2
arm after_eb16 "$NEW" $S2
tar -czf "$R/runs.tar.gz" /tmp/hs_* 2>/dev/null
