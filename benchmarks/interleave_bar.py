"""Issue #11's bar from the summaries of independent invocations of the same sweep: each one's
95% interval for the speedup of the faster split over the slower against the other estimates,
and how far apart the estimates are (the bar: every interval covers the others' estimates, and
they agree within 5%). With ``--logs``, from each sweep's event log: whether the first step of
a turn (interleaved runs) is slower than the others, per run.

    python benchmarks/interleave_bar.py inv1.json inv2.json inv3.json --logs /tmp/inv1 /tmp/inv2 /tmp/inv3
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

VERDICT = re.compile(r"(\S+) is ([\d.]+)x faster than (\S+) \(95% CI ([\d.]+)-([\d.]+)x\)")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("summaries", nargs="+")
    p.add_argument("--logs", nargs="*", default=[])
    ns = p.parse_args()
    found = []
    for path in ns.summaries:
        d = json.loads(Path(path).read_text())
        verdict = d.get("verdict") or ""
        m = VERDICT.search(verdict)
        rows = {r["trial"]: r for r in d["splits"]}
        med = {k: (round(r["step_ms_median"], 1), f"runs {r.get('repeat_spread_pct') or 0:.1f}% apart")
               for k, r in rows.items() if r.get("step_ms_median")}
        print(f"{Path(path).name}: {verdict} | medians {med} | settings "
              f"{ {k: next(iter(rows.values())).get(k) for k in ('activation_checkpointing', 'precision_used', 'attn_implementation')} }")
        if m:
            found.append((Path(path).name, float(m[2]), float(m[4]), float(m[5]), m[1], m[3]))
    if len(found) >= 2:
        ests = [f[1] for f in found]
        for name, est, lo, hi, a, b in found:
            others = [e for (n, e, *_rest) in found if n != name]
            covers = all(lo <= e <= hi for e in others)
            print(f"{name}: {a} over {b} {est:.2f}x (95% CI {lo:.2f}-{hi:.2f}); covers the others' "
                  f"{', '.join(f'{e:.2f}' for e in others)}: {'yes' if covers else 'NO'}")
        spread = (max(ests) - min(ests)) / min(ests) * 100
        print(f"estimates {', '.join(f'{e:.2f}' for e in ests)}: highest {spread:.1f}% above lowest "
              f"(bar: within 5%: {'met' if spread <= 5 else 'NOT met'})")
    for folder in ns.logs:
        for log in sorted(Path(folder).glob("*/events.jsonl")):
            runs: dict[str, dict[str, list[float]]] = {}
            for line in log.read_text().splitlines():
                e = json.loads(line)
                if e.get("type") != "step" or e.get("warmup"):
                    continue
                r = runs.setdefault(e["run_id"].split("/")[-1], {"first": [], "rest": []})
                r["first" if e.get("turn_first") else "rest"].append(e["wall_ms"])
            parts = []
            for rid, r in sorted(runs.items()):
                if r["first"] and r["rest"]:
                    f, o = statistics.median(r["first"]), statistics.median(r["rest"])
                    parts.append(f"{rid} {f:.0f}/{o:.0f} ms ({(f / o - 1) * 100:+.1f}%)")
            print(f"{folder}: first step of a turn against the others (medians): {'; '.join(parts)}")


if __name__ == "__main__":
    main()
