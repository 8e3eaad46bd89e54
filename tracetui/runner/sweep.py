"""The sweep: ask the planner what runs next, start one worker process per run under the
supervisor (:mod:`.supervise`), pump its events to disk and to whoever listens (TUI, headless
progress); tell the planner how each run ended.

Each run gets a fresh process and a fresh bounded queue: a crash, an out-of-memory or a worker
killed while holding the queue's lock cannot poison the next run.

No trial process outlives tracetui (see :mod:`.lifetime`), and a run that stops making progress
is stopped and reported ``stalled`` (see :func:`.supervise.stall_limit`).
"""

from __future__ import annotations

import errno
import os
import re
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Callable

from ..core import clock, warmup
from ..core.config import SweepConfig
from ..events.schema import RUN_FAILED, RUN_STARTED, STEP, SWEEP, make
from ..core.knobs import KNOBS, SHORT
from ..planning.plan import WAIT, Decision, GridPlanner, Measured, Planner, RunSpec, TrialResult
from ..planning.search import card_gib, make_planner
from ..events.log import EventLog
from ..core.trial import Trial
from . import worker
from .lifetime import restart_server_if_gone, server_pid, trial_context
from .preflight import device_kind
from .supervise import Child, WorkerChild, supervise
from .turns import CONTEXT_GIB, Turns

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
    #: head starts (:mod:`.turns`): each next run starts during the current one's warm-up
    relay = False

    def start_line(self) -> str | None:
        """One line on how the runs start or share the device, where there is something to say."""
        return None

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
            try:
                lane_runs(gpu)
            finally:
                self._lane_done()

        def lane_runs(gpu: int | None) -> None:
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
        # where the command's time went before this (its start, the fork server's imports, the
        # checks), and, at the end, the end (the account of tracetui.analysis.time_spent)
        self._emit(make(SWEEP, self.sweep_id, times={**clock.take(), "sweep": time.time()}))
        try:
            if len(lanes) == 1:
                lane(lanes[0])
            else:
                threads = [threading.Thread(target=lane, args=(g,), name=f"tracetui-lane-{g}", daemon=True)
                           for g in lanes]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
        finally:
            self._emit(make(SWEEP, self.sweep_id, times={"ended": time.time()}))
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

    def _lane_done(self) -> None:
        """A lane takes no more runs (head starts: no turn waits for it)."""

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
            with self._lock:
                self._stalled.add(spec.run_id)
        if not self._again(spec):
            self._finished(spec, status, message)
        return status

    def _again(self, spec: RunSpec) -> bool:
        """Whether ``spec``'s run ends to run again alone (a head start's: :meth:`Sweep._again_alone`)."""
        return False

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
            cfg = replace(cfg, steps=spec.steps, warmup=warmup.shorter(cfg.warmup, spec.steps))
        return cfg.to_dict()

    def references(self, spec: RunSpec) -> list[tuple[float, float]]:
        with self._wake:
            return self.measured.references(spec.trial, self.cfg.min_steps)


