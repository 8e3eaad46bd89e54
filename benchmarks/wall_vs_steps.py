"""A whole tracetui command's wall time against the time of the steps it measured.

Runs ``python -m tracetui ARGS --runs-dir DIR`` once, timed from start to exit, then reads the
sweep's event log and prints one JSON line: the command's wall time, the summed time of every
step (warm-up included), their ratio (the issue's bar: at most 1.15), and where the rest went:
each run's start (asked for, to its first step: from its ``run_stage`` events, split into
stages) and what lies outside every run (tracetui's own start before the first run, its end
after the last).

    python benchmarks/wall_vs_steps.py --runs-dir /tmp/wvs -- --export json -o /tmp/a.json \\
        --model qwen3-1.7b --seq-len 512 --splits 1x4,2x2,4x1 --repeats 2 --steps 30
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs-dir", required=True)
    p.add_argument("--name", default="sweep")
    p.add_argument("args", nargs=argparse.REMAINDER)
    ns = p.parse_args()
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    cmd = [sys.executable, "-m", "tracetui", *args, "--runs-dir", ns.runs_dir]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    t1 = time.time()
    logs = sorted(Path(ns.runs_dir).glob("*/events.jsonl"), key=lambda q: q.stat().st_mtime)
    events = [json.loads(line) for line in logs[-1].read_text().splitlines()] if logs else []
    steps = [e for e in events if e["type"] == "step"]
    summed = sum(e["wall_ms"] for e in steps) / 1000
    runs: dict[str, dict] = {}
    for e in events:
        r = runs.setdefault(e.get("run_id", ""), {"stages": {}})
        if e["type"] == "run_stage":
            r["stages"][e["stage"]] = e["elapsed_s"]
            r.setdefault("asked_t", e["t"] - e["elapsed_s"])
        elif e["type"] == "step" and "first_step_end_t" not in r:
            r["first_step_end_t"] = e["t"]
            r["first_step_s"] = e["wall_ms"] / 1000
        elif e["type"] in ("run_finished", "run_failed"):
            r["end_t"] = e["t"]
    starts = {}
    for rid, r in runs.items():
        if "asked_t" in r and "first_step_end_t" in r:
            # asked for -> its first step began (the first step itself is counted in the steps)
            starts[rid.split("/")[-1]] = round(r["first_step_end_t"] - r["first_step_s"] - r["asked_t"], 2)
    asked = [r["asked_t"] for r in runs.values() if "asked_t" in r]
    ends = [r["end_t"] for r in runs.values() if "end_t" in r]
    print(json.dumps({
        "name": ns.name, "exit": proc.returncode, "wall_s": round(t1 - t0, 1), "steps_s": round(summed, 1),
        "wall_over_steps": round((t1 - t0) / summed, 3) if summed else None, "steps": len(steps),
        "before_first_run_s": round(min(asked) - t0, 1) if asked else None,
        "after_last_run_s": round(t1 - max(ends), 1) if ends else None,
        "start_to_first_step_s": starts,
        "stages_of_first_run": next((r["stages"] for r in runs.values() if r["stages"]), {}),
        "stderr_tail": proc.stderr.strip().splitlines()[-3:],
    }))


if __name__ == "__main__":
    main()
