"""The sweep: plan the runs, start one spawned worker per run, pump its events to disk and to
whoever listens (TUI, headless progress), and turn a worker that dies silently into ``crashed``.

Each run gets a fresh process and a fresh bounded queue: a crash, an out-of-memory or a worker
killed while holding the queue's lock cannot poison the next run.

No trial process outlives tracetui (see :func:`set_parent_death_signal` and :func:`launch`), and
a run that stops making progress is stopped and reported ``stalled`` (see :func:`stall_limit`).
"""

from __future__ import annotations

import collections
import multiprocessing as mp
import os
import queue as queue_mod
import signal
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..config import Split, SweepConfig
from ..events import GPU, RUN_FAILED, RUN_FINISHED, STEP, make
from ..store import EventLog

#: after a worker exits without a final event, how long to keep draining its queue
_DRAIN_S = 1.0
#: queue size: large enough for bursts, small enough to bound memory
QUEUE_MAX = 10_000
#: after SIGTERM (stop or stall), how long a trial has to go before SIGKILL
KILL_AFTER_S = 10.0
#: stall limits (seconds without an event other than GPU samples): before a run's first step
#: (imports, loading the model, the first step's one-off costs) at least START_STALL_S; after it
#: STALL_STEPS times the median step, at least MIN_STALL_S, unless ``--stall-timeout`` says
START_STALL_S = 600.0
MIN_STALL_S = 60.0
STALL_STEPS = 10.0


def stall_limit(explicit: float | None, step_walls_s: list[float]) -> tuple[float, str]:
    """Seconds a run may go without an event before it is ``stalled``, and what set it.
    ``explicit``: ``--stall-timeout``; ``step_walls_s``: the wall times of the run's steps so far."""
    if not step_walls_s:
        return max(START_STALL_S, explicit or 0.0), "before the first step"
    if explicit is not None:
        return explicit, "--stall-timeout"
    return max(MIN_STALL_S, STALL_STEPS * statistics.median(step_walls_s)), "10x the median step, at least 60 s"


class StallClock:
    """When a run last made progress (any event but GPU samples, which a sampler thread goes on
    sending while training hangs), and how long it may go without."""

    def __init__(self, explicit: float | None):
        self.explicit = explicit
        self.walls: list[float] = []
        self.last = time.monotonic()
        self.limit, self.why = stall_limit(explicit, self.walls)

    def saw(self, event: dict) -> None:
        if event.get("type") == GPU:
            return
        self.last = time.monotonic()
        if event.get("type") == STEP and event.get("rank") in (0, None) and event.get("wall_ms") is not None:
            self.walls.append(float(event["wall_ms"]) / 1000.0)
            self.limit, self.why = stall_limit(self.explicit, self.walls)

    def stalled(self) -> str | None:
        """The ``stalled`` message once the run has gone too long without progress, else None."""
        idle = time.monotonic() - self.last
        if idle <= self.limit:
            return None
        return (f"no progress for {idle:.0f} s (limit {self.limit:g} s, {self.why}); stopped; "
                "if it was only slow, raise --stall-timeout SECONDS")


# ---- no trial outlives tracetui ---------------------------------------------------------------
#
# The kernel's parent-death signal (prctl PR_SET_PDEATHSIG, Linux) kills a trial when tracetui
# dies, however it dies (SIGKILL included). Two traps:
#
# * It is armed by the child, so tracetui may already be gone when the child arms it: right after
#   arming, the child checks that its parent is still the process that started it, and exits if
#   not (:func:`set_parent_death_signal`).
# * It fires when the *thread* that forked the child ends, not the process. tracetui starts trials
#   from lane threads, the monitor's sweep thread and rerun threads, all of which end while
#   tracetui lives on. So every trial process is started by one launcher thread (:func:`launch`)
#   that lives as long as the tracetui process: the signal then means "tracetui is gone", never
#   "a helper thread finished". (A watchdog pipe polled by the child would also work, but needs a
#   thread in every child, including the user's own script; the launcher costs nothing in the
#   child.)
#
# Processes further down (torchrun's ranks, whatever a swept script starts) are not tracetui's
# children: those that run Python get a watcher on tracetui's pid from ``tracetui.inject``'s
# sitecustomize, which ``tracetui sweep`` and data-parallel runs put on their path.

PR_SET_PDEATHSIG = 1
#: the parent-death signal: SIGKILL, as nothing is left to report to, and a trial stopped in a
#: debugger or a hung CUDA call could not act on a softer one
DEATH_SIGNAL = signal.SIGKILL
#: the environment variable naming tracetui's pid for processes further down (sitecustomize)
OWNER_ENV = "TRACETUI_OWNER_PID"


