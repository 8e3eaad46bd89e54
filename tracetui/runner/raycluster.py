"""Trials as Ray work (``--ray [ADDRESS]``): the driver's side.

The planner and the supervisor are the local sweep's; only where a trial's process runs
changes. :class:`Cluster` connects (``auto``: the running cluster; ``local``: a Ray started for
the command and stopped with it; else an address) and makes one lane per place a trial fits:
per alive node, its GPUs divided by a trial's world size (a DDP trial's processes on one node),
or one lane on a node without GPUs. Each lane is a Ray actor pinned to its node (Ray's node
affinity, not soft) that holds the lane's GPUs and a fork server (:class:`.raynode.LaneRunner`),
so a node's runs never overlap, its busy rules are its own, and each run is forked with the
libraries imported, as locally. :class:`RayExecutor` starts a run as a call of its lane's
runner; :class:`RayChild` is that call as the supervisor sees it.

Events come back through Ray: the trial's task sends them in batches to the sweep's event hub
(:class:`EventHub`, an actor), which one thread of the driver drains into
each run's own queue. Signals go the other way through the hub, which lives on the head node. A task whose worker or node
dies ends its run as ``crashed``, with the reason, and a lost node's lane takes no more runs.
:meth:`Cluster.close` ends every lane's runner (and what runs there) and removes the hub; a Ray
started for the command is stopped.
"""

from __future__ import annotations

import contextlib
import os
import queue as queue_mod
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..core.config import ConfigError
from ..events.schema import RUN_STARTED
from ..launch.fork import ForkTarget
from . import raynode
from .supervise import KILL_AFTER_S, Child

#: how often the driver drains the hub (seconds)
DRAIN_EVERY_S = 0.05
#: how often a run's supervisor asks Ray whether the run's call still runs (seconds): a call into
#: Ray each time, and it asks after every event (benchmarks/ray_events.py measured the difference)
ALIVE_EVERY_S = 0.05
#: how long the lanes' runners have to end what runs there before they are killed
CLOSE_WITHIN_S = 10.0
#: how long a node has to say what it has (:meth:`Cluster._facts`) before it is left out
FACTS_WITHIN_S = 60.0
#: how long a run has to go after SIGKILL was asked through the hub before its lane's runner is killed
CANCEL_AFTER_S = 5.0


@ray.remote(num_cpus=0, max_restarts=0)
class EventHub:
    """The sweep's mailbox on the cluster: runs' events in, signals out."""

    def __init__(self):
        self.events: list = []
        self.signals: dict[str, list[int]] = {}

    def put(self, run_id: str, batch: list) -> list[int]:
        """A run's events in; the signals waiting for it out (one call a relay interval)."""
        if batch:
            self.events.append((run_id, batch))
        return self.signals.pop(run_id, [])

    def take(self) -> list:
        out, self.events = self.events, []
        return out

    def signal(self, run_id: str, sig: int) -> None:
        self.signals.setdefault(run_id, []).append(sig)


@dataclass
class Lane:
    """A place one trial runs at a time: a node, and the GPUs a trial takes there."""

    node_id: str
    address: str
    gpus: int
    alive: bool = True

    @property
    def name(self) -> str:
        """How rows and the monitor name the node: its address and the start of its Ray id."""
        return f"{self.address} ({self.node_id[:8]})"


