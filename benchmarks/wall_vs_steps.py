"""A whole tracetui command's wall time against the time of the steps it measured.

Runs ``python -m tracetui ARGS --runs-dir DIR`` once, timed from start to the end of its output
(what a caller reading it waits for; its own exit as well), then reads the
sweep's event log and prints one JSON line: the command's wall time, the summed time of every
step (warm-up included), their ratio (the goal: at most 1.15), and where the rest went:
each run's start (asked for, to built and to its first step: from its ``run_stage`` events),
what lies between one run's last step and the next one's first, how long a run built early (a
head start) waited for its turn, how many measured steps ran beside another run's start (there
must be none), and what lies outside every run (tracetui's own start before the first run, its
end after the last), and the command's own time account (``tracetui.analysis.time_spent``, from
its process's start to its outputs written) beside the time measured here, from outside
(``outside_over_account``: the goal is 1.00 +- 0.01, with ``--emit-config`` as without).

    python benchmarks/wall_vs_steps.py --runs-dir /tmp/wvs -- --export json -o /tmp/a.json \\
        --model qwen3-1.7b --seq-len 512 --splits 1x4,2x2,4x1 --repeats 2 --steps 30
    python benchmarks/wall_vs_steps.py --runs-dir /tmp/wvs -- sweep --splits 1x2,2x1 --warmup 1 \\
        --allow-busy --export json -o /tmp/x.json --emit-config /tmp/best.yaml -- trl sft ARGS
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path


def _watch_trials(runs_dir: Path, t0: float, gone: dict[str, float], done: threading.Event) -> None:
    """Every 5 ms: the trials' pids (from the live event log's ``run_started``), and when each
    process went (its /proc entry gone, or a zombie): a run's end, seen from outside."""
    pids: dict[int, str] = {}
    log, offset = None, 0
    while not done.is_set():
        if log is None:
            logs = [q for q in runs_dir.glob("*/events.jsonl") if q.stat().st_mtime >= t0 - 1]
            log = logs[0] if logs else None
        if log is not None:
            with log.open() as fh:
                fh.seek(offset)
                chunk = fh.read()
            whole = chunk[: chunk.rfind("\n") + 1]
            offset += len(whole.encode())
            for line in whole.splitlines():
                e = json.loads(line)
                if e["type"] == "run_started" and e.get("pid"):
                    pids[e["pid"]] = e["run_id"].split("/")[-1]
        now = time.time()
        for pid, name in pids.items():
            if name in gone:
                continue
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                state = "X"
            if state in ("Z", "X"):
                gone[name] = now
        time.sleep(0.005)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs-dir", required=True)
    p.add_argument("--name", default="sweep")
    p.add_argument("args", nargs=argparse.REMAINDER)
    ns = p.parse_args()
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    cut = args.index("--") if "--" in args else len(args)  # (a script sweep: tracetui's flags before its --)
    cmd = [sys.executable, "-m", "tracetui", *args[:cut], "--runs-dir", ns.runs_dir, *args[cut:]]
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    exited = []
    threading.Thread(target=lambda: exited.append((proc.wait(), time.time())), daemon=True).start()
    gone: dict[str, float] = {}
    watching = threading.Event()
    threading.Thread(target=_watch_trials, args=(Path(ns.runs_dir), t0, gone, watching), daemon=True).start()
    _, err = proc.communicate()  # to the end of its output: what a caller reading it waits for
    t1 = time.time()
    watching.set()
    logs = sorted(Path(ns.runs_dir).glob("*/events.jsonl"), key=lambda q: q.stat().st_mtime)
    events = [json.loads(line) for line in logs[-1].read_text().splitlines()] if logs else []
    steps = [e for e in events if e["type"] == "step"]
    summed = sum(e["wall_ms"] for e in steps) / 1000
    runs: dict[str, dict] = {}
    for e in events:
        r = runs.setdefault(e.get("run_id", ""), {"stages": {}, "steps": []})
        if e["type"] == "run_stage":
            r["stages"][e["stage"]] = e["elapsed_s"]
            r.setdefault("asked_t", e["t"] - e["elapsed_s"])
            if e["stage"].startswith("built, waiting"):  # a head start: built, it waits for its turn
                r["ready_t"] = e["t"]
            elif e["stage"] == "first step":  # the trainer is built (the stage's name says what comes next)
                r["built_t"] = e["t"]
        elif e["type"] == "step" and e.get("rank", 0) == 0:
            # the step's span on the host clock (its event arrives a little later)
            r["steps"].append((e["t_end"] - e["wall_ms"] / 1000, e["t_end"], bool(e.get("warmup")), e["wall_ms"]))
        elif e["type"] in ("run_finished", "run_failed"):
            r["end_t"] = e["t"]
    order = sorted((r for r in runs.values() if "asked_t" in r and r["steps"]), key=lambda r: r["asked_t"])
    starts, waited = {}, {}
    for rid, r in runs.items():
        name = rid.split("/")[-1]
        if "asked_t" in r and r["steps"]:
            # asked for -> built (its trainer ready), and -> its first step began
            starts[name] = {"built": round(r.get("built_t", r["steps"][0][0]) - r["asked_t"], 2),
                            "first_step": round(r["steps"][0][0] - r["asked_t"], 2)}
        if "ready_t" in r and r["steps"]:
            waited[name] = round(r["steps"][0][0] - r["ready_t"], 2)
    # between one run's last step and the next one's first: what the sweep pays per run
    between = [round(b["steps"][0][0] - a["steps"][-1][1], 2) for a, b in zip(order, order[1:])]
    # no measured step may run beside another run's start (asked for -> built)
    beside = 0
    for r in order:
        for o in order:
            if o is r or "built_t" not in o:
                continue
            beside += sum(1 for b, e, warm, _ in r["steps"] if not warm and b < o["built_t"] and e > o["asked_t"])
    medians = {}
    for rid, r in runs.items():
        walls = sorted(w for _, _, warm, w in r["steps"] if not warm)
        if walls:
            medians[rid.split("/")[-1]] = round(walls[len(walls) // 2], 1)
    # a run's process, from its run_finished to its end (a CUDA context going), seen from outside
    ended_after = {rid.split("/")[-1]: round(gone[rid.split("/")[-1]] - r["end_t"], 2) for rid, r in runs.items()
                   if "end_t" in r and rid.split("/")[-1] in gone}
    asked = [r["asked_t"] for r in runs.values() if "asked_t" in r]
    ends = [r["end_t"] for r in runs.values() if "end_t" in r]
    account = _account(events)
    exit_s = exited[0][1] - t0 if exited else None
    print(json.dumps({
        "name": ns.name, "exit": proc.returncode,
        # from outside (the process's start to its exit) against the command's own account of it
        "outside_s": round(exit_s, 2) if exit_s else None, "account_s": account,
        "outside_over_account": round(exit_s / account, 3) if exit_s and account else None,
        "wall_s": round(t1 - t0, 1), "steps_s": round(summed, 1),
        # tracetui's own exit, and its output's end (later while a process it started holds it)
        "process_exit_s": round(exited[0][1] - t0, 2) if exited else None,
        "wall_over_steps": round((t1 - t0) / summed, 3) if summed else None, "steps": len(steps),
        "warmup_steps_s": round(sum(e["wall_ms"] for e in steps if e.get("warmup")) / 1000, 1),
        "before_first_run_s": round(min(asked) - t0, 1) if asked else None,
        "after_last_run_s": round(t1 - max(ends), 1) if ends else None,
        "process_gone_after_its_end_s": ended_after,
        "last_process_gone_to_exit_s": round(exited[0][1] - max(gone.values()), 2) if exited and gone else None,
        "between_runs_s": between,
        "start_s": starts,
        "waited_built_s": waited,
        "measured_steps_beside_a_start": beside,
        "median_ms": medians,
        "stages_of_first_run": order[0]["stages"] if order else {},
        "stderr_tail": err.strip().splitlines()[-4:],
    }))


def _account(events: list[dict]) -> float | None:
    """The command's own time account of its sweep (its ``command_s``), from its log."""
    from tracetui.analysis import Results, time_spent

    spent = time_spent(Results().extend(events))
    return spent[-1]["command_s"] if spent else None


if __name__ == "__main__":
    main()
