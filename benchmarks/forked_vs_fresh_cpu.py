"""Forked and fresh runs of one CPU sweep, side by side, with a CPU load beside them.

Starts ``--load`` busy-loop processes (in this command's session, as a job started from the
user's shell would be), then runs the same small sweep forked from tracetui's fork server and
fresh, alternately (A B B A, ``--rounds`` times), and prints for each split the median step of
each sweep, the median of all measured steps of each way, their ratio (forked / fresh), and each
sweep's answer. ``--kind trl``: ``tracetui sweep -- trl sft`` of a tiny local model
(``benchmarks/trl_cli_fixture.py``), fresh being ``--fresh``; ``--kind builtin``: the built-in
sweep, fresh being ``TRACETUI_START=spawn``. Verdicts are given though the machine is busy
(``--allow-busy``): the point is whether the two ways agree under the same load.

    python benchmarks/forked_vs_fresh_cpu.py --kind trl --rounds 1
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _sweep(kind: str, way: str, ns, fixture: Path, out: Path) -> dict:
    summary, steps = out / "summary.csv", out / "steps.csv"
    common = ["--splits", ns.splits, "--repeats", "1", "--warmup", str(ns.warmup), "--allow-busy",
              "--export", "csv", "-o", str(summary), "--steps-csv", str(steps), "--force",
              "--runs-dir", str(out / "runs")]
    env = dict(os.environ)
    if kind == "trl":
        cmd = [sys.executable, "-m", "tracetui", "sweep", *common, *(["--fresh"] if way == "fresh" else []), "--",
               "trl", "sft", "--model_name_or_path", str(fixture / "model"), "--dataset_name", str(fixture / "data"),
               "--use_peft", "--max_steps", str(ns.steps), "--output_dir", str(out / "sft"), "--max_length",
               str(ns.seq_len), "--report_to", "none", "--save_strategy", "no", "--logging_steps", "1000",
               "--use_cpu", "--bf16", "false"]
    else:
        cmd = [sys.executable, "-m", "tracetui", *common, "--steps", str(ns.steps), "--seq-len", str(ns.seq_len)]
        if way == "fresh":
            env["TRACETUI_START"] = "spawn"
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    by_split: dict[str, list[float]] = {}
    if steps.exists():
        with open(steps, newline="") as fh:
            for row in csv.DictReader(fh):
                if row["warmup"] not in ("True", "true", "1") and row["wall_ms"]:
                    by_split.setdefault(row["split"], []).append(float(row["wall_ms"]))
    answer = [line.removeprefix("tracetui: ") for line in proc.stderr.splitlines()
              if line.startswith("tracetui: effective batch") or " ms/step" in line or "busy" in line]
    return {"way": way, "status": proc.returncode, "wall_s": wall, "steps": by_split, "answer": answer,
            "tail": proc.stderr.strip().splitlines()[-3:]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--kind", choices=("trl", "builtin"), default="trl")
    p.add_argument("--splits", default="2x2,4x1")
    p.add_argument("--steps", type=int, default=14)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--rounds", type=int, default=1, help="A B B A blocks (forked first in each)")
    p.add_argument("--load", type=int, default=1, help="busy-loop processes beside the sweeps")
    p.add_argument("--fixture", default="", help="a trl_cli_fixture.py folder (else one is made)")
    ns = p.parse_args()

    work = Path(tempfile.mkdtemp(prefix="fvf-"))
    fixture = Path(ns.fixture) if ns.fixture else work / "fixture"
    if ns.kind == "trl" and not (fixture / "model").exists():
        subprocess.run([sys.executable, str(HERE / "trl_cli_fixture.py"), "--model", "tiny", "--out", str(fixture),
                        "--rows", "128", "--words", "300"], check=True, capture_output=True)
    order = ["forked", "fresh", "fresh", "forked"] * ns.rounds
    loads = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(ns.load)]
    results = []
    try:
        for i, way in enumerate(order):
            out = work / f"{i}-{way}"
            out.mkdir()
            r = _sweep(ns.kind, way, ns, fixture, out)
            results.append(r)
            medians = " ".join(f"{s} {statistics.median(v):.0f}" for s, v in sorted(r["steps"].items()))
            print(f"sweep {i + 1} {way}: {medians or 'no steps'} ms (median step); {r['wall_s']:.0f} s; "
                  f"exit {r['status']}", flush=True)
            if not r["steps"]:
                print("  " + "\n  ".join(r["tail"]), flush=True)
    finally:
        for load in loads:
            load.kill()
            load.wait()

    splits = sorted({s for r in results for s in r["steps"]})
    print(f"\n{ns.kind}: {ns.splits}, {ns.steps} steps ({ns.warmup} warm-up), {ns.load} busy loop(s) beside; "
          f"order {' '.join(order)}")
    print(f"{'split':>6} | {'forked: each sweep':>22} | {'fresh: each sweep':>22} | {'forked':>7} | {'fresh':>7} "
          "| ratio")
    for s in splits:
        each = {w: [statistics.median(r["steps"][s]) for r in results if r["way"] == w and s in r["steps"]]
                for w in ("forked", "fresh")}
        pooled = {w: [x for r in results if r["way"] == w for x in r["steps"].get(s, [])] for w in ("forked", "fresh")}
        if not pooled["forked"] or not pooled["fresh"]:
            print(f"{s:>6} | missing steps")
            continue
        a, b = statistics.median(pooled["forked"]), statistics.median(pooled["fresh"])
        print(f"{s:>6} | {' '.join(f'{x:.0f}' for x in each['forked']):>22} | "
              f"{' '.join(f'{x:.0f}' for x in each['fresh']):>22} | {a:7.0f} | {b:7.0f} | {a / b:.2f}")
    print("\nanswers:")
    for i, r in enumerate(results):
        for line in r["answer"]:
            print(f"  sweep {i + 1} {r['way']}: {line}")
    print(f"\n(runs kept in {work})")


if __name__ == "__main__":
    main()
