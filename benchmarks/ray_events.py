"""How many events a sweep's driver takes through ``--ray``, and what it holds per trial, against
the local runner on the same machine.

Starts a Ray cluster of ``--nodes`` small nodes on this machine (Ray's own
``ray.cluster_utils.Cluster``, one CPU each, the head included: one lane a node), then runs the
built-in sweep with the stand-in worker's flood (``tests/stubs/worker.py``'s ``flood``: each run
sends ``--steps`` step events as fast as it can, then its end) twice: ``local`` (the local
runner, one lane) and ``ray`` (``--ray`` on the cluster). Each arm prints one JSON line: the
events in the sweep's event log, the driver's wall time from the first ``run_started`` to the last
``run_finished`` it wrote and the events/s over it, the step events/s while any run streamed (the
union of each run's first to last step as the driver wrote them) and the best second's, per lane,
the time from a step's creation (its ``t``) to the driver writing it (p50/p90/max), the driver's
resident memory (VmRSS) at its first ``run_started`` and at the end, that growth per trial and
its peak (VmHWM), and how many runs ended not ok (must be 0). A last line holds the ratios ray /
local and the machine's load.

``--stall-ms MS`` adds an arm ``ray_stalled``: the same Ray sweep with a listener that takes MS
milliseconds per step event (a slow monitor): how far the driver falls behind, and what piles up
in its memory meanwhile. ``--costs`` adds the per-call costs on the driver's path: ``ray.wait`` on
a running task (what a Ray run's supervisor asks, at most every ``ALIVE_EVERY_S``), a round trip
to the event hub, and the hub's calls/s with one caller per node (each run's relay makes one every
``SEND_EVERY_S``).

    python benchmarks/ray_events.py [--nodes 8] [--trials 48] [--steps 2000] [--stall-ms 1]
                                   [--costs]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# the nodes' workers (started by the cluster below) import the stand-in from this tree
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)

from tests.stubs.worker import flood  # noqa: E402
from tracetui.core.checks import validate  # noqa: E402
from tracetui.core.config import SweepConfig  # noqa: E402
from tracetui.events.log import read_events  # noqa: E402
from tracetui.runner.sweep import Sweep  # noqa: E402

SPLITS = ("1x4", "2x2", "4x1")


class FloodSweep(Sweep):
    """The built-in sweep, its trials run by the stand-in's flood."""

    target = staticmethod(flood)


def status_kib(key: str) -> int:
    """This process's ``key`` (VmRSS, VmHWM) in KiB."""
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(key + ":"))


class Meter:
    """The sweep's listener: when the driver wrote each event, and how old each step was then."""

    def __init__(self, stall_s: float = 0.0):
        self.stall_s = stall_s
        self.count = 0
        self.first = self.last = None
        self.rss_first = 0
        self.age = array("d")  # per step event: seconds from its creation to the driver's write
        self.wrote = array("d")  # per step event: when the driver wrote it
        self.spans: dict[str, list[float]] = {}  # per run: its first and last step written

    def __call__(self, event: dict) -> None:
        now = time.time()
        self.count += 1
        kind = event.get("type")
        if kind == "run_started" and self.first is None:
            self.first, self.rss_first = now, status_kib("VmRSS")
        elif kind == "run_finished":
            self.last = now
        elif kind == "step":
            self.age.append(now - event["t"])
            self.wrote.append(now)
            span = self.spans.setdefault(event["run_id"], [now, now])
            span[1] = now
            if self.stall_s:
                time.sleep(self.stall_s)

    def streaming_s(self) -> float:
        """The union of the runs' spans (first to last step written)."""
        total, end = 0.0, float("-inf")
        for a, b in sorted(self.spans.values()):
            if b > end:
                total += b - max(a, end)
                end = b
        return total

    def best_second(self) -> int:
        per: dict[int, int] = {}
        for t in self.wrote:
            per[int(t)] = per.get(int(t), 0) + 1
        return max(per.values(), default=0)