def _prctl():
    """libc's prctl (resolved before any fork: a preexec function must not load libraries)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    fn.restype = ctypes.c_int
    return fn


def set_parent_death_signal(parent_pid: int, sig: int = DEATH_SIGNAL, prctl=None) -> None:
    """In a child: be sent ``sig`` when the parent dies; exit at once if ``parent_pid``, the
    process that started this one, is already gone (the race between fork and arming)."""
    prctl = prctl or _prctl()
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)


def die_with_this_process():
    """A ``preexec_fn`` for :class:`subprocess.Popen`: the child is killed when this process
    dies. Start the child from :func:`launch`."""
    parent, prctl = os.getpid(), _prctl()

    def preexec() -> None:
        set_parent_death_signal(parent, DEATH_SIGNAL, prctl)

    return preexec


class _Launcher:
    """One daemon thread that starts every trial process and lives as long as tracetui."""

    def __init__(self) -> None:
        self._jobs: queue_mod.SimpleQueue = queue_mod.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _loop(self) -> None:
        while True:
            fn, box, done = self._jobs.get()
            try:
                box["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                box["error"] = exc
            done.set()

    def call(self, fn: Callable):
        if threading.current_thread() is self._thread:
            return fn()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="tracetui-launcher", daemon=True)
                self._thread.start()
        box: dict = {}
        done = threading.Event()
        self._jobs.put((fn, box, done))
        done.wait()
        if "error" in box:
            raise box["error"]
        return box["value"]


_launcher = _Launcher()


#: signals a worker takes from the terminal's process group (Ctrl-C, a hang-up): the sweep decides
#: what they stop, and tells the worker with SIGTERM
TERMINAL_SIGNALS = {signal.SIGINT, signal.SIGHUP}


def start_shielded(proc) -> None:
    """Start ``proc`` (a multiprocessing process) with :data:`TERMINAL_SIGNALS` blocked, a mask it
    inherits: a Ctrl-C during its interpreter's start-up would otherwise print a traceback on the
    terminal. The worker ignores them, then unblocks them (:func:`tracetui.runner.worker.run`)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, TERMINAL_SIGNALS)
    try:
        proc.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def launch(start: Callable):
    """Run ``start`` (which starts a trial process and returns its handle) on the launcher
    thread, from whatever thread asks."""
    return _launcher.call(start)


@dataclass
class RunSpec:
    run_id: str
    split: Split
    repeat: int
    gpu: int | None = None

    @property
    def label(self) -> str:
        return self.split.label


def interleave(splits: list[Split], repeats: int) -> list[tuple[Split, int]]:
    """Order runs so no split is favoured by position: A B C, then C B A, then A B C, ..."""
    order: list[tuple[Split, int]] = []
    for r in range(repeats):
        seq = splits if r % 2 == 0 else list(reversed(splits))
        order.extend((s, r) for s in seq)
    return order


def plan_runs(cfg: SweepConfig, splits: list[Split]) -> list[tuple[Split, int]]:
    """The order of a sweep's runs. With ``--until-confident`` the split with the fewest
    accumulation steps of each effective batch goes first: its steps are usually the cheapest,
    so it is the one measured to full precision, and each later split may stop as soon as its
    interval is clear of the earlier ones (:func:`tracetui.analysis.stop_reason`)."""
    if cfg.until_confident is not None:
        group = {eb: i for i, eb in enumerate(dict.fromkeys(s.effective_batch for s in splits))}
        splits = sorted(splits, key=lambda s: (group[s.effective_batch], s.grad_accum))
    return interleave(splits, cfg.repeats)


class Measured:
    """Measured step walls of each split so far in a sweep (rank 0), for ``--until-confident``:
    a run is handed those of the other splits of its effective batch."""

    def __init__(self, plan: list[RunSpec]):
        self._split_of = {spec.run_id: spec.split for spec in plan}
        self._walls: dict[Split, list[float]] = {}

    def add(self, spec: RunSpec) -> None:
        self._split_of[spec.run_id] = spec.split

    def observe(self, event: dict) -> None:
        if event.get("type") != STEP or event.get("warmup") or event.get("rank") not in (0, None):
            return
        split = self._split_of.get(event.get("run_id"))
        if split is not None and event.get("wall_ms") is not None:
            self._walls.setdefault(split, []).append(float(event["wall_ms"]))

    def references(self, split: Split, least: int) -> list[tuple[float, float]]:
        """Intervals of the other splits of ``split``'s effective batch with ``least`` steps."""
        from ..analysis import SETTLE_Z, enough_for_interval, settle_interval

        return [settle_interval(w) for s, w in self._walls.items()
                if s != split and s.effective_batch == split.effective_batch and len(w) >= least
                and enough_for_interval(len(w), SETTLE_Z)]


