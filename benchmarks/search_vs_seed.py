"""The search against the seed's method, in one call: time to the answer, and whether it agrees.

The seed's method: every split of the effective batch, ``--grid``, 100 steps each, one run per
split. The search: ``--search`` at tracetui's defaults (adaptive warm-up, its own steps and
repeats). Both are whole commands, timed from outside (start to exit), on the same shape, one
after the other (the search first; one of each: the order is said, not balanced). Prints one
JSON line: each command's wall time, their ratio (the bar: search / seed at most 1/20), each
one's pick (the fastest split that finished, by median step) and its recommendation line, and
whether the picks agree; and the verdict lines, to read whether they say "paired".

    python benchmarks/search_vs_seed.py --out /tmp/svs -- --model qwen3-0.6b --seq-len 1024 \\
        --effective-batch 16 --no-activation-checkpointing
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

#: the seed's method: every split, 100 steps, one run each
SEED = ["--grid", "--steps", "100", "--warmup", "3", "--repeats", "1"]
SEARCH = ["--search"]


def timed(name: str, out: Path, args: list[str], planner: list[str], limit_s: float) -> dict:
    summary = out / f"{name}.json"
    cmd = [sys.executable, "-m", "tracetui", "--export", "json", "-o", str(summary), "--force",
           "--runs-dir", str(out / "runs" / name), *planner, *args]
    t0 = time.perf_counter()
    with open(out / f"{name}.err", "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        try:
            code = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:  # stopped as a user would (SIGTERM): it writes what it measured
            proc.terminate()
            proc.wait()
            code = "timeout"
    wall = time.perf_counter() - t0
    got: dict = {"command": " ".join(cmd[1:]), "exit": code, "wall_s": round(wall, 1)}
    if summary.exists():
        data = json.loads(summary.read_text())
        ok = [r for r in data["splits"] if r.get("status") == "ok" and r.get("step_ms_median")]
        best = min(ok, key=lambda r: r["step_ms_median"]) if ok else None
        got.update(pick=best and best["split"], runs=sum(r.get("runs") or 0 for r in data["splits"]),
                   medians={r["split"]: r["step_ms_median"] for r in ok},
                   skipped={r["split"]: r.get("why") for r in data["splits"] if r.get("status") == "skipped"},
                   verdict=data.get("verdict"), recommendation=data.get("recommendation"))
    return got


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--limit", type=float, default=540.0, help="seconds each command may take")
    p.add_argument("args", nargs=argparse.REMAINDER)
    ns = p.parse_args()
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    search = timed("search", out, args, SEARCH, ns.limit)
    seed = timed("seed", out, args, SEED, ns.limit)
    print(json.dumps({
        "shape": " ".join(args), "order": "search, then seed",
        "search_over_seed": round(search["wall_s"] / seed["wall_s"], 3) if seed["exit"] == 0 else None,
        "same_pick": search.get("pick") == seed.get("pick") if search.get("pick") else None,
        "search": search, "seed": seed}))


if __name__ == "__main__":
    main()