class Cluster:
    """The Ray cluster a sweep's trials run on (see the module's note)."""

    def __init__(self, address: str, world_size: int, want_gpus: bool, folders: list[str], fresh: bool = False):
        """``folders``: what every node must see, the sweep's own folder last (its ``ray.log``)."""
        self.started_here = address == "local"
        # what Ray says as it starts goes to the sweep's ray.log, not over the monitor or the
        # headless lines; and Ray's fault handler needs a file behind stderr (a monitor's is not)
        self.log = open(Path(folders[-1]) / "ray.log", "a", encoding="utf-8")  # (kept open: the fault handler writes there)
        with contextlib.redirect_stderr(self.log), contextlib.redirect_stdout(self.log):
            ray.init(address=None if self.started_here else address, include_dashboard=False,
                     log_to_driver=False, configure_logging=False, ignore_reinit_error=False)
        self.hub = EventHub.options(scheduling_strategy=self._here()).remote()
        self.world_size = world_size
        self.lanes, self.refused = self._lanes(world_size, want_gpus, folders)
        self.fresh = fresh
        self._runners: dict[int, object] = {}  # lane -> its LaneRunner actor, made at its first run
        self._queues: dict[str, queue_mod.Queue] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._drainer = threading.Thread(target=self._drain, name="tracetui-ray-hub", daemon=True)
        self._drainer.start()

    @staticmethod
    def _here() -> NodeAffinitySchedulingStrategy:
        """Where the hub lives: on the head node (losing it loses the cluster anyway), so that a
        worker node lost takes no more than its own runs; else beside the driver."""
        head = [n["NodeID"] for n in ray.nodes() if n.get("Alive") and "node:__internal_head__" in n.get("Resources", {})]
        return NodeAffinitySchedulingStrategy(head[0] if head else ray.get_runtime_context().get_node_id(), soft=False)

    def _lanes(self, world: int, want_gpus: bool, folders: list[str]) -> tuple[list[Lane], list[str]]:
        """Every place a trial fits, and why each node that has none has none."""
        lanes, refused = [], []
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        for node, fact in zip(nodes, self._facts(nodes, folders)):
            address = node.get("NodeManagerAddress", "?")
            have = int(node.get("Resources", {}).get("GPU", 0))
            if isinstance(fact, str):
                refused.append(f"node {address}: {fact}")
            elif fact["missing"]:
                refused.append(f"node {address}: no {', '.join(fact['missing'])} there (run from a folder every "
                               "node shares)")
            elif want_gpus and have < world:
                refused.append(f"node {address}: {have} GPUs, a trial needs {world}")
            else:
                count = have // world if want_gpus else 1
                lanes += [Lane(node["NodeID"], address, world if want_gpus else 0) for _ in range(count)]
        return lanes, refused

    @staticmethod
    def _facts(nodes: list[dict], folders: list[str]) -> list[dict | str]:
        """What each node says of itself (:func:`.raynode.node_facts`), or why it said nothing
        within :data:`FACTS_WITHIN_S` (a node going away, one whose tracetui cannot be imported)."""
        refs = [ray.remote(raynode.node_facts).options(
            num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        ).remote(folders) for n in nodes]
        ray.wait(refs, num_returns=len(refs), timeout=FACTS_WITHIN_S)
        facts: list[dict | str] = []
        for ref in refs:
            try:
                facts.append(ray.get(ref, timeout=0))
            except ray.exceptions.GetTimeoutError:
                ray.cancel(ref, force=True)
                facts.append(f"did not answer within {FACTS_WITHIN_S:g} s")
            except ray.exceptions.RayError as exc:
                facts.append(f"cannot run a trial ({type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200]})")
        return facts

    def describe(self) -> str:
        nodes = sorted({lane.name for lane in self.lanes})
        where = "a Ray started for this command" if self.started_here else "the Ray cluster"
        how = ("as a fresh process (--fresh)" if self.fresh else
               "forked from its lane's fork server (the libraries imported once per lane; --fresh: not)")
        return (f"each run starts {how} on {where}: {len(self.lanes)} lanes over {len(nodes)} nodes "
                f"({', '.join(nodes)}); its events come back through Ray")

    # ---- runs ------------------------------------------------------------------------------
    def submit(self, lane: int, kind: str, args: dict, run_id: str) -> ray.ObjectRef:
        inbox: queue_mod.Queue = queue_mod.Queue()
        with self._lock:
            self._queues[run_id] = inbox
        return self._runner(lane).run.remote(kind, args, run_id, self.hub)

    def _runner(self, lane: int):
        """The lane's runner, made at its first run (and again after one was lost or ended)."""
        with self._lock:
            if lane not in self._runners:
                place = self.lanes[lane]
                self._runners[lane] = ray.remote(raynode.LaneRunner).options(
                    num_cpus=0 if place.gpus else 1, num_gpus=place.gpus, max_restarts=0, max_task_retries=0,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(place.node_id, soft=False)).remote(self.fresh)
            return self._runners[lane]

    def end_lane_runner(self, lane: int) -> None:
        """Kill the lane's runner (a run that would not end): its fork server and runs with it."""
        with self._lock:
            runner = self._runners.pop(lane, None)
        if runner is not None:
            try:
                ray.kill(runner)
            except ray.exceptions.RayError:
                pass  # (gone with its node)

    def inbox(self, run_id: str) -> queue_mod.Queue:
        with self._lock:
            return self._queues[run_id]

    def signal(self, run_id: str, sig: int) -> None:
        self.hub.signal.remote(run_id, sig)

    def done(self, run_id: str) -> None:
        with self._lock:
            self._queues.pop(run_id, None)

    def _drain(self) -> None:
        while not self._closed.wait(DRAIN_EVERY_S):
            try:
                taken = ray.get(self.hub.take.remote())
            except ray.exceptions.RayError:
                return  # (closed; or the hub lost with the head node: each run's call fails on it, and says so)
            for run_id, batch in taken:
                with self._lock:
                    inbox = self._queues.get(run_id)
                if inbox is not None:
                    for event in batch:
                        inbox.put(event)

    def close(self) -> None:
        """End every lane's runner (and what runs there), remove the hub, and stop a Ray started here."""
        with self._lock:
            runners = list(self._runners.values())
            self._runners.clear()
        try:  # each ends what its runs left and its fork server, then goes
            ray.get([runner.close.remote() for runner in runners], timeout=CLOSE_WITHIN_S)
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
            pass  # (a runner lost or stuck: killed below, its runs and server die with it)
        for runner in runners:
            try:
                ray.kill(runner)
            except ray.exceptions.RayError:
                pass  # (gone with its node)
        self._closed.set()
        self._drainer.join(timeout=5)
        ray.kill(self.hub)
        ray.shutdown()


