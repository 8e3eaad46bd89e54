"""``--until-confident`` replayed over recorded fixed-step sweeps: which PCT, for how much time?

Reads event logs of sweeps that ran every split for a fixed number of steps (one run per split),
orders the splits as ``--until-confident`` runs them (fewest accumulation steps first), and
applies tracetui's own stopping rule (:class:`tracetui.analysis.StopRule`, with ``--min-steps``
and the intervals of the splits before) to each split's recorded steps, as if it had been
measured live. Prints, per log and PCT: where each split would have stopped, the share of the
recorded training time (warm-up included) that took, and whether the ranking of medians is the
full run's. A replay of recorded steps, not a run: process starts are not counted.

    python benchmarks/replay_until_confident.py docs/results/h200_time_to_verdict/fixed_3.jsonl.gz --pct 2 3 5
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics


def load_runs(path: str) -> list[dict]:
    """Per rank-0 run, in the order they ran: its accumulation, label, warm-up and measured walls."""
    opener = gzip.open if path.endswith(".gz") else open
    runs: dict[str, dict] = {}
    with opener(path, "rt") as fh:
        for line in fh:
            e = json.loads(line)
            if e.get("rank", 0) != 0:
                continue
            if e["type"] == "run_started" and e.get("mode") != "not started":
                runs[e["run_id"]] = dict(ga=e["grad_accum"], label=e["label"], warm=[], walls=[])
            elif e["type"] == "step" and e["run_id"] in runs:
                runs[e["run_id"]]["warm" if e.get("warmup") else "walls"].append(e["wall_ms"])
    return [r for r in runs.values() if r["walls"]]


def replay(runs: list[dict], pct: float, least: int) -> tuple[float, list[tuple[str, int, float]]]:
    from tracetui.analysis import SETTLE_Z, StopRule, enough_for_interval, settle_interval

    refs: list[tuple[float, float]] = []
    used = full = 0.0
    stops = []
    for r in sorted(runs, key=lambda r: r["ga"]):  # fewest accumulation steps first
        rule = StopRule(pct, least, list(refs))
        n = next((i for i in range(1, len(r["walls"]) + 1) if rule(r["walls"][:i])), len(r["walls"]))
        walls = r["walls"][:n]
        used += sum(r["warm"]) + sum(walls)
        full += sum(r["warm"]) + sum(r["walls"])
        if len(walls) >= least and enough_for_interval(len(walls), SETTLE_Z):
            refs.append(settle_interval(sorted(walls)))
        stops.append((r["label"], n, statistics.median(walls)))
    return used / full, stops


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("logs", nargs="+")
    p.add_argument("--pct", type=float, nargs="+", default=[2.0, 5.0])
    p.add_argument("--min-steps", type=int, default=10)
    ns = p.parse_args()
    for path in ns.logs:
        runs = load_runs(path)
        labels = [r["label"] for r in runs]
        if len(set(labels)) != len(labels):
            print(f"{path}: more than one run of a split; this replay takes one run per split")
            continue
        full_rank = [r["label"] for r in sorted(runs, key=lambda r: statistics.median(r["walls"]))]
        print(f"{path}: {len(runs)} splits, {max(len(r['walls']) for r in runs)} measured steps each "
              f"(ranking {' < '.join(full_rank)})")
        for pct in ns.pct:
            share, stops = replay(runs, pct, ns.min_steps)
            rank = [label for label, _n, _m in sorted(stops, key=lambda s: s[2])]
            print(f"  --until-confident {pct:g}: {share:.3f} of the training time; stops after "
                  + ", ".join(f"{label} {n}" for label, n, _m in stops)
                  + ("; same ranking" if rank == full_rank else f"; ranking {' < '.join(rank)} DIFFERS"))


if __name__ == "__main__":
    main()
