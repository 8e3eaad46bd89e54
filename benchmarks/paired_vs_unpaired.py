"""One sweep's verdict two ways: as tracetui gives it (step by step where the trials' steps trained
on the same rows), and as it would be with the steps' row fingerprints left out (two samples of
steps, as before paired comparisons), side by side; with each trial's step times and the
per-step ratio to the slowest trial.

    python benchmarks/paired_vs_unpaired.py tracetui_runs/SWEEP/events.jsonl

Busy or not, both verdicts are given (``--allow-busy``), marked as such.
"""

from __future__ import annotations

import argparse
import copy
import json


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("events", nargs="+")
    ns = p.parse_args()

    from tracetui.analysis import Policy, Results, summarise, verdict
    from tracetui.events.log import read_events

    events = read_events(ns.events).events
    blind = copy.deepcopy(events)
    for e in blind:
        e.pop("fingerprint", None)
    policy = Policy(allow_busy=True)
    paired, unpaired = summarise(Results().extend(events)), summarise(Results().extend(blind))
    print("paired:  ", verdict(paired, policy))
    print("unpaired:", verdict(unpaired, policy))
    steps: dict[str, dict[int, float]] = {}
    for e in events:
        if e["type"] == "step" and not e["warmup"] and e.get("rank", 0) == 0:
            steps.setdefault(e["run_id"].rsplit("/", 1)[-1], {})[e["step"]] = e["wall_ms"]
    for a, b in zip(paired, unpaired):
        print(json.dumps({"trial": a["trial"], "step_ms": round(a["step_ms_median"] or 0, 1),
                          "step_ms_ci": [round(a["step_ms_ci_low"] or 0, 1), round(a["step_ms_ci_high"] or 0, 1)],
                          "paired": [a.get("speedup_vs_slowest"), a.get("speedup_ci_low"), a.get("speedup_ci_high"),
                                     a.get("comparison")],
                          "unpaired": [b.get("speedup_vs_slowest"), b.get("speedup_ci_low"), b.get("speedup_ci_high"),
                                       b.get("comparison")],
                          "tflop_per_step": a.get("tflop_per_step"), "tflops": a.get("tflops"),
                          "mfu_pct": a.get("mfu_pct"), "mfu_note": a.get("mfu_note")}))
    if len(steps) > 1:
        slow = max(steps, key=lambda k: sorted(steps[k].values())[len(steps[k]) // 2])
        for name, walls in steps.items():
            ratios = [round(steps[slow][k] / w, 3) for k, w in sorted(walls.items()) if k in steps[slow]]
            print(json.dumps({"run": name, "step_ms": [round(w, 1) for _, w in sorted(walls.items())],
                              f"ratio_of_{slow}_per_step": ratios}))


if __name__ == "__main__":
    main()
