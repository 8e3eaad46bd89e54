"""Folding events into runs: :class:`RunData` holds what one run (one process, one split)
reported, :class:`Results` every run of a stream or log, within a memory budget
(:mod:`tracetui.core.bounded`). Incremental: the monitor feeds events as they come."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from ..core.bounded import MAX_MARKS, MAX_NOTICES, MAX_SWEEPS, MEMORY_BUDGET, NOTICE_CHARS, EvenSample, approx_bytes
from ..core.phases import BETWEEN_NAMES
from ..events.schema import (AGAIN_KINDS, GPU, NOTICE, RUN_FAILED, RUN_FAILED_KINDS, RUN_FINISHED, RUN_SETTINGS,
                             RUN_STAGE, RUN_STARTED, STEP, SWEEP, WAITING_STAGE)
from ..core.trial import Trial

#: the statuses of a run still measuring (or about to): every other status is how it ended
LIVE_STATUSES = ("queued", "warming up", "running")


@dataclass
class RunData:
    """Everything one run (one process, one split) reported."""

    run_id: str
    started: dict = field(default_factory=dict)
    #: an even sample of the run's steps and GPU samples once the memory budget thinned them
    #: (:mod:`tracetui.core.bounded`); the counts below are of every step reported
    steps: list[dict] = field(default_factory=EvenSample)
    gpu: list[dict] = field(default_factory=EvenSample)
    notices: list[str] = field(default_factory=list)
    measured_seen: int = 0
    warmup_seen: int = 0
    #: how many warm-up steps the run took and why, as its probe decided (:mod:`tracetui.core.warmup`)
    warmup_why: str = ""
    status: str = "queued"
    message: str = ""
    finished: dict = field(default_factory=dict)
    #: what the trainer really ran with (rank 0's read-back)
    settings: dict = field(default_factory=dict)
    #: sweep id -> the machine its started runs reported (shared by the runs of one Results)
    sweep_machines: dict = field(default_factory=dict, repr=False, compare=False)
    #: when each stage before the first step began, seconds after the process started
    stages: dict = field(default_factory=dict)
    #: when the sweep asked for the run's process (unix seconds, from its first stage)
    asked_at: float | None = None
    #: what the run last said it was doing before its first step (rank 0's ``run_stage``)
    stage: str = ""
    #: the trainer's work between steps (:data:`tracetui.core.phases.BETWEEN`), of every step reported
    #: (rank 0's): kind -> [how many, ms in all]
    between: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.started.get("label", self.run_id.rsplit("/", 1)[-1])

    @property
    def trial(self) -> Trial:
        """The trial this run measured (from its start event's fields, never its label)."""
        return Trial.from_fields(self.started)

    @property
    def machine(self) -> str:
        env = self.started.get("env")
        if not env:  # a trial the sweep never started: where the sweep's other runs ran
            return self.sweep_machines.get(self.run_id.split("/", 1)[0], "CPU")
        gpu = env.get("gpu_name") or "CPU"  # (logs shown side by side: each file's runs apart, named by it)
        return f"{gpu} ({self.started['log']})" if self.started.get("log") else gpu

    @property
    def split_status(self) -> str:
        """The status this run gives its split's row: a run built early that waits for its turn
        (a head start) is ``queued`` there, as it would be without head starts; the run list
        says what it waits for."""
        if self.status == "warming up" and self.stage == WAITING_STAGE and not self.steps:
            return "queued"
        return self.status

    def measured(self) -> list[dict]:
        if self.status in AGAIN_KINDS:
            return []  # an attempt run again (out of memory beside a head start, or lost): no steps of the split
        return [s for s in self.steps if not s.get("warmup") and s.get("rank", 0) == 0 and s["wall_ms"] > 0]

    def measured_count(self) -> int:
        """How many measured steps the run reported (:meth:`measured` may hold a sample)."""
        return 0 if self.status in AGAIN_KINDS else self.measured_seen

    def head_bytes(self) -> int:
        """What the run holds besides its steps and GPU samples (estimated bytes)."""
        return (approx_bytes(self.started) + approx_bytes(self.settings) + approx_bytes(self.stages)
                + approx_bytes(self.finished) + approx_bytes(self.notices) + len(self.message))

    def add(self, event: dict) -> int:
        """Fold in one event; the bytes its steps or GPU samples grew by (:mod:`tracetui.core.bounded`)."""
        etype = event["type"]
        if etype == RUN_STARTED:
            self.started = event
            self.status = "warming up"
        elif etype == STEP:
            if event.get("warmup_why") and event.get("rank", 0) == 0:
                self.warmup_why = f"{event.get('warmup_steps')} ({event['warmup_why']})"
            if event.get("warmup"):
                self.warmup_seen += 1
            elif event.get("rank", 0) == 0 and event["wall_ms"] > 0:
                self.measured_seen += 1
            if isinstance(event.get("between_ms"), dict) and event.get("rank", 0) == 0:
                for kind, each in event["between_ms"].items():
                    if kind in BETWEEN_NAMES and isinstance(each, list):
                        seen = self.between.setdefault(kind, [0, 0.0])
                        seen[0] += len(each)
                        seen[1] += sum(max(0.0, float(x)) for x in each)
            if self.status in ("queued", "warming up") and not event.get("warmup"):
                self.status = "running"
            return self.steps.append(event) or 0  # (a plain list, with no budget: None)
        elif etype == GPU:
            return self.gpu.append(event) or 0
        elif etype == NOTICE:
            self.notices.append(str(event.get("message", ""))[:NOTICE_CHARS])
            if len(self.notices) > MAX_NOTICES:  # the first ones and the latest
                del self.notices[MAX_NOTICES // 2]
        elif etype == RUN_STAGE:
            if event.get("rank", 0) == 0 and isinstance(event.get("stages"), dict):
                self.stages, self.stage = event["stages"], str(event.get("stage") or "")
                # the earliest reading: a swept script's callback sends its stages at once,
                # at its first step, each with its own time since the process started
                asked = event["t"] - float(event["elapsed_s"])
                self.asked_at = asked if self.asked_at is None else min(self.asked_at, asked)
        elif etype == RUN_SETTINGS:
            if event.get("rank", 0) == 0 or not self.settings:
                self.settings = event.get("settings") or {}
        elif etype == RUN_FINISHED:
            # under data parallel every rank finishes; rank 0's record stands, and a rank that
            # failed is not overruled by one that finished after it
            if event.get("rank", 0) == 0 and self.status not in RUN_FAILED_KINDS:
                self.status = "ok"
                self.finished = event
        elif etype == RUN_FAILED:
            self.status = event.get("kind", "error")
            self.message = event.get("message", "")
        return 0


class Results:
    """All runs seen so far, in arrival order, within ``budget`` bytes (estimated,
    :mod:`tracetui.core.bounded`): past it the longest runs' steps are thinned to an even sample, and
    once that cannot free enough, runs that start later are left out (``left_out`` counts their
    events). ``budget=None``: everything kept (``tracetui show --export``: a log read whole)."""

    def __init__(self, budget: int | None = MEMORY_BUDGET) -> None:
        self.runs: dict[str, RunData] = {}
        self.sweep_machines: dict[str, str] = {}
        self.boot_cache: dict[tuple, tuple[int, list[float]]] = {}
        #: sweep id -> when its own parts happened (``sweep`` events: :mod:`tracetui.core.clock`)
        self.sweep_times: dict[str, dict[str, float]] = {}
        self.budget = budget
        #: estimated bytes held, and per run what besides its samples
        self.held = 0
        self._heads: dict[str, int] = {}
        #: events of runs left out of the summary for want of memory (every one is in the log)
        self.left_out = 0

    def add(self, event: dict) -> RunData | None:
        """Fold in one event; the run it is of (None for a sweep's own event, or a run left out)."""
        if event["type"] == SWEEP:
            if event["run_id"] in self.sweep_times or len(self.sweep_times) < MAX_SWEEPS:
                times = self.sweep_times.setdefault(event["run_id"], {})
                for mark, at in (event.get("times") or {}).items():
                    if mark in times or len(times) < MAX_MARKS:
                        times[mark] = at
            return None
        run = self.runs.get(event["run_id"])
        if run is None:
            if self.budget is not None and self.held > self.budget and not self._thin():
                self.left_out += 1
                return None
            run = self.runs[event["run_id"]] = RunData(event["run_id"], sweep_machines=self.sweep_machines)
            if self.budget is None:
                run.steps, run.gpu = [], []
        grown = run.add(event)
        if self.budget is not None:
            if event["type"] in (STEP, GPU):
                self.held += grown
            else:
                head = run.head_bytes()
                self.held += head - self._heads.get(run.run_id, 0)
                self._heads[run.run_id] = head
            if self.held > self.budget:
                self._thin()
        if event["type"] == RUN_STARTED and event.get("env"):
            self.sweep_machines.setdefault(event["run_id"].split("/", 1)[0], run.machine)
        return run

    def _thin(self) -> bool:
        """Thin the largest samples until within the budget; whether that got there."""
        while self.held > self.budget:
            samples = [x for r in self.runs.values() for x in (r.steps, r.gpu) if len(x) >= 4]
            if not samples:
                return False
            self.held -= max(samples, key=lambda x: x.size).thin()
        return True

    def thinned(self) -> list[RunData]:
        """The runs whose steps or GPU samples are held as an even sample."""
        return [r for r in self.runs.values() if getattr(r.steps, "stride", 1) > 1 or getattr(r.gpu, "stride", 1) > 1]

    def extend(self, events: Iterable[dict]) -> "Results":
        for e in events:
            self.add(e)
        return self


def repeat_mark(run_id: str) -> str:
    """Which run of its trial a run id names (``2`` of ``.../4x1#2``); "" for a trial's one run
    (:meth:`tracetui.runner.sweep.SweepBase` writes them)."""
    tail = run_id.rsplit("/", 1)[-1]
    return tail.rsplit("#", 1)[-1] if "#" in tail else ""