class RayChild(Child):
    """One run's Ray task, as the supervisor sees it (:class:`~.supervise.Child`)."""

    def __init__(self, cluster: Cluster, lane: int, kind: str, args: dict, run_id: str, log_path: Path):
        super().__init__(log_path)
        self.cluster, self.lane_index, self.lane = cluster, lane, cluster.lanes[lane]
        self.kind, self.args, self.run_id = kind, args, run_id
        if kind == "command":
            self.exit_kind, self.linger_s = "error", 120.0
            self.silent_exit = "the script finished but no Trainer reported: does it train with transformers' Trainer?"
        self.ref: ray.ObjectRef | None = None
        self.result: dict | None = None
        self.kill_at: float | None = None
        self.asked_at = 0.0  # when Ray was last asked whether the call still runs

    def start(self) -> None:
        self.ref = self.cluster.submit(self.lane_index, self.kind, self.args, self.run_id)

    def _poll(self, timeout: float = 0.0) -> dict | None:
        if self.result is None and self.ref is not None:
            ready, _ = ray.wait([self.ref], timeout=timeout)
            if ready:
                try:
                    self.result = ray.get(self.ref)
                except ray.exceptions.RayError as exc:
                    self.result = dict(exitcode=None, lost=self._lost(exc), log="")
        return self.result

    def _lost(self, exc: Exception) -> str:
        where = f"node {self.lane.name}"
        if isinstance(exc, (ray.exceptions.ActorDiedError, ray.exceptions.WorkerCrashedError)):
            self.cluster.end_lane_runner(self.lane_index)  # (the lane's next run gets a new one)
        if isinstance(exc, (ray.exceptions.NodeDiedError, ray.exceptions.TaskUnschedulableError,
                            ray.exceptions.ActorUnschedulableError)) or not self._node_alive():
            self.lane.alive = False
            return f"{where} was lost ({type(exc).__name__}); its lane takes no more runs"
        if isinstance(exc, ray.exceptions.ActorUnavailableError):  # (before Ray has marked a node gone)
            self.lane.alive = False
            return f"{where} was lost or cannot be reached ({type(exc).__name__}); its lane takes no more runs"
        if isinstance(exc, (ray.exceptions.ActorDiedError, ray.exceptions.WorkerCrashedError)):
            return f"its Ray worker on {where} died (killed from outside, or out of memory)"
        first = str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else type(exc).__name__
        return f"its Ray task on {where} failed: {first}"

    def _node_alive(self) -> bool:
        return any(n["NodeID"] == self.lane.node_id and n.get("Alive") for n in ray.nodes())

    def alive(self) -> bool:
        """Whether its call still runs: asked of Ray at most every :data:`ALIVE_EVERY_S` (the
        supervisor asks after every event, and each asking costs a call into Ray)."""
        now = time.monotonic()
        if self.kill_at is not None and now > self.kill_at and self.result is None:
            self.cluster.end_lane_runner(self.lane_index)  # asked to die through the hub and did not
            self.kill_at = None
        if self.ref is None:
            return False
        if self.result is None and now - self.asked_at >= ALIVE_EVERY_S:
            self.asked_at = now
            self._poll()
        return self.result is None

    def exitcode(self) -> int | None:
        result = self._poll()
        return result.get("exitcode") if result else None

    def lost_with(self) -> str | None:
        result = self._poll()
        return result.get("lost") if result else None

    def signal(self, sig: int) -> None:
        if self.ref is None or self.result is not None:
            return
        self.cluster.signal(self.run_id, sig)
        if sig == signal.SIGKILL and self.kill_at is None:
            self.kill_at = time.monotonic() + CANCEL_AFTER_S

    def next_event(self, timeout: float) -> dict | None:
        try:
            event = self.cluster.inbox(self.run_id).get(timeout=timeout)
        except queue_mod.Empty:
            return None
        if event.get("type") == RUN_STARTED and event.get("run_id") == self.run_id:
            event = dict(event, node=self.lane.name)  # (every row says where its runs ran)
        return event

    def note_tree(self) -> None:
        """(What the run started is on its node: its task ends it there.)"""

    def reap(self) -> None:
        if self._poll(timeout=KILL_AFTER_S + 5) is None and self.ref is not None:
            self.cluster.end_lane_runner(self.lane_index)
            self._poll(timeout=10)

    def end(self) -> str:
        """Its log, as the task sent it back, where a local run keeps its own."""
        text = (self.result or {}).get("log") or ""
        with open(self.log_path, "a", encoding="utf-8") as fh:
            fh.write(text)
        self.cluster.done(self.run_id)
        return ""