class Planned:
    """What both kinds of sweep (workers here, scripts in :mod:`.script`) share: the planned runs
    in order, the steps measured so far, and running one split again (the TUI's ``r``).

    Needs ``cfg``, ``sweep_id``, ``_stop``, ``outcomes`` and ``_run_one``."""

    #: after the split in a run id (``x2``: the world size of a data-parallel run)
    id_suffix = ""

    def _make_plan(self, splits: list[Split]) -> None:
        self.plan = [RunSpec(self._run_id(s, r, self.cfg.repeats > 1), s, r) for s, r in plan_runs(self.cfg, splits)]
        self.measured = Measured(self.plan)

    def _run_id(self, split: Split, repeat: int, numbered: bool) -> str:
        return f"{self.sweep_id}/{split.label}{self.id_suffix}" + (f"#{repeat + 1}" if numbered else "")

    def _rerun_gpu(self) -> int | None:
        return None

    def rerun(self, split: Split) -> str:
        """Run ``split`` once more in this sweep."""
        n = sum(1 for s in self.plan if s.split == split)
        spec = RunSpec(self._run_id(split, n, True), split, n, gpu=self._rerun_gpu())
        self.plan.append(spec)
        self.measured.add(spec)
        self._stop.clear()
        self.outcomes[spec.run_id] = self._run_one(spec)
        return self.outcomes[spec.run_id]


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


