"""Does a run step at the same speed with a built run waiting beside it on the same GPU?

A head start (tracetui's default) builds the next run while the one before takes its warm-up
steps; the next run then waits, built (its CUDA context and model on the device, its process
blocked), while the one before measures its steps. This measures that condition on its own, with
no tracetui in the measured process: plain TRL (``plain_steps.py``) of one split, alone or with a
second ``plain_steps.py --hold`` process of the same shape built and waiting beside it, in pairs
whose order alternates (alone first, then beside first), so that a drift of the machine falls on
both. One JSON line per run, then one of the pairs' ratios (beside / alone).

    python benchmarks/neighbour.py --pairs 8 -- --model llama-3.2-1b --seq-len 512 --split 8x2 --steps 40 --warmup 5
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

PLAIN = [sys.executable, str(Path(__file__).with_name("plain_steps.py"))]


def measured(args: list[str]) -> dict:
    """One plain run's JSON line."""
    out = subprocess.run(PLAIN + args, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def beside(args: list[str]) -> dict:
    """One plain run with a second one built and waiting beside it (``--hold``)."""
    held = subprocess.Popen(PLAIN + args + ["--hold"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = held.stdout.readline()
        if not line.strip().startswith('{"ready"'):
            raise SystemExit(f"neighbour.py: the waiting run did not get ready (exit {held.wait()})")
        return measured(args)
    finally:
        held.stdin.close()
        held.wait(timeout=120)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pairs", type=int, default=8)
    p.add_argument("plain", nargs=argparse.REMAINDER, help="-- then plain_steps.py's arguments")
    ns = p.parse_args()
    args = ns.plain[1:] if ns.plain[:1] == ["--"] else ns.plain
    ratios = []
    for i in range(ns.pairs):
        got = {}
        for how in (("alone", "beside") if i % 2 == 0 else ("beside", "alone")):
            got[how] = (measured if how == "alone" else beside)(args)
            print(json.dumps({"pair": i, "how": how, **got[how]}), flush=True)
        ratios.append(got["beside"]["median_ms"] / got["alone"]["median_ms"])
    logs = sorted(math.log(r) for r in ratios)
    print(json.dumps({"pairs": len(ratios), "beside_over_alone": [round(r, 4) for r in ratios],
                      "median_ratio": round(statistics.median(ratios), 4),
                      "geomean_ratio": round(math.exp(statistics.fmean(logs)), 4),
                      "beside_faster_in": sum(r < 1 for r in ratios)}), flush=True)


if __name__ == "__main__":
    main()