def make_log(path: Path) -> str | None:
    """Make a run's log file (empty, or left as it is); why it cannot be, in words, or None: a
    name too long is said as such (the folder is fine), anything else as the runs folder's."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NONBLOCK, 0o644))
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return (f"its log's path is longer than the file system takes ({len(os.fsencode(path.name))} bytes "
                    f"of name, {len(os.fsencode(str(path)))} of path): give a shorter --runs-dir")
        return f"the runs folder {path.parent} cannot be written any more ({exc.strerror or exc})"
    return None


def new_sweep_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:4]


def ensure_resource_tracker() -> None:
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

    #: what each trial's process runs, given its payload and its event queue
    target: Callable[[dict, object], None] = staticmethod(worker.run)

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
        #: head starts: the next run starts during the current one's warm-up (:mod:`.turns`)
        self.relay = relaying(cfg, self.planner, self.lanes, self._device)[0]
        self.turns: Turns | None = None
        #: runs that run again alone, and why (:meth:`_again_alone`)
        self._again_why: dict[str, str] = {}
        self._footprint: float | None = None  # GiB the largest built run held (head starts)
        self._per_example: float | None = None  # the most GiB a step held per example (head starts)
        self._micro_batch: dict[str, int] = {}
        self._total_gib: float | None = None
        self._alone = threading.Condition()
        self._alone_pending = 0
        self._solo = threading.Lock()
        ensure_resource_tracker()

    def start_line(self) -> str | None:
        """One line on how the runs share the device: with head starts."""
        if not self.relay:
            return None
        return (f"head starts: each next run starts during the one before's warm-up ({warmup.words(self.cfg.warmup)}, "
                "not measured) and waits, built, for its turn: no start beside a measured step "
                "(--no-head-start: one after another)")

    def run(self) -> dict[str, str]:
        if not self.relay:
            return super().run()
        self.turns = Turns(self._ctx, room=self._room, room_to_step=self._room_to_step,
                           on_go=self._references_now if self.cfg.until_confident is not None else None)
        lanes, self.lanes = self.lanes, self.lanes * 2
        try:
            return super().run()
        finally:
            self.lanes = lanes
            turns, self.turns = self.turns, None
            turns.close()  # a run asked for again later (the monitor's r) runs alone

    def _lane_done(self) -> None:
        if self.turns is not None:
            self.turns.idle()

    def _again(self, spec: RunSpec) -> bool:
        return spec.run_id in self._again_why

    def _references_now(self, run_id: str) -> list[tuple[float, float]]:
        """``--until-confident``'s references for a run getting a turn: with head starts, the
        runs before it ended after it started (complete by the turn that begins its measured
        steps, which waits for their reap)."""
        spec = next((s for s in self.plan if s.run_id == run_id), None)
        return self.references(spec) if spec is not None else []

    def _step_gib(self, run_id: str, total: float) -> float | None:
        """What ``run_id``'s steps may hold on the device, weights included (GiB): the most a
        step of this sweep has held per example so far, times the run's micro-batch, and a
        quarter more; None before any step was measured."""
        mb = self._micro_batch.get(run_id)
        if self._per_example is None or mb is None:
            return None
        return min(total, 1.25 * self._per_example * mb)

    def _card_total(self) -> float | None:
        """The GPU's memory (GiB), read once: it is asked every few tenths of a second while a
        lane waits to start a run."""
        if self._total_gib is None:
            self._total_gib = card_gib(self.cfg)
        return self._total_gib

    def _room(self, current: str, footprint: float | None) -> bool:
        """Head starts: whether the device has room for one more run beside ``current``: the
        free memory of its GPU (NVML) against what a built run held (the largest said so far),
        its CUDA context, what the current run's steps may still take (:meth:`_step_gib`; a
        quarter of the card before any step was measured) and a margin. Always on the CPU."""
        if self._device != "cuda":
            return True
        free, total = card_gib(self.cfg, free=True), self._card_total()
        if free is None or total is None:
            return False  # cannot tell: no head start
        if footprint is not None:
            self._footprint = max(self._footprint or 0.0, footprint)
        if self._footprint is None:
            return False
        steps = self._step_gib(current, total)
        need = 1.25 * self._footprint + CONTEXT_GIB + (steps if steps is not None else total / 4)
        return free >= need + 0.05 * total

    def _room_to_step(self, run_id: str) -> bool:
        """Head starts: whether ``run_id`` (built) may take its warm-up steps while the run
        before it exits and still holds its memory: where its steps' estimate fits in what is
        free, with a margin; always on the CPU. (With ``--until-confident`` too: the references
        its stopping rule needs come with the turn that begins its measured steps, after the
        run before has been reaped.)"""
        if self._device != "cuda":
            return True
        free, total = card_gib(self.cfg, free=True), self._card_total()
        steps = self._step_gib(run_id, total) if total is not None else None
        return free is not None and steps is not None and free >= steps + 0.05 * total

    def _emit(self, event: dict) -> None:
        rid = event.get("run_id")
        if event.get("type") == STEP and event.get("peak_mem_gib") and rid in self._micro_batch:
            per = float(event["peak_mem_gib"]) / self._micro_batch[rid]
            self._per_example = max(self._per_example or 0.0, per)
        if self.relay and event.get("type") == RUN_FAILED and self.turns is not None:
            event = self._again_alone(rid, event)
        super()._emit(event)

    def _again_alone(self, rid: str, event: dict) -> dict:
        """A head start's failure that is no verdict on its split, said as such; the run then
        runs again alone (:meth:`_run_alone`):

        - ``lost``: built early, beside another run, it waited for its turn when something outside
          killed the fork server (and with it every process forked from it). (A run going alone
          has no seat: never lost. Not judged by time: the time of a death the supervisor reads
          afterwards is not the time it happened.)
        - ``crowded``: out of memory on a GPU while the run before or after it was resident
          beside it, judged by when the run said so (its own event's time). On the CPU a run's
          own cap is what it ran out of; on a GPU the caching allocator says out of memory
          itself: a death by a signal there is no crowding."""
        message = str(event.get("message") or "")
        if (event.get("kind") == "crashed" and "fork server" in message and rid not in self._stepped
                and self.turns.had_company(rid)):
            self._again_why[rid] = "its fork server was killed before its first step"
            return dict(event, kind="lost", message=f"{message}; it had taken no step, so it runs again alone")
        if (event.get("kind") == "oom" and event.get("rank", 0) == 0 and self._device == "cuda"
                and "killed by" not in message and self.turns.beside(rid, float(event.get("t") or time.time()))):
            self._again_why[rid] = "out of memory beside the next run, built early"
            return dict(event, kind="crowded", message=(
                "out of memory beside the next run, built early (a head start), so run again alone"
                + (f" ({message})" if message else "")))
        return event

    def close(self) -> None:
        self.log.close()

    def _run_one(self, spec: RunSpec, alone: bool = False) -> str:
        turns = None if alone else self.turns
        theirs = None
        while turns is not None and theirs is None:
            with self._alone:  # a run going again alone has the device to itself
                if self._alone_pending:
                    turns.idle()  # this lane waits: the resident runs go on, so that they can end
                while self._alone_pending and not self._stop.is_set():
                    self._alone.wait(0.2)
                if self._stop.is_set():
                    return self._not_started(spec, "interrupted", "stopped by the sweep")
                if self.same_failure is not None:  # decided while it waited for a head start
                    return self._not_started(spec, "error",
                                             f"not run: every run fails the same way ({self.same_failure})")
                # seated under the same lock: a run going alone sees it resident, and waits
                theirs = turns.seat(spec.run_id)
            if theirs is None:  # head starts: not yet (the current run is not in its warm-up)
                turns.wait_to_start(self._stop)
        try:
            status = self._start_run(spec, turns, theirs)
        finally:
            if turns is not None:
                turns.unseat(spec.run_id)
                theirs.close()
        if spec.run_id in self._again_why:
            return self._run_alone(spec)
        return status

    def _run_alone(self, spec: RunSpec) -> str:
        """Run ``spec``'s trial again, alone on the device, once every resident run has left
        (no run is seated meanwhile)."""
        if self.turns is not None:
            self.turns.idle()  # this lane waits: the resident runs go on, so that they can end
        with self._alone:
            self._alone_pending += 1
        try:
            with self._solo:
                with self._alone:
                    while self.turns is not None and self.turns.resident() and not self._stop.is_set():
                        self._alone.wait(0.2)
                if self._stop.is_set():
                    said = "stopped by the sweep before it could run again alone"
                    self._emit(make(RUN_FAILED, spec.run_id, kind="interrupted", message=said))
                    self._finished(spec, "interrupted", said)
                    return "interrupted"
                cause = self._again_why[spec.run_id]
                why = (f"{spec.why}; " if spec.why else "") + f"alone: {cause} ({spec.run_id.split('/')[-1]})"
                with self._wake:  # its own id: the planned ids of later repeats stay theirs
                    again = RunSpec(f"{spec.run_id}-alone", spec.trial, spec.repeat, spec.gpu, why, spec.steps)
                    self._ids.add(again.run_id)
                    self.plan.append(again)
                    self.measured.add(again)
                return self._run_one(again, alone=True)
        finally:
            with self._alone:
                self._alone_pending -= 1
                self._alone.notify_all()

    def _start_run(self, spec: RunSpec, turns: Turns | None, theirs) -> str:
        self._micro_batch[spec.run_id] = spec.trial.micro_batch
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
        waiting = None
        if turns is not None:
            # started beside the run before it (a head start), or the first / after a gap
            payload.update(turn=theirs, relay=True, head_start=turns.resident() > 1)
            waiting = lambda: turns.waiting(spec.run_id)  # noqa: E731 - waiting for a turn is no stall
        child = WorkerChild(self._ctx, self.target, payload, f"tracetui-{spec.trial.slug(SHORT)}", QUEUE_MAX, log_path)
        child.memory_limit = self.cfg.memory_limit

        return self._supervised(spec, child, waiting)


def relaying(cfg: SweepConfig, planner: Planner, lanes: list[int | None], device: str) -> tuple[bool, str]:
    """Whether each next run starts during the current one's warm-up (head starts), and why not.

    On by default (``--no-head-start``) for the grid on one device: the search decides each run
    from the ones before it, torchrun's ranks and a script start themselves, ``--no-probe`` runs
    have no probe to hold a run at its first step, and the next run starts only inside the
    current one's warm-up (``--warmup`` 2 or more)."""
    if not cfg.head_start:
        return False, "not asked for"
    for ruled_out, why in ((len(lanes) > 1 or len(cfg.gpu_list()) > 1, "runs go side by side on several GPUs"),
                           (cfg.world_size > 1, "torchrun starts its own ranks"),
                           (not cfg.probe, "--no-probe runs have no probe to keep the turns"),
                           (warmup.fewest(cfg.warmup) < 2, f"--warmup {cfg.warmup}: a head start needs 2 warm-up steps or more "
                                            "to start the next run in"),
                           (not isinstance(planner, GridPlanner), "the search decides each run from the ones before it")):
        if ruled_out:
            return False, why
    if runs_to_start(planner, device) < 2:
        return False, "one run"
    return True, ""


def runs_to_start(planner: Planner, device: str) -> int:
    """How many of the planner's runs will start: not skipped, no setting unavailable here."""
    return sum(1 for d in planner.preview() or [] if not d.skip and not any(
        KNOBS[n].unavailable(v, device) for n, v in d.trial.settings))


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