class Sweep(Planned):
    """Runs ``splits`` of ``cfg`` one after another.

    ``on_event`` is called (in the thread that calls :meth:`run`) with every event after it is
    on disk. :meth:`stop` may be called from any thread or a signal handler.
    """

    def __init__(self, cfg: SweepConfig, splits: list[Split], on_event: Callable[[dict], None] | None = None,
                 sweep_id: str | None = None, lanes: list[int | None] | None = None):
        """``lanes``: GPU indices to run splits on at the same time (default: ``cfg.gpus``, or
        one lane on the configured device)."""
        self.cfg = cfg
        self.splits = splits
        self.on_event = on_event
        self.sweep_id = sweep_id or new_sweep_id()
        self.dir = Path(cfg.runs_dir) / self.sweep_id
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = EventLog(self.dir / "events.jsonl")
        self._make_plan(splits)
        self._ctx = mp.get_context("spawn")
        self._stop = threading.Event()
        self._procs: dict[str, object] = {}
        self._lock = threading.Lock()
        self.lanes: list[int | None] = lanes if lanes is not None else (cfg.gpu_list() or [None])
        self.warnings = gpu_model_warnings(self.lanes)
        self.interrupted = False
        self.outcomes: dict[str, str] = {}
        #: set when two runs failed the same way before their first step: the settings, not a
        #: split, are at fault, and every later run would fail the same way (minutes each)
        self.same_failure: str | None = None
        self._stepped: set[str] = set()
        self._setup_failures: list[str] = []
        _ensure_resource_tracker()

    # ---- control ---------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop after the current run is told to stop; later runs do not start."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def current_pids(self) -> list[int]:
        with self._lock:
            return [p.pid for p in self._procs.values() if p.is_alive()]

    # ---- running ---------------------------------------------------------------------------
    def run(self, only: list[RunSpec] | None = None) -> dict[str, str]:
        """Run every planned run (or ``only`` those), one per lane at a time; return
        run_id -> final status."""
        todo = collections.deque(only or self.plan)

        def lane(gpu: int | None) -> None:
            while not self._stop.is_set():
                with self._lock:
                    if not todo:
                        return
                    spec = todo.popleft()
                spec.gpu = gpu
                self.outcomes[spec.run_id] = self._run_one(spec)
                if self.same_failure is not None:
                    return

        if len(self.lanes) == 1:
            lane(self.lanes[0])
        else:
            threads = [threading.Thread(target=lane, args=(g,), name=f"tracetui-lane-{g}", daemon=True)
                       for g in self.lanes]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        if self.same_failure is not None:
            for spec in todo:  # left unrun: say so, so no run waits "queued" for ever
                self._emit(make(RUN_FAILED, spec.run_id, kind="error",
                                message=f"not run: every run fails the same way ({self.same_failure})"))
            todo.clear()
        elif self._stop.is_set():
            self.interrupted = True
        return self.outcomes

    def close(self) -> None:
        self.log.close()

    def _rerun_gpu(self) -> int | None:
        return self.lanes[0]

    def _emit(self, event: dict) -> None:
        with self._lock:  # lanes run side by side: one writer at a time
            if event.get("type") == STEP:
                self._stepped.add(event["run_id"])
            elif (event.get("type") == RUN_FAILED and event.get("kind") == "error"
                  and event["run_id"] not in self._stepped and not event.get("message", "").startswith("not run:")):
                self._setup_failures.append(event.get("message", ""))
                if self._setup_failures.count(self._setup_failures[-1]) >= 2:
                    self.same_failure = self._setup_failures[-1]
            self.log.append(event)
            self.measured.observe(event)
            if self.on_event is not None:
                self.on_event(event)

    def _run_one(self, spec: RunSpec) -> str:
        q = self._ctx.Queue(maxsize=QUEUE_MAX)
        log_path = str(self.dir / (spec.run_id.split("/", 1)[1].replace("#", "_r") + ".log"))
        if spec.gpu is not None:
            self._emit(make("notice", spec.run_id, level="info", message=f"runs on GPU {spec.gpu}"))
        payload = dict(run_id=spec.run_id, config=self.cfg.to_dict(), micro_batch=spec.split.micro_batch,
                       grad_accum=spec.split.grad_accum, repeat=spec.repeat, gpu=spec.gpu, log_path=log_path,
                       parent_pid=os.getpid())
        if self.cfg.until_confident is not None:
            with self._lock:
                payload["references"] = self.measured.references(spec.split, self.cfg.min_steps)
        from . import worker

        proc = self._ctx.Process(target=worker.run, args=(payload, q), name=f"tracetui-{spec.label}", daemon=True)
        launch(lambda: start_shielded(proc))  # see "no trial outlives tracetui" above
        with self._lock:
            self._procs[spec.run_id] = proc
        final: str | None = None
        dead_since: float | None = None
        term_sent: float | None = None
        clock = StallClock(self.cfg.stall_timeout)
        stalled: str | None = None
        try:
            while True:
                if stalled is None and term_sent is None:
                    stalled = clock.stalled()
                if (self._stop.is_set() or stalled) and term_sent is None and proc.is_alive():
                    term_sent = time.monotonic()
                    proc.terminate()  # SIGTERM: the worker reports ``interrupted``
                    if stalled:
                        _continue(proc.pid)  # a stopped worker acts on SIGTERM only once continued
                if term_sent is not None and proc.is_alive() and time.monotonic() - term_sent > KILL_AFTER_S:
                    proc.kill()
                try:
                    event = q.get(timeout=0.1)
                except queue_mod.Empty:
                    event = None
                except (EOFError, OSError):
                    event = None
                if event is not None:
                    if stalled:
                        continue  # what a stalled run sends while it is stopped is not measured
                    clock.saw(event)
                    if event.get("run_id") == spec.run_id and event.get("type") in (RUN_FINISHED, RUN_FAILED):
                        final = "ok" if event["type"] == RUN_FINISHED else event.get("kind", "error")
                    self._emit(event)
                    if final is not None:
                        break
                    continue
                if not proc.is_alive():
                    dead_since = dead_since or time.monotonic()
                    if time.monotonic() - dead_since > _DRAIN_S:
                        break
        finally:
            proc.join(timeout=15)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
            with self._lock:
                self._procs.pop(spec.run_id, None)
            q.close()
            q.cancel_join_thread()
        if final is None:
            code = proc.exitcode
            if stalled:
                final, msg = "stalled", stalled
            elif self._stop.is_set():
                final = "interrupted"
                msg = "stopped by the sweep"
            else:
                final = "crashed"
                how = (f"killed by {signal.Signals(-code).name}" if code is not None and code < 0
                       else f"exited with status {code}")
                msg = f"worker {how} without reporting; its log: {log_path}"
            self._emit(make(RUN_FAILED, spec.run_id, kind=final, message=msg))
        return final


def _continue(pid: int | None) -> None:
    if pid is not None:
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass


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


def child_pids() -> list[int]:
    """Pids of this process's live worker children (for tests and fault injection)."""
    return [p.pid for p in mp.active_children() if p.pid is not None and p.pid != os.getpid()]
