#!/usr/bin/env bash
# The search against the grid on one H200: qwen3-1.7b preset, seq 1024, checkpointing off, effective batch 64,
# --memory-limit 24 (an L4-sized card) and 80: the full grid against the search, each a whole
# command, timed. Writes under $OUT: {grid,search}_{24,80}.json (summaries: predicted_mem_gib
# beside peak_mem_gib, why, status skipped/oom), .err (the command's stderr: the planner's line,
# verdict, recommendation), runs/ (events), and walls.tsv (limit, planner, whole-command seconds).
#
# Steps: one warm-up and one measured step per run (--steps 2 --warmup 1 --repeats 1). Why so few:
# the whole script must fit in about 9 minutes, and at eb 64 / seq 1024 the grid's 1x64 takes
# roughly 20 s a step and 2x32 about 10 s, while every run also pays about 20-25 s to start
# (imports, building the model); the two grids alone are 14 runs. One measured step gives no
# interval (the verdict then says "too few steps"): compare the picks by step_ms_median, and the
# wall times. STEPS, WARMUP and REPEATS override for a longer check (then the search's share of
# the grid's time falls: it skips the slow small micro-batches, whose steps dominate the grid).
# Needs the sweep to take its planner from tracetui.planning.plan.make_planner (--search/--grid).
# Usage: bash benchmarks/search_vs_grid.sh [LIMIT:PLANNER:SECONDS ...]   (default: all four, 300 s each)
set -u
OUT=${OUT:-out}
STEPS=${STEPS:-2}
WARMUP=${WARMUP:-1}
REPEATS=${REPEATS:-1}
R=$(mktemp -d /tmp/search_vs_grid.XXXXXX); mkdir -p "$R/runs"  # this run's alone, so the archive holds nothing older
printf 'limit\tplanner\twall_s\texit\n' > "$OUT/walls.tsv"
jobs=("$@"); [ ${#jobs[@]} -eq 0 ] && jobs=(24:search:300 24:grid:300 80:search:300 80:grid:300)
for job in "${jobs[@]}"; do
  IFS=: read -r limit planner secs <<< "$job"
  t0=$(date +%s.%N)
  timeout "$secs" python -m tracetui --export json -o "$R/${planner}_${limit}.json" --force \
    --model qwen3-1.7b --seq-len 1024 --no-activation-checkpointing --effective-batch 64 \
    --memory-limit "$limit" "--$planner" --steps "$STEPS" --warmup "$WARMUP" --repeats "$REPEATS" \
    --runs-dir "$R/runs/${planner}_${limit}" 2> "$R/${planner}_${limit}.err"
  code=$?
  t1=$(date +%s.%N)
  python3 -c "print('$limit\t$planner\t%.1f\t$code' % ($t1 - $t0))" >> "$OUT/walls.tsv"
done
cat "$OUT/walls.tsv"
python3 - "$R" <<'PY' | tee "$OUT/picks.txt"
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
for p in sorted(out.glob("*.json")):
    rows = json.loads(p.read_text())["splits"]
    ok = [r for r in rows if r.get("status") == "ok" and r.get("step_ms_median")]
    best = min(ok, key=lambda r: r["step_ms_median"]) if ok else None
    print(p.stem, "pick:", best and best["split"])
    for r in rows:
        print("   ", r["split"], r["status"], "step", r.get("step_ms_median"), "pred", r.get("predicted_mem_gib"),
              "peak", r.get("peak_mem_gib"), "|", r.get("why") or "", "|", (r.get("message") or "")[:90])
PY
tar -czf "$OUT/search_vs_grid.tar.gz" -C "$R" .
