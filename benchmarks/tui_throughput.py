"""How fast the monitor drains events, and what CPU it takes doing so.

Feeds recorded step events (tests/data/h200_sweep.jsonl, renumbered without end) from a producer
process through a multiprocessing queue into a running app, as fast as they can go, for a fixed
time, and prints events drained
per second and the process's CPU use in cores. Goal: at least 1000 step events/s on under one core.

    python benchmarks/tui_throughput.py [--seconds 8]

Three runs: a flood (as fast as the producer and queue go: the drain capacity; the process
then uses all it can), and steady feeds of 1000 and 2000 events/s (the CPU cost at that load).
Then a feed of 20 events/s (about what a sweep sends: steps and GPU samples) with and without
the monitor's CPU budget, side by side: what the monitor takes from the training it measures.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import multiprocessing as mp
import threading
import time
from pathlib import Path

from tracetui.events.log import read_events
from tracetui.tui.app import TraceApp
from tracetui.tui.sources import Inbox, Source

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "h200_sweep.jsonl"


def feed(q, path: str, seconds: float, rate: float) -> None:
    """Producer process (like a sweep worker): step events onto a multiprocessing queue."""
    events = read_events([path]).events
    for e in events:
        if e["type"] == "run_started":
            q.put(e)
    steps = [e for e in events if e["type"] == "step"]
    t0 = time.perf_counter()
    sent = 0
    while time.perf_counter() - t0 < seconds:
        e = copy.copy(steps[sent % len(steps)])
        e["step"] = sent + 1
        e["warmup"] = False
        q.put(e)
        sent += 1
        if rate:
            delay = t0 + sent / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
    q.put(None)


class FloodSource(Source):
    """Events from a separate producer process, pumped into the app by a thread, as a sweep's
    events are: so the app process's CPU is the monitor's own cost."""

    def __init__(self, seconds: float, rate: float):
        ctx = mp.get_context("spawn")
        self.q = ctx.Queue(maxsize=10_000)
        self.proc = ctx.Process(target=feed, args=(self.q, str(DATA), seconds, rate), daemon=True)
        self.sent = 0

    def start(self, inbox: Inbox) -> None:
        self.proc.start()
        threading.Thread(target=self._pump, args=(inbox,), daemon=True).start()

    def _pump(self, inbox: Inbox) -> None:
        while True:
            e = self.q.get()
            if e is None:
                return
            self.sent += 1
            inbox.put(e)

    def stop(self) -> None:
        self.proc.kill()


async def measure(seconds: float, rate: float) -> dict:
    source = FloodSource(seconds + 1.0, rate)
    app = TraceApp(source)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.5)
        applied0 = app.events_applied
        c0, t0 = time.process_time(), time.perf_counter()
        await pilot.pause(seconds)
        c1, t1 = time.process_time(), time.perf_counter()
        applied = app.events_applied - applied0
        backlog = len(app.inbox.drain())
        source.stop()
        await pilot.pause(0.1)
        await pilot.press("q")
    return {"events_per_s": applied / (t1 - t0), "cpu_cores": (c1 - c0) / (t1 - t0), "sent": source.sent,
            "backlog": backlog, "seconds": t1 - t0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=8.0)
    ns = p.parse_args()
    print(f"{'feed':>14} {'drained/s':>10} {'cores':>6} {'received':>9} {'unapplied':>9}")
    results = {}
    for rate in (0, 1000, 2000):
        r = asyncio.run(measure(ns.seconds, rate))
        results[rate] = r
        name = "flood" if rate == 0 else f"{rate}/s"
        print(f"{name:>14} {r['events_per_s']:>10.0f} {r['cpu_cores']:>6.2f} {r['sent']:>9} {r['backlog']:>9}")
    ok = results[2000]["events_per_s"] >= 1000 and results[2000]["cpu_cores"] < 1.0
    print(f"goal: >= 1000 step events/s drained on < 1 core (fed at 2000/s): {'met' if ok else 'NOT met'}; "
          f"flood capacity {results[0]['events_per_s']:.0f} events/s")
    from tracetui.tui import app as app_mod

    budget = app_mod.CPU_BUDGET
    app_mod.CPU_BUDGET = float("inf")
    free = asyncio.run(measure(ns.seconds, 20))
    app_mod.CPU_BUDGET = budget
    bounded = asyncio.run(measure(ns.seconds, 20))
    print(f"20 events/s: monitor CPU {free['cpu_cores']:.3f} cores redrawing at every tick, "
          f"{bounded['cpu_cores']:.3f} with its {budget} core budget (ratio {bounded['cpu_cores'] / free['cpu_cores']:.2f})")


if __name__ == "__main__":
    main()
