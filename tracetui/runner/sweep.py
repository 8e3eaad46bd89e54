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
from dataclasses import replace
from pathlib import Path
from typing import Callable

from ..core import clock, warmup
from ..core.config import SweepConfig
from ..events.schema import ESTIMATE, NOTICE, RUN_FAILED, RUN_STARTED, STEP, SWEEP, make
from ..core.knobs import KNOBS, SHORT
from ..planning.plan import WAIT, Decision, Measured, Planner, RunSpec, TrialResult
from ..planning.search import make_planner
from ..events.log import EventLog, new_sweep_id
from ..core.trial import Trial
from . import worker
from .executor import executor
from .onray import ray_executor
from .runlog import make_log
from .lifetime import ensure_resource_tracker, trial_context
from .preflight import device_kind, gpu_model_warnings
from .supervise import Child, supervise
from .headstarts import LANES_PER_DEVICE, HeadStarts, head_starts_apply

#: where a failure message names its run's own log
_LOG_PATH = re.compile(r"\s*\((?:log|see): [^)]*\)|;? its log: \S+|\(see [^)]*\)")


class SweepBase:
    """What every kind of sweep (spawned workers here; a user's script or torchrun in
    :mod:`.script`) shares: the planner it asks what runs next, the lanes that run trials, what
    each run measured, the ``skipped``/``unavailable`` trials that never start, and running one
    trial again (the TUI's ``r``). A subclass says how one run's process starts (a
    :class:`~.supervise.Child`) and hands it to :func:`~.supervise.supervise`: :meth:`_run_one`.

    The scheduler: one lane (a thread) per GPU, or one on the configured device, each asking the
    planner for its next run (:meth:`run`). Every decision between lanes is taken under one
    condition, ``_cond``: which run a lane takes, the runs in progress, the runs waiting to go
    alone and the one going alone now (head starts, :class:`Sweep`). The event log has a lock of
    its own (``_log_lock``: one writer at a time), never held while a lane waits."""

    #: GPUs to run trials on side by side (one lane each); None: the configured device
    lanes: list[int | None] = [None]
    #: whether a run can be given fewer steps than ``--steps`` (a memory probe): not where a
    #: user's script decides its own
    short_runs = True
    #: head starts (:mod:`.headstarts`): each next run starts during the current one's warm-up
    head_starts = False

    def start_line(self) -> str | None:
        """One line on how the runs start or share the device, where there is something to say."""
        return None

    def estimate_line(self) -> str | None:
        """How long the runs left will take, and how that was derived (the planner's estimate:
        rough priors before any run finished, then what the finished runs measured); None where
        it cannot say."""
        with self._cond:
            est = self.planner.estimate(list(self.results))
        return est.line() if est.seconds is not None and est.runs else None

    def _setup(self, cfg: SweepConfig, trials: list[Trial], planner: Planner | None) -> None:
        self.cfg = cfg
        self.trials = trials
        self.planner = planner or make_planner(cfg, trials, self.short_runs)
        self.measured = Measured()
        self.plan: list[RunSpec] = []
        self.outcomes: dict[str, str] = {}
        self.results: list[TrialResult] = []
        self._stop = threading.Event()
        #: the scheduler's one condition (see the class's note)
        self._cond = threading.Condition(threading.RLock())
        self._busy = 0  # runs in progress
        self._ids: set[str] = set()
        self.interrupted = False
        #: set when two runs failed the same way before their first step: the settings, not a
        #: trial, are at fault, and every later run would fail the same way (minutes each)
        self.same_failure: str | None = None
        self._stepped: set[str] = set()
        self._stalled: set[str] = set()
        self._log_lock = threading.RLock()
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
        with self._cond:
            spec = RunSpec(self._run_id(d.trial, d.repeat, self._ids), d.trial, d.repeat, gpu, d.why, d.steps)
            self.plan.append(spec)
            self.measured.add(spec)
        return spec

    def stop(self) -> None:
        """Stop after the current run is told to stop; later runs do not start."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    # ---- running: the scheduler ----------------------------------------------------------------
    def lane_gpus(self) -> list[int | None]:
        """One entry per lane the scheduler runs (a thread each): the GPU it runs on."""
        return list(self.lanes)

    def run(self) -> dict[str, str]:
        """Ask the planner for runs until it is done, one per lane at a time; return
        run_id -> final status."""
        lanes = self.lane_gpus()
        # where the command's time went before this (its start, the fork server's imports, the
        # checks), and, at the end, the end (the account of tracetui.analysis.time_spent)
        self._emit(make(SWEEP, self.sweep_id, times={**clock.take(), "sweep": time.time()}))
        try:
            if len(lanes) == 1:
                self._lane(lanes[0])
            else:
                threads = [threading.Thread(target=self._lane, args=(g,), name=f"tracetui-lane-{g}", daemon=True)
                           for g in lanes]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
        finally:
            self._emit(make(SWEEP, self.sweep_id, times={"ended": time.time()}))
        if self.same_failure is not None:
            self._none_left_queued()
        elif self._stop.is_set():
            self.interrupted = True
        return self.outcomes

    def _lane(self, gpu: int | None) -> None:
        """One lane: the planner's next run, on ``gpu``, until there is none or the sweep stops."""
        try:
            while not self._stop.is_set() and self.same_failure is None and self._executor.lane_open(gpu):
                if (d := self._next_decision()) is None:
                    return
                try:
                    self._do(d, gpu)
                finally:
                    with self._cond:
                        self._busy -= 1
                        self._cond.notify_all()
        finally:
            self._lane_idle()

    def _next_decision(self) -> Decision | None:
        """The planner's next run for a lane, counted in progress; None once there is none (or
        the sweep stops). While the planner waits on a run in progress, so does the lane."""
        with self._cond:
            if (d := self.planner.next()) == WAIT:
                self._lane_idle()
            while d == WAIT and self._busy and not self._stop.is_set():
                self._cond.wait(0.5)
                d = self.planner.next()
            if d is None or d == WAIT or self._stop.is_set():
                return None
            self._busy += 1
            return d

    def _none_left_queued(self) -> None:
        """Every run fails the same way: what is left unrun is said, so no run waits "queued"."""
        while True:
            with self._cond:
                d = self.planner.next()
            if d is None or d == WAIT:
                break
            spec = self._spec(d, None)
            self._not_started(spec, "error", f"not run: every run fails the same way ({self.same_failure})")

    def _lane_idle(self) -> None:
        """A lane takes no more runs, or waits for the planner (head starts: turns go on)."""

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
        with self._log_lock:  # lanes run side by side: one writer at a time
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

    def _supervised(self, spec: RunSpec, child: Child, waiting: Callable[[], bool] | None = None) -> str:
        """Run one trial's process under the supervisor; record how it ended (a run that is to
        run again, :meth:`_again`, is not recorded). Its log is made here first: a runs folder
        that became unwritable mid-sweep is said in one line naming it, and no run is started
        that could not keep its log (what was measured before stays in the event log)."""
        why = make_log(child.log_path)
        if why:
            return self._not_started(spec, "error", f"not run: {why}; every step measured before is in {self.log.path}")
        status, message = supervise(spec, child, self._emit, self._stop, self.cfg.stall_timeout, waiting)
        if status == "stalled":
            with self._log_lock:
                self._stalled.add(spec.run_id)
        if not self._again(spec):
            self._finished(spec, status, message)
        return status

    def _again(self, spec: RunSpec) -> bool:
        """Whether ``spec``'s run ends to run again alone (a head start's: :meth:`~.headstarts.HeadStarts.again_alone`)."""
        return False

    def _finished(self, spec: RunSpec, status: str, message: str = "") -> None:
        result = self.measured.result(spec, status, message)
        with self._cond:
            self.results.append(result)
            self.planner.record(result)
            self._cond.notify_all()
        line = self.estimate_line()
        if line:  # the estimate, better with each run that ends: said by the monitor and headless
            self._emit(make(NOTICE, spec.run_id, level=ESTIMATE, message=line))

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
            cfg = replace(cfg, steps=spec.steps, warmup=warmup.shorter(cfg.warmup, spec.steps))
        return cfg.to_dict()

    def references(self, spec: RunSpec) -> list[tuple[float, float]]:
        with self._cond:
            return self.measured.references(spec.trial, self.cfg.min_steps)



