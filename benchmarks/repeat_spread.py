"""How far apart fresh runs of one split are within one command, from sweeps' event logs.

For each log (one command), each split's runs in order, their medians of the measured steps
(rank 0) and the log ratio of each split's second run to its first; then, over all the logs, the
spread of those ratios (standard deviation of the log ratio) and, per group of logs named by
``--group NAME=GLOB``, the mean ratio of one split's second run to its first (``--split``).

    python benchmarks/repeat_spread.py --split 1x4 --group without='A*/*/events.jsonl' \\
        --group with='B*/*/events.jsonl'
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import statistics

from tracetui.analysis import Results
from tracetui.events.log import read_events


def runs_of(path: str) -> dict[str, float]:
    """run label (``1x4#2``) -> median measured step (ms), in the order the runs started."""
    results = Results().extend(read_events([path]).events)
    return {r.run_id.split("/", 1)[1]: statistics.median(s["wall_ms"] for s in r.measured())
            for r in results.runs.values() if r.measured()}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--group", action="append", required=True, help="NAME=GLOB of event logs, one command each")
    p.add_argument("--split", required=True, help="the split whose second run is compared with its first")
    ns = p.parse_args()
    every = []
    for name, pattern in (g.split("=", 1) for g in ns.group):
        mine = []
        for path in sorted(glob.glob(pattern)):
            runs = runs_of(path)
            ratios = {s.split("#")[0]: math.log(runs[s] / runs[s.replace("#2", "#1")])
                      for s in runs if s.endswith("#2") and s.replace("#2", "#1") in runs}
            every += ratios.values()
            mine.append(ratios[ns.split])
            print(json.dumps({"group": name, "log": path, "runs_ms": {k: round(v, 1) for k, v in runs.items()},
                              "second_over_first": {k: round(math.exp(v), 4) for k, v in ratios.items()}}))
        print(json.dumps({"group": name, "commands": len(mine),
                          f"{ns.split}_second_over_first_mean": round(math.exp(statistics.fmean(mine)), 4),
                          "sd_of_log_ratio": round(statistics.stdev(mine), 3) if len(mine) > 1 else None}))
    print(json.dumps({"all_splits_sd_of_log_ratio": round(statistics.stdev(every), 3),
                      "largest": round(math.exp(max(abs(x) for x in every)), 4)}))


if __name__ == "__main__":
    main()
