"""Fixed steps against adaptive stopping: same ranking, for how much GPU time?

Runs the same sweep twice through the real CLI: once with a fixed ``--steps`` for every split,
once with ``--until-confident`` (``--steps`` then only caps a split). Prints, side by side, each
split's measured steps and median, the ranking of each, and the training time (sum of the runs'
``train_runtime``) of each, with their ratio. Goal: the same ranking from at most a third of the
time.

    python benchmarks/time_to_verdict.py --out DIR -- --model qwen3-1.7b --seq-len 512 --precision bf16
    python benchmarks/time_to_verdict.py --out /tmp/ttv --steps 40 -- --seq-len 64     # CPU, tiny

``--mode fixed`` or ``--mode adaptive`` runs one half only (to run both halves at once on two GPUs);
``--compare`` then reads both JSON files from ``--out``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

SPLITS = "1x4,2x2,4x1"


def run(out: Path, name: str, extra: list[str], flags: list[str]) -> dict:
    path = out / f"{name}.json"
    cmd = [sys.executable, "-m", "tracetui", "--export", "json", "-o", str(path), "--splits", SPLITS,
           "--runs-dir", str(out / "runs"), *extra, *flags]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    (out / f"{name}.log").write_text(" ".join(cmd) + "\n" + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    data = json.loads(path.read_text())
    data["wall_s"] = wall
    path.write_text(json.dumps(data, indent=1))
    return data


def compare(fixed: dict, adaptive: dict) -> bool:
    def by_split(d):
        return {s["split"]: s for s in d["splits"]}

    f, a = by_split(fixed), by_split(adaptive)
    rank_f = sorted(f, key=lambda k: f[k]["step_ms_median"])
    rank_a = sorted(a, key=lambda k: a[k]["step_ms_median"])
    print(f"{'split':>6} | {'fixed steps':>11} {'median ms':>10} {'train s':>8} | {'adaptive steps':>14} "
          f"{'median ms':>10} {'train s':>8}  stopped")
    for k in rank_f:
        print(f"{k:>6} | {f[k]['steps_measured']:>11} {f[k]['step_ms_median']:>10.1f} {f[k]['train_runtime_s']:>8.1f} | "
              f"{a[k]['steps_measured']:>14} {a[k]['step_ms_median']:>10.1f} {a[k]['train_runtime_s']:>8.1f}  "
              f"{a[k].get('stop_reason') or 'at the cap'}")
    tf = sum(s["train_runtime_s"] for s in f.values())
    ta = sum(s["train_runtime_s"] for s in a.values())
    same = rank_f == rank_a
    print(f"ranking fixed:    {' < '.join(rank_f)}   ({fixed['verdict']})")
    print(f"ranking adaptive: {' < '.join(rank_a)}   ({adaptive['verdict']})")
    print(f"training time: fixed {tf:.1f} s, adaptive {ta:.1f} s, ratio {ta / tf:.3f}; "
          f"whole commands {fixed['wall_s']:.0f} s vs {adaptive['wall_s']:.0f} s")
    ok = same and ta <= tf / 3
    print(f"goal (same ranking, at most a third of the time): {'met' if ok else 'NOT met'}")
    whole = adaptive["wall_s"] / fixed["wall_s"]
    print(f"whole commands: adaptive / fixed = {whole:.3f}; goal (same ranking, at most a quarter): "
          f"{'met' if same and whole <= 0.25 else 'NOT met'}")
    return ok


def main() -> int:
    argv = sys.argv[1:]
    own, flags = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=5)
    from tracetui.core.config import UNTIL_CONFIDENT_PCT

    p.add_argument("--pct", type=float, default=UNTIL_CONFIDENT_PCT, help="--until-confident's PCT (its default)")
    p.add_argument("--min-steps", type=int, default=10)
    p.add_argument("--mode", choices=("both", "fixed", "adaptive"), default="both")
    p.add_argument("--compare", action="store_true")
    ns = p.parse_args(own)
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    base = ["--steps", str(ns.steps), "--warmup", str(ns.warmup)]
    if not ns.compare:
        if ns.mode in ("both", "fixed"):
            run(out, "fixed", base, flags)
        if ns.mode in ("both", "adaptive"):
            run(out, "adaptive", base + ["--until-confident", str(ns.pct), "--min-steps", str(ns.min_steps)], flags)
    if ns.mode == "both" or ns.compare:
        ok = compare(json.loads((out / "fixed.json").read_text()), json.loads((out / "adaptive.json").read_text()))
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