class RayExecutor:
    """Trials as Ray tasks on the cluster's lanes (:mod:`tracetui.runner.executor`'s seam)."""

    forked = False

    def __init__(self, cluster: Cluster):
        self.cluster = cluster

    def lanes(self) -> list[int]:
        return list(range(len(self.cluster.lanes)))

    def lane_open(self, lane: int | None) -> bool:
        return lane is None or self.cluster.lanes[lane].alive

    def where(self, lane: int | None) -> str | None:
        return f"runs on node {self.cluster.lanes[lane].name}" if lane is not None else None

    def parent_pid(self) -> int:
        return os.getpid()

    def describe(self) -> str:
        line = self.cluster.describe()
        return "; ".join([line, *(f"not used: {why}" for why in self.cluster.refused)])

    def close(self) -> None:
        self.cluster.close()

    def worker(self, target: Callable, payload: dict, name: str, log_path: Path, lane: int | None = None) -> Child:
        args = dict(target=target, payload=payload, name=name)
        return RayChild(self.cluster, lane or 0, "worker", args, payload["run_id"], log_path)

    def command(self, argv: list[str], target: ForkTarget | None, env: dict, inbox, log_path: Path,
                lane: int | None = None, run_id: str = "") -> Child:
        # what tracetui and the launcher add to the environment travels (with every variable
        # of tracetui's); the rest is the node's own, as Ray gives it
        added = {k: v for k, v in env.items() if os.environ.get(k) != v or k.startswith("TRACETUI_")}
        args = dict(argv=argv, env_added=added, cwd=os.getcwd())
        return RayChild(self.cluster, lane or 0, "command", args, run_id, log_path)


def connect(address: str, world_size: int, want_gpus: bool, folders: list[str], fresh: bool = False) -> Cluster:
    """The cluster for ``--ray ADDRESS``, with at least one lane; a :class:`ConfigError` naming
    why there is none, a :class:`ConnectionError` where Ray cannot reach it (said by
    :func:`.onray.ray_executor`). ``fresh``: each run a fresh process."""
    cluster = Cluster(address, world_size, want_gpus, folders, fresh)
    if not cluster.lanes:
        said = "; ".join(cluster.refused) or "no node is alive"
        cluster.close()
        raise ConfigError("--ray", f"no node of the cluster can take a trial ({said})",
                          "add a node that can, or run without --ray")
    return cluster