class Sweep(SweepBase):
    """Runs the trials of ``cfg`` in spawned worker processes, as its planner decides.

    ``on_event`` is called (in the thread that calls :meth:`run`) with every event after it is
    on disk. :meth:`stop` may be called from any thread or a signal handler.
    """

    #: what each trial's process runs, given its payload and its event queue
    target: Callable[[dict, object], None] = staticmethod(worker.run)

    def __init__(self, cfg: SweepConfig, trials: list[Trial], on_event: Callable[[dict], None] | None = None,
                 sweep_id: str | None = None, lanes: list[int | None] | None = None,
                 planner: Planner | None = None):
        """``lanes``: GPUs to run trials on side by side (default: ``cfg.gpus``, or the device)."""
        self.on_event = on_event
        self.sweep_id = sweep_id or new_sweep_id()
        self.dir = Path(cfg.runs_dir) / self.sweep_id
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = EventLog(self.dir / "events.jsonl")
        self._setup(cfg, trials, planner)
        if cfg.ray:  # each trial a Ray task on the cluster's lanes (:mod:`.raycluster`)
            self._ctx, self._executor = None, ray_executor(cfg, self._device != "cpu", [str(self.dir.resolve())])
            self.lanes, self.warnings = self._executor.lanes(), []
        else:
            self._ctx = trial_context()  # the fork server starts here, before any app owns the terminal
            self._executor = executor(self._ctx)  # how each trial's process starts (:mod:`.executor`)
            self.lanes = lanes if lanes is not None else (cfg.gpu_list() or [None])
            self.warnings = gpu_model_warnings(self.lanes)
        #: head starts: the next run starts during the current one's warm-up (:mod:`.headstarts`)
        self.head_starts = not cfg.ray and head_starts_apply(cfg, self.planner, self.lanes, self._device)[0]
        #: the head starts of the running sweep (None: off, or between :meth:`run` calls)
        self._hs: HeadStarts | None = None
        # (under the scheduler's condition) runs waiting to go alone, and whether one goes now
        self._alone_pending = 0
        self._solo = False
        ensure_resource_tracker()

    def start_line(self) -> str | None:
        """One line on how the runs start (on a Ray cluster), or share the device (head starts)."""
        if self.cfg.ray:
            return self._executor.describe()
        if not self.head_starts:
            return None
        return (f"head starts: each next run starts during the one before's warm-up ({warmup.words(self.cfg.warmup)}, "
                "not measured) and waits, built, for its turn: no start beside a measured step "
                "(--no-head-start: one after another)")

    def lane_gpus(self) -> list[int | None]:
        """With head starts, :data:`~.headstarts.LANES_PER_DEVICE` lanes on the device: the
        current run's and the next one's, built early."""
        if self._hs is None:
            return super().lane_gpus()
        return [g for g in self.lanes for _ in range(LANES_PER_DEVICE)]

    def run(self) -> dict[str, str]:
        if not self.head_starts:
            return super().run()
        self._hs = HeadStarts(self._ctx, self.cfg, self._device,
                              references=self._references_now if self.cfg.until_confident is not None else None)
        try:
            return super().run()
        finally:
            hs, self._hs = self._hs, None
            hs.close()  # a run asked for again later (the monitor's r) runs alone

    def _lane_idle(self) -> None:
        if self._hs is not None:
            self._hs.turns.idle()

    def _again(self, spec: RunSpec) -> bool:
        return self._hs is not None and spec.run_id in self._hs.again_why

    def _references_now(self, run_id: str) -> list[tuple[float, float]]:
        """``--until-confident``'s references for a run getting a turn: with head starts, the
        runs before it ended after it started (complete by the turn that begins its measured
        steps, which waits for their reap)."""
        spec = next((s for s in self.plan if s.run_id == run_id), None)
        return self.references(spec) if spec is not None else []

    def _emit(self, event: dict) -> None:
        hs = self._hs
        if hs is not None:
            rid = event.get("run_id")
            if event.get("type") == STEP and event.get("peak_mem_gib"):
                hs.saw_step(rid, float(event["peak_mem_gib"]))
            if event.get("type") == RUN_FAILED:
                event = hs.again_alone(rid, event, rid in self._stepped)
        super()._emit(event)

    def close(self) -> None:
        try:
            self._executor.close()
        finally:
            self.log.close()

    def _run_one(self, spec: RunSpec, alone: bool = False) -> str:
        """Start ``spec``'s run: with head starts, once it has a seat (:meth:`_seat`), and
        again alone (:meth:`_run_alone`) where its attempt was no verdict on its split."""
        hs = None if alone else self._hs
        if hs is None:
            return self._start_run(spec, None)
        theirs = self._seat(spec, hs)
        if isinstance(theirs, str):  # not started: its status
            return theirs
        try:
            status = self._start_run(spec, theirs)
        finally:
            hs.turns.unseat(spec.run_id)
            theirs.close()
        if spec.run_id in hs.again_why:
            return self._run_alone(spec, hs)
        return status

    def _seat(self, spec: RunSpec, hs: HeadStarts):
        """A seat for ``spec``'s run (its end of the turns' pipe), once no run waits to go alone
        and the turns let it start; or its status, where it is not started."""
        while True:
            refusal = theirs = None
            with self._cond:
                if self._alone_pending:
                    hs.turns.idle()  # this lane waits: the resident runs go on, so that they can end
                while self._alone_pending and not self._stop.is_set():
                    self._cond.wait(0.2)
                if self._stop.is_set():
                    refusal = ("interrupted", "stopped by the sweep")
                elif self.same_failure is not None:  # decided while it waited for a head start
                    refusal = ("error", f"not run: every run fails the same way ({self.same_failure})")
                else:  # seated under the condition: a run going alone sees it resident, and waits
                    theirs = hs.turns.seat(spec.run_id)
            if refusal is not None:
                return self._not_started(spec, *refusal)
            if theirs is not None:
                return theirs
            hs.turns.wait_to_start(self._stop)  # not yet: the current run is not in its warm-up

    def _run_alone(self, spec: RunSpec, hs: HeadStarts) -> str:
        """Run ``spec``'s trial again, alone on the device, once every resident run has left and
        no other run goes alone (no run is seated meanwhile)."""
        hs.turns.idle()  # this lane waits: the resident runs go on, so that they can end
        with self._cond:
            self._alone_pending += 1
            while (self._solo or hs.turns.resident()) and not self._stop.is_set():
                self._cond.wait(0.2)
            stopped = self._stop.is_set()
            if not stopped:
                self._solo = True
                cause = hs.again_why[spec.run_id]
                why = (f"{spec.why}; " if spec.why else "") + f"alone: {cause} ({spec.run_id.split('/')[-1]})"
                # its own id: the planned ids of later repeats stay theirs
                again = RunSpec(f"{spec.run_id}-alone", spec.trial, spec.repeat, spec.gpu, why, spec.steps)
                self._ids.add(again.run_id)
                self.plan.append(again)
                self.measured.add(again)
        try:
            if stopped:
                said = "stopped by the sweep before it could run again alone"
                self._emit(make(RUN_FAILED, spec.run_id, kind="interrupted", message=said))
                self._finished(spec, "interrupted", said)
                return "interrupted"
            return self._run_one(again, alone=True)
        finally:
            with self._cond:
                self._alone_pending -= 1
                if not stopped:
                    self._solo = False
                self._cond.notify_all()

    def _start_run(self, spec: RunSpec, theirs) -> str:
        """Start ``spec``'s worker under the supervisor; ``theirs``: its seat (head starts), or None."""
        hs = self._hs if theirs is not None else None
        if hs is not None:
            hs.starting(spec.run_id, spec.trial.micro_batch)
        log_path = self.dir / (spec.run_id.split("/", 1)[1].replace("#", "_r") + ".log")
        where = self._executor.where(spec.gpu)
        if where:
            self._emit(make("notice", spec.run_id, level="info", message=where))
        payload = dict(run_id=spec.run_id, config=self.payload_config(spec), trial=spec.trial.fields(),
                       repeat=spec.repeat, gpu=spec.gpu, log_path=str(log_path), why=spec.why, owner_pid=os.getpid(),
                       # the trial's parent: the fork server, or this process for a spawned one
                       parent_pid=self._executor.parent_pid())
        if self.cfg.until_confident is not None:
            payload["references"] = self.references(spec)
        waiting = None
        if hs is not None:
            turns = hs.turns
            # started beside the run before it (a head start), or the first / after a gap
            payload.update(turn=theirs, head_starts=True, head_start=turns.resident() > 1)
            waiting = lambda: turns.waiting(spec.run_id)  # noqa: E731 - waiting for a turn is no stall
        child = self._executor.worker(self.target, payload, f"tracetui-{spec.trial.slug(SHORT)}", log_path, spec.gpu)
        child.memory_limit = self.cfg.memory_limit
        return self._supervised(spec, child, waiting)
