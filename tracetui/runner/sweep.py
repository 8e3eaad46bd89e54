"""The sweep: ask the planner what runs next, start one worker process per run under the
supervisor (:mod:`.supervise`), pump its events to disk and to whoever listens (TUI, headless
progress); tell the planner how each run ended.

Each run gets a fresh process and a fresh bounded queue: a crash, an out-of-memory or a worker
killed while holding the queue's lock cannot poison the next run.

No trial process outlives tracetui (see :mod:`.lifetime`), and a run that stops making progress
is stopped and reported ``stalled`` (see :func:`.supervise.stall_limit`).
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Callable

from ..config import SweepConfig
from ..events import RUN_FAILED, RUN_STARTED, STEP, make
from ..knobs import KNOBS, SHORT
from ..plan import WAIT, Decision, Measured, Planner, RunSpec, TrialResult
from ..search import make_planner
from ..store import EventLog
from ..trial import Trial
from .lifetime import restart_server_if_gone, server_pid, trial_context
from .preflight import device_kind
from .supervise import Child, WorkerChild, supervise

#: queue size: large enough for bursts, small enough to bound memory
QUEUE_MAX = 10_000
#: where a failure message names its run's own log
_LOG_PATH = re.compile(r"\s*\((?:log|see): [^)]*\)|;? its log: \S+|\(see [^)]*\)")


class SweepBase:
    """What every kind of sweep (spawned workers here; a user's script or torchrun in
    :mod:`.script`) shares: the planner it asks what runs next, the lanes that run trials, what
    each run measured, the ``skipped``/``unavailable`` trials that never start, and running one
    trial again (the TUI's ``r``). A subclass says how one run's process starts (a
    :class:`~.supervise.Child`) and hands it to :func:`~.supervise.supervise`: :meth:`_run_one`."""

    #: GPUs to run trials on side by side (one lane each); None: the configured device
    lanes: list[int | None] = [None]
    #: whether a run can be given fewer steps than ``--steps`` (a memory probe): not where a
    #: user's script decides its own
    short_runs = True

    def _setup(self, cfg: SweepConfig, trials: list[Trial], planner: Planner | None) -> None:
        self.cfg = cfg
        self.trials = trials
        self.planner = planner or make_planner(cfg, trials, self.short_runs)
        self.measured = Measured()
        self.plan: list[RunSpec] = []
        self.outcomes: dict[str, str] = {}
        self.results: list[TrialResult] = []
        self._stop = threading.Event()
        self._wake = threading.Condition(threading.RLock())
        self._ids: set[str] = set()
        self.interrupted = False
        #: set when two runs failed the same way before their first step: the settings, not a
        #: trial, are at fault, and every later run would fail the same way (minutes each)
        self.same_failure: str | None = None
        self._stepped: set[str] = set()
        self._stalled: set[str] = set()
        self._lock = threading.RLock()
        self._setup_failures: list[str] = []
        self._device = device_kind(cfg)

    def planned(self) -> list[RunSpec] | None:
        """The runs the planner will make, when it knows ahead (for the monitor's list)."""
        preview = self.planner.preview()
        if preview is None:
            return None
        ids: set[str] = set()
        return [RunSpec(self._run_id(d.trial, d.repeat, ids), d.trial, d.repeat, why=d.why) for d in preview]

    def trial_of(self, run_id: str) -> Trial | None:
        """The trial of a run made or planned by this sweep."""
        for spec in self.plan + (self.planned() or []):
            if spec.run_id == run_id:
                return spec.trial
        return None

    def _run_id(self, trial: Trial, repeat: int, taken: set[str]) -> str:
        base = f"{self.sweep_id}/{trial.slug(SHORT)}"
        rid = base + (f"#{repeat + 1}" if self.cfg.repeats > 1 or repeat else "")
        n = repeat + 1
        while rid in taken:
            n += 1
            rid = f"{base}#{n}"
        taken.add(rid)
        return rid

    def _spec(self, d: Decision, gpu: int | None) -> RunSpec:
        with self._wake:
            spec = RunSpec(self._run_id(d.trial, d.repeat, self._ids), d.trial, d.repeat, gpu, d.why, d.steps)
            self.plan.append(spec)
            self.measured.add(spec)
        return spec

    def stop(self) -> None:
        """Stop after the current run is told to stop; later runs do not start."""
        self._stop.set()
        with self._wake:
            self._wake.notify_all()

    # ---- running ---------------------------------------------------------------------------
    def run(self) -> dict[str, str]:
        """Ask the planner for runs until it is done, one per lane at a time; return
        run_id -> final status."""
        busy = [0]

        def lane(gpu: int | None) -> None:
            while not self._stop.is_set() and self.same_failure is None:
                with self._wake:
                    d = self.planner.next()
                    while d == WAIT and busy[0] and not self._stop.is_set():
                        self._wake.wait(0.5)
                        d = self.planner.next()
                    if d is None or d == WAIT or self._stop.is_set():
                        return
                    busy[0] += 1
                try:
                    self._do(d, gpu)
                finally:
                    with self._wake:
                        busy[0] -= 1
                        self._wake.notify_all()

        lanes = self.lanes
        if len(lanes) == 1:
            lane(lanes[0])
        else:
            threads = [threading.Thread(target=lane, args=(g,), name=f"tracetui-lane-{g}", daemon=True) for g in lanes]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        if self.same_failure is not None:
            while True:  # left unrun: say so, so no run waits "queued" for ever
                with self._wake:
                    d = self.planner.next()
                if d is None or d == WAIT:
                    break
                spec = self._spec(d, None)
                self._not_started(spec, "error", f"not run: every run fails the same way ({self.same_failure})")
        elif self._stop.is_set():
            self.interrupted = True
        return self.outcomes

    def rerun(self, trial: Trial) -> str:
        """Run ``trial`` once more in this sweep."""
        n = sum(1 for s in self.plan if s.trial == trial)
        self._stop.clear()
        return self._do(Decision(trial, n, why="asked to run again"), self.lanes[0])

    def _do(self, d: Decision, gpu: int | None) -> str:
        spec = self._spec(d, gpu)
        why_not = d.skip and d.why
        kind = d.skip or "unavailable"
        if not why_not:
            why_not = next((w for w in (KNOBS[n].unavailable(v, self._device) for n, v in d.trial.settings) if w), None)
        if why_not:
            status = self._not_started(spec, kind, why_not)
        else:
            status = self._run_one(spec)
        self.outcomes[spec.run_id] = status
        return status

    def _not_started(self, spec: RunSpec, kind: str, message: str) -> str:
        """Record a trial the sweep decided not to start (``skipped``, ``unavailable``)."""
        if message.startswith(kind + ": "):  # the status says it already
            message = message[len(kind) + 2:]
        self._emit(make(RUN_STARTED, spec.run_id, label=spec.label, mode="not started", why=spec.why,
                        **spec.trial.fields()))
        self._emit(make(RUN_FAILED, spec.run_id, kind=kind, message=message))
        self._finished(spec, kind, message)
        return kind

    def _emit(self, event: dict) -> None:
        """Every event of the sweep, once: to the log, then to whoever listens."""
        with self._lock:  # lanes run side by side: one writer at a time
            if event.get("run_id") in self._stalled:
                return  # what a stalled run sends after it was stopped is not measured
            if event.get("type") == RUN_STARTED and not event.get("why"):
                # a script's callback cannot know why the planner ran it (a memory probe is no
                # split of the summary): the sweep says so, as its own workers do
                why = next((s.why for s in self.plan if s.run_id == event.get("run_id")), "")
                if why:
                    event = dict(event, why=why)
            self._track(event)
            self.log.append(event)
            if self.on_event is not None:
                self.on_event(event)

    def _supervised(self, spec: RunSpec, child: Child) -> str:
        """Run one trial's process under the supervisor; record how it ended."""
        status, message = supervise(spec, child, self._emit, self._stop, self.cfg.stall_timeout)
        if status == "stalled":
            with self._lock:
                self._stalled.add(spec.run_id)
        self._finished(spec, status, message)
        return status

    def _finished(self, spec: RunSpec, status: str, message: str = "") -> None:
        result = self.measured.result(spec, status, message)
        with self._wake:
            self.results.append(result)
            self.planner.record(result)
            self._wake.notify_all()

    def _track(self, event: dict) -> None:
        """Book-keeping on every event, before it is written: the ``same failure`` rule."""
        if event.get("type") == STEP:
            self._stepped.add(event["run_id"])
        elif (event.get("type") == RUN_FAILED and event.get("kind") == "error"
              and event["run_id"] not in self._stepped and not event.get("message", "").startswith("not run:")):
            # the same failure in every run, whatever each run's own log is called
            self._setup_failures.append(_LOG_PATH.sub("", event.get("message", "")))
            if self._setup_failures.count(self._setup_failures[-1]) >= 2:
                self.same_failure = self._setup_failures[-1]
        self.measured.observe(event)

    def payload_config(self, spec: RunSpec) -> dict:
        """The config a run trains with: the sweep's, with the trial's varied settings (and the
        planner's shorter run, where it asked for one)."""
        cfg = self.cfg.for_trial(spec.trial)
        if spec.steps is not None and spec.steps < cfg.steps:
            cfg = replace(cfg, steps=spec.steps, warmup=min(cfg.warmup, spec.steps - 1))
        return cfg.to_dict()

    def references(self, spec: RunSpec) -> list[tuple[float, float]]:
        with self._wake:
            return self.measured.references(spec.trial, self.cfg.min_steps)


def new_sweep_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:4]


def _ensure_resource_tracker() -> None:
    """Start multiprocessing's resource tracker now, while ``sys.stderr`` is the real one.

    Textual replaces ``sys.stderr``; a tracker started later would be handed its bad file
    descriptor ("bad value(s) in fds_to_keep")."""
    try:
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    except Exception:  # noqa: BLE001 - platforms without one need nothing
        pass


class Sweep(SweepBase):
    """Runs the trials of ``cfg`` in spawned worker processes, as its planner decides.

    ``on_event`` is called (in the thread that calls :meth:`run`) with every event after it is
    on disk. :meth:`stop` may be called from any thread or a signal handler.
    """

    def __init__(self, cfg: SweepConfig, trials: list[Trial], on_event: Callable[[dict], None] | None = None,
                 sweep_id: str | None = None, lanes: list[int | None] | None = None,
                 planner: Planner | None = None):
        """``lanes``: GPU indices to run trials on at the same time (default: ``cfg.gpus``, or
        one lane on the configured device)."""
        self.on_event = on_event
        self.sweep_id = sweep_id or new_sweep_id()
        self.dir = Path(cfg.runs_dir) / self.sweep_id
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = EventLog(self.dir / "events.jsonl")
        self._setup(cfg, trials, planner)
        self._ctx = trial_context()  # the fork server starts here, before any app owns the terminal
        self.lanes = lanes if lanes is not None else (cfg.gpu_list() or [None])
        self.warnings = gpu_model_warnings(self.lanes)
        _ensure_resource_tracker()

    def close(self) -> None:
        self.log.close()

    def _run_one(self, spec: RunSpec) -> str:
        log_path = self.dir / (spec.run_id.split("/", 1)[1].replace("#", "_r") + ".log")
        if spec.gpu is not None:
            self._emit(make("notice", spec.run_id, level="info", message=f"runs on GPU {spec.gpu}"))
        forked = self._ctx.get_start_method() == "forkserver"
        if forked:
            restart_server_if_gone()
        payload = dict(run_id=spec.run_id, config=self.payload_config(spec), trial=spec.trial.fields(),
                       repeat=spec.repeat, gpu=spec.gpu, log_path=str(log_path), why=spec.why, owner_pid=os.getpid(),
                       # the trial's parent: the fork server, or this process for a spawned one
                       parent_pid=(server_pid() if forked else None) or os.getpid())
        if self.cfg.until_confident is not None:
            payload["references"] = self.references(spec)
        from . import worker

        child = WorkerChild(self._ctx, worker.run, payload, f"tracetui-{spec.trial.slug(SHORT)}", QUEUE_MAX, log_path)
        child.memory_limit = self.cfg.memory_limit
        return self._supervised(spec, child)


def gpu_model_warnings(lanes: list[int | None]) -> list[str]:
    """Runs on GPUs of different models cannot be compared: say so before they start."""
    gpus = [g for g in lanes if g is not None]
    if len(gpus) < 2:
        return []
    try:
        import pynvml

        pynvml.nvmlInit()
        names = {g: pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(g)) for g in gpus}
    except Exception:  # noqa: BLE001 - no NVML: nothing to compare
        return []
    names = {g: (n.decode() if isinstance(n, bytes) else n) for g, n in names.items()}
    if len(set(names.values())) > 1:
        listed = ", ".join(f"GPU {g}: {n}" for g, n in names.items())
        return [f"the GPUs are not the same model ({listed}): their times cannot be compared with each other"]
    return []
