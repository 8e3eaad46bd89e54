#!/usr/bin/env bash
# Do forked trials step as fast as fresh interpreters? (issue: faster to an answer) One H200, one
# device call, the same sweep as h200_start.sh in an ABC-CBA order so that a drift of the host
# over the call falls on every arm alike:
#   spawn, forkserver (no gc.freeze), forkserver (gc.freeze), plain TRL 1x4 and 4x1,
#   forkserver (gc.freeze), forkserver (no gc.freeze), spawn
# qwen3-1.7b preset, seq 512, bf16, checkpointing off, splits 1x4,4x1, two runs each, 12 steps of
# which 3 warm-up. Each command timed from start to exit.
#   R=$OUT bash docs/results/h200_start_3.sh
set -u
R=${R:-$OUT}; mkdir -p "$R"
M="--model qwen3-1.7b --seq-len 512 --precision bf16 --no-activation-checkpointing --splits 1x4,4x1 --repeats 2 --steps 12 --warmup 3"
printf 'arm\torder\twall_s\texit\n' > "$R/walls.tsv"
one() {  # arm order start freeze
  t0=$(date +%s.%N)
  TRACETUI_START=$3 TRACETUI_FORK_FREEZE=$4 timeout 140 python3 -m tracetui --export json -o "$R/$1_$2.json" $M \
    --runs-dir "/tmp/runs_$1_$2" > "$R/$1_$2.out" 2>&1
  code=$?
  t1=$(date +%s.%N)
  python3 -c "print('$1\t$2\t%.1f\t$code' % ($t1 - $t0))" >> "$R/walls.tsv"
  gzip -c /tmp/runs_$1_$2/*/events.jsonl > "$R/$1_$2_events.jsonl.gz"
}
one spawn 1 spawn 0
one fork 1 forkserver 0
one forkfreeze 1 forkserver 1
for s in 1x4 4x1; do
  timeout 90 python3 benchmarks/plain_steps.py --model qwen3-1.7b --seq-len 512 --split $s --steps 12 --warmup 3 \
    >> "$R/plain.jsonl" 2> "$R/plain_$s.err"
done
one forkfreeze 2 forkserver 1
one fork 2 forkserver 0
one spawn 2 spawn 0
cat "$R/walls.tsv"
python3 - "$R" <<'PY'
import json, sys, pathlib
R = pathlib.Path(sys.argv[1])
for p in sorted(R.glob("*_[12].json")):
    rows = json.loads(p.read_text())["splits"]
    print(p.stem, [(r["split"], r.get("step_ms_median"), r.get("step_ms_median_runs") or "") for r in rows])
print((R / "plain.jsonl").read_text() if (R / "plain.jsonl").exists() else "no plain")
PY