def pct(values, q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def arm(name: str, args, runs_dir: Path, stall_ms: float = 0.0, **cfg) -> dict:
    """One sweep of the flood; its line."""
    repeats = -(-args.trials // len(SPLITS))
    config = SweepConfig(splits=",".join(SPLITS), repeats=repeats, steps=args.steps, warmup=args.warmup,
                         device="cpu", allow_busy=True, head_start=False, runs_dir=str(runs_dir / name), **cfg)
    meter = Meter(stall_ms / 1000)
    try:  # the peak (VmHWM) from here: the arm's own, not an arm's before
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    rss_before = status_kib("VmRSS")
    sweep = FloodSweep(config, validate(config), on_event=meter)
    lanes = len(sweep.lanes)
    try:
        outcomes = sweep.run()
        rss_end, hwm = status_kib("VmRSS"), status_kib("VmHWM")
    finally:
        sweep.close()
    events = read_events([sweep.log.path]).events
    steps = sum(e["type"] == "step" for e in events)
    wall = (meter.last or time.time()) - (meter.first or time.time())
    streaming = meter.streaming_s()
    # the meter's own arrays are not the driver's
    own_kib = (len(meter.age) + len(meter.wrote)) * 8 / 1024
    trials = len(outcomes)
    ages = list(meter.age)
    return dict(
        arm=name, lanes=lanes, trials=trials, not_ok=sum(s != "ok" for s in outcomes.values()),
        events_logged=len(events), steps_logged=steps, steps_expected=trials * args.steps,
        wall_s=round(wall, 2), events_per_s=round(len(events) / wall) if wall > 0 else None,
        steps_per_s_streaming=round(steps / streaming) if streaming > 0 else None,
        steps_per_s_best_second=meter.best_second(),
        per_lane_streaming=round(steps / streaming / lanes) if streaming > 0 else None,
        age_ms_p50=round(1000 * pct(ages, 0.5), 1) if ages else None,
        age_ms_p90=round(1000 * pct(ages, 0.9), 1) if ages else None,
        age_ms_max=round(1000 * max(ages), 1) if ages else None,
        rss_mib_before=round(rss_before / 1024, 1), rss_mib_first_start=round(meter.rss_first / 1024, 1),
        rss_mib_end=round(rss_end / 1024, 1), hwm_mib=round(hwm / 1024, 1),
        kib_per_trial=round((rss_end - meter.rss_first - own_kib) / trials, 1),
        stall_ms=stall_ms or None,
    )


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def costs(address: str, nodes: int, calls: int) -> dict:
    """The driver's per-call costs on the Ray path, and the hub's calls/s with a caller per node."""
    import ray

    from tracetui.runner.raycluster import EventHub

    ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        hub = EventHub.remote()
        ray.get(hub.take.remote())
        running = ray.remote(_sleep).options(num_cpus=0).remote(60)
        t0 = time.perf_counter()
        for _ in range(calls):
            ray.wait([running], timeout=0)
        wait_us = (time.perf_counter() - t0) / calls * 1e6
        t0 = time.perf_counter()
        for _ in range(calls // 4):
            ray.get(hub.put.remote("x", []))
        round_trip_us = (time.perf_counter() - t0) / (calls // 4) * 1e6

        @ray.remote(num_cpus=0)
        def caller(hub, n: int) -> float:
            t = time.perf_counter()
            for _ in range(n):
                ray.get(hub.put.remote("x", []))
            return time.perf_counter() - t

        t0 = time.perf_counter()
        ray.get([caller.remote(hub, calls // 4) for _ in range(nodes)])
        hub_calls_per_s = nodes * (calls // 4) / (time.perf_counter() - t0)
        ray.cancel(running, force=True)
    finally:
        ray.shutdown()
    return dict(arm="costs", ray_wait_running_us=round(wait_us, 1), hub_round_trip_us=round(round_trip_us),
                hub_calls_per_s_with_callers=round(hub_calls_per_s), callers=nodes)


def start_cluster(nodes: int):
    from ray.cluster_utils import Cluster

    small = dict(num_cpus=1, object_store_memory=100 * 2**20)
    cluster = Cluster(initialize_head=True, head_node_args=small)
    for _ in range(nodes - 1):
        cluster.add_node(**small)
    cluster.wait_for_nodes()
    return cluster


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=8, help="Ray nodes on this machine, the head included (one lane each)")
    ap.add_argument("--trials", type=int, default=48)
    ap.add_argument("--steps", type=int, default=2000, help="step events each run sends")
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--stall-ms", type=float, default=0.0, help="also a Ray sweep whose listener takes MS per step")
    ap.add_argument("--costs", action="store_true", help="also the per-call costs of the Ray path")
    ap.add_argument("--no-local", action="store_true", help="skip the local runner's arm")
    args = ap.parse_args()

    print(json.dumps(dict(load_before=os.getloadavg(), cpus=os.cpu_count(), nodes=args.nodes, trials=args.trials,
                          steps=args.steps)), flush=True)
    lines = {}
    with tempfile.TemporaryDirectory(prefix="tracetui-rayev-") as tmp:
        if not args.no_local:
            lines["local"] = arm("local", args, Path(tmp))
            print(json.dumps(lines["local"]), flush=True)
        cluster = start_cluster(args.nodes)
        try:
            lines["ray"] = arm("ray", args, Path(tmp), ray=cluster.address)
            print(json.dumps(lines["ray"]), flush=True)
            if args.stall_ms:
                lines["stalled"] = arm("ray_stalled", args, Path(tmp), args.stall_ms, ray=cluster.address)
                print(json.dumps(lines["stalled"]), flush=True)
            if args.costs:
                print(json.dumps(costs(cluster.address, args.nodes, 4000)), flush=True)
        finally:
            cluster.shutdown()
    summary = dict(load_after=os.getloadavg())
    if "local" in lines:
        local, ray_ = lines["local"], lines["ray"]
        for key in ("events_per_s", "steps_per_s_streaming", "steps_per_s_best_second", "age_ms_p50", "kib_per_trial"):
            if local[key] and ray_[key] is not None:
                summary[f"ray/local {key}"] = round(ray_[key] / local[key], 2)
    print(json.dumps(summary), flush=True)
    bad = sum(line["not_ok"] + line["steps_expected"] - line["steps_logged"] for line in lines.values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
