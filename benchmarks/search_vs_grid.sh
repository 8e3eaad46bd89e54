#!/usr/bin/env bash
# Issue #14's bar on one H200: qwen3-1.7b preset, seq 1024, checkpointing off, effective batch 64,
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
# Needs the sweep to take its planner from tracetui.plan.make_planner (--search/--grid).
set -u
OUT=${OUT:-out}
STEPS=${STEPS:-2}
WARMUP=${WARMUP:-1}
REPEATS=${REPEATS:-1}
mkdir -p "$OUT/runs"
printf 'limit\tplanner\twall_s\texit\n' > "$OUT/walls.tsv"
for limit in 24 80; do
  for planner in search grid; do
    t0=$(date +%s.%N)
    python -m tracetui --export json -o "$OUT/${planner}_${limit}.json" --force \
      --model qwen3-1.7b --seq-len 1024 --no-activation-checkpointing --effective-batch 64 \
      --memory-limit "$limit" "--$planner" --steps "$STEPS" --warmup "$WARMUP" --repeats "$REPEATS" \
      --runs-dir "$OUT/runs" 2> "$OUT/${planner}_${limit}.err"
    code=$?
    t1=$(date +%s.%N)
    printf '%s\t%s\t%.1f\t%s\n' "$limit" "$planner" "$(echo "$t1 - $t0" | bc)" "$code" >> "$OUT/walls.tsv"
  done
done
cat "$OUT/walls.tsv"
python - "$OUT" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
for limit in (24, 80):
    for planner in ("grid", "search"):
        p = out / f"{planner}_{limit}.json"
        if not p.exists():
            print(limit, planner, "no summary"); continue
        data = json.loads(p.read_text())
        rows = data["rows"] if isinstance(data, dict) and "rows" in data else data
        ok = [r for r in rows if r.get("status") == "ok" and r.get("step_ms_median")]
        best = min(ok, key=lambda r: r["step_ms_median"]) if ok else None
        print(limit, planner, "pick:", best and best["split"], "|",
              ", ".join(f"{r['split']} {r['status']} pred {r.get('predicted_mem_gib')} peak {r.get('peak_mem_gib')}" for r in rows))
PY
