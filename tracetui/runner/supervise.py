"""One supervisor for every kind of trial process: a spawned worker, a user's training script,
torchrun's ranks.

:func:`supervise` starts the trial's process, passes on its events, stops it when the sweep
stops or when it stalls (SIGTERM, then SIGKILL after :data:`KILL_AFTER_S`), and when the
process ended without saying how, classifies its end once (:func:`classify_end`). The two
kinds of process differ only in how they start, how signals reach them and where their events
come from, which is what a :class:`Child` says.
"""

from __future__ import annotations

import contextlib
import os
import queue as queue_mod
import re
import signal
import statistics
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

from ..core import envvars
from ..events.schema import GPU, MISMATCH, NOTICE, RUN_FAILED, RUN_FINISHED, RUN_STARTED, STEP, make
from ..core.knobs import SHORT
from ..planning.plan import RunSpec
from ..core.trial import Trial
from .leftovers import end_run, new_tree, run_processes, run_tree
from .lifetime import die_with_this_process, launch, process_gone, server_log_size, server_said, start_shielded
from .runlog import PassFd, RunOutput

#: after SIGTERM (stop or stall), how long a trial has to go before SIGKILL
KILL_AFTER_S = 10.0
#: after a trial's process is gone, how long its last events may take to arrive
DRAIN_S = 1.0
#: stall limits (seconds without an event other than GPU samples): before a run's first step
#: (imports, loading the model, the first step's one-off costs) at least START_STALL_S; after it
#: STALL_STEPS times the median step, at least MIN_STALL_S, unless ``--stall-timeout`` says
START_STALL_S = 600.0
MIN_STALL_S = 60.0
STALL_STEPS = 10.0
#: what an out-of-memory looks like in a log (PyTorch's error, CUDA's message; under a capped data
#: size on the CPU: the allocator's and the OpenMP runtime's failures)
OOM_IN_LOG = re.compile(r"OutOfMemoryError|CUDA out of memory|MemoryError")
#: the line a script's run says when the probe cannot attach there (tracetui/inject/sitecustomize.py)
PROBE_REFUSED = re.compile(r"^tracetui: could not attach the probe .*$", re.MULTILINE)
CAPPED_IN_LOG = re.compile(r"std::bad_alloc|Cannot allocate memory|Thread creation failed")


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


class Child:
    """A trial's process, as the supervisor sees it."""

    #: the status of a process that exited with an error status without reporting
    exit_kind = "crashed"
    #: what a process that exited 0 without reporting means
    silent_exit = "exited without reporting"
    #: how long the process may go on after its run reported its end, before it is stopped
    linger_s = KILL_AFTER_S
    #: --memory-limit when the trial's memory is capped (GiB): a death by signal is then read
    #: as running out of it (on the CPU the cap is the data size, and C++ code dies of it)
    memory_limit: float | None = None

    #: whether the process is forked from the fork server (its orphans re-parent to the server)
    forked = False

    def __init__(self, log_path: Path):
        self.log_path = log_path
        #: the mark every process of the run carries (:mod:`.lifetime`)
        self.tree = new_tree()
        #: the run's output, on its way to its log (made as the process starts)
        self.output: RunOutput | None = None
        #: processes seen below the run's process while it lived (pid -> start time)
        self.seen: dict[int, int] = {}
        #: the fork server's standard error so far: a forked trial's words before its log opened follow
        self.server_said_from = server_log_size()

    def start(self) -> None: ...
    def alive(self) -> bool: ...
    def exitcode(self) -> int | None: ...
    def signal(self, sig: int) -> None: ...
    def next_event(self, timeout: float) -> dict | None: ...
    def reap(self) -> None: ...

    def lost_with(self) -> str | None:
        """Why the process went that lies outside it (see :class:`WorkerChild`), or None."""
        return None

    def pid(self) -> int | None:
        return None

    def note_tree(self) -> None:
        """Before the run is stopped: what is below its process now, found again when it has
        ended (what left its process group, and the environment that marks it)."""
        pid = self.pid()
        if pid is not None:
            self.seen.update(run_processes(None, below=(pid,)))
            self.seen.pop(pid, None)

    def end(self) -> str:
        """Once the process has ended and been reaped: end every process the run started that is
        still there, wherever it went (:func:`~.leftovers.end_run`), and finish its log. What the
        run's notice says of its output, where the log had to cut it ("" where not)."""
        end_run(self.tree, self.forked, tuple(self.seen))
        if self.output is None:
            return ""
        self.output.close()
        return self.output.notice()


class WorkerChild(Child):
    """tracetui's own worker (:func:`tracetui.runner.worker.run`), started from the sweep's
    multiprocessing context; its events come over its own bounded queue."""

    def __init__(self, ctx, target: Callable, payload: dict, name: str, queue_max: int, log_path: Path):
        super().__init__(log_path)
        self.queue = ctx.Queue(maxsize=queue_max)
        self.proc = ctx.Process(target=run_tree, args=(self.tree, target, payload, self.queue), name=name, daemon=True)
        self.payload = payload
        self.forked = ctx.get_start_method() == "forkserver"

    def start(self) -> None:
        self.payload["started_at"] = time.time()
        self.output = RunOutput(self.log_path)
        self.payload["output_fd"] = PassFd(self.output.writer)
        try:
            launch(lambda: start_shielded(self.proc))  # see tracetui.runner.lifetime
        finally:
            self.output.started()

    def pid(self) -> int | None:
        return self.proc.pid

    def lost_with(self) -> str | None:
        """Why the trial ended without a word when what it hung from went first: a forked
        trial dies with its fork server (the parent-death signal), and its exit status is then
        unknown (multiprocessing reads it from the server: 255)."""
        server = self.payload.get("parent_pid")
        if server and server != os.getpid() and self.exitcode() == 255 and process_gone(server):
            return (f"its fork server (pid {server}) was killed from outside tracetui, and took this trial "
                    "along; the next trial starts a new server")
        return None

    def alive(self) -> bool:
        return self.proc.is_alive()

    def exitcode(self) -> int | None:
        return self.proc.exitcode

    def signal(self, sig: int) -> None:
        if self.proc.pid is not None:
            try:
                os.kill(self.proc.pid, sig)
            except OSError:  # gone already
                pass

    def next_event(self, timeout: float) -> dict | None:
        try:
            return self.queue.get(timeout=timeout)
        except (queue_mod.Empty, EOFError, OSError):
            return None

    def reap(self) -> None:
        self.proc.join(timeout=15)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)
        self.queue.close()
        self.queue.cancel_join_thread()


class CommandChild(Child):
    """A command (a user's script, torchrun) in its own session, so the terminal's signals are
    the sweep's to pass on, killed by the kernel if tracetui dies; its events come over the
    sweep's socket, into ``inbox``."""

    exit_kind = "error"
    silent_exit = "the script finished but no Trainer reported: does it train with transformers' Trainer?"
    linger_s = 120.0  # a script's own work after training (saving the model, say)

    def __init__(self, cmd: list[str], env: dict, inbox: "queue_mod.Queue[dict]", log_path: Path):
        super().__init__(log_path)
        self.cmd, self.env, self.inbox = cmd, dict(env, **{envvars.RUN_TREE: self.tree}), inbox
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.output = RunOutput(self.log_path, fresh=True)
        # the run's start stages are counted from here (TraceCallback, in the script)
        self.env = dict(self.env, **{envvars.STARTED_AT: repr(time.time())})
        try:
            self.proc = launch(lambda: subprocess.Popen(
                self.cmd, env=self.env, stdout=self.output.writer, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=die_with_this_process()))
        finally:
            self.output.started()

    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exitcode(self) -> int | None:
        return self.proc.returncode if self.proc is not None else None

    def signal(self, sig: int) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, sig)  # the whole group: torchrun's ranks, a script's children
            except OSError:
                pass

    def next_event(self, timeout: float) -> dict | None:
        try:
            return self.inbox.get(timeout=timeout)
        except queue_mod.Empty:
            return None

    def reap(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.signal(signal.SIGKILL)
            self.proc.wait(timeout=5)


class ForkedCommandChild(CommandChild):
    """A user's command forked from the fork server (:mod:`.forkrun`), its libraries imported
    already; the same process group, events and ends as a :class:`CommandChild`."""

    forked = True

    def __init__(self, ctx, target: Callable, payload: dict, inbox: "queue_mod.Queue[dict]", log_path: Path):
        super().__init__([], payload["env"], inbox, log_path)
        self.payload = payload
        self.proc = ctx.Process(target=run_tree, args=(self.tree, target, payload), name="tracetui-script", daemon=True)

    def start(self) -> None:
        self.payload["env"] = dict(self.env, **{envvars.STARTED_AT: repr(time.time())})
        self.output = RunOutput(self.log_path)
        self.payload["output_fd"] = PassFd(self.output.writer)
        try:
            launch(lambda: start_shielded(self.proc))
        finally:
            self.output.started()

    def pid(self) -> int | None:
        return self.proc.pid

    lost_with = WorkerChild.lost_with

    def alive(self) -> bool:
        return self.proc.is_alive()

    def exitcode(self) -> int | None:
        return self.proc.exitcode

    def signal(self, sig: int) -> None:
        if self.proc.pid is None:
            return
        try:
            os.killpg(self.proc.pid, sig)  # the run and the processes it started
        except OSError:
            try:  # before it has made its own group
                os.kill(self.proc.pid, sig)
            except OSError:
                pass

    def reap(self) -> None:
        if self.proc.is_alive():
            self.signal(signal.SIGKILL)
        self.proc.join(timeout=5)


def log_tail(path: Path, n: int = 4000) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - n))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def classify_end(child: Child, spec: RunSpec, stopped: bool, stalled: str | None) -> tuple[str, str]:
    """How a trial ended that did not say so itself: stalled, interrupted, out of memory (from
    its log), killed by a signal, or exited with a status."""
    if stalled:
        return "stalled", stalled
    if stopped:
        return "interrupted", "stopped by the sweep"
    lost = child.lost_with()
    if lost:
        return "crashed", lost
    code = child.exitcode()
    tail = log_tail(child.log_path)
    killed = f" (killed by {signal.Signals(-code).name})" if code is not None and code < 0 else ""
    capped_death = child.memory_limit is not None and ((killed and code != -signal.SIGTERM) or CAPPED_IN_LOG.search(tail))
    if OOM_IN_LOG.search(tail) or capped_death:
        capped = f" under --memory-limit {child.memory_limit:g} GiB" if child.memory_limit is not None else ""
        return "oom", f"out of memory at micro-batch {spec.trial.micro_batch}{capped}{killed} (see {child.log_path})"
    if code is not None and code < 0:
        return "crashed", f"killed by {signal.Signals(-code).name} without reporting; its log: {child.log_path}"
    unmeasured = PROBE_REFUSED.search(tail)
    if unmeasured:  # the probe said why it could not attach: that line is the run's story
        return child.exit_kind, f"{unmeasured.group(0).strip()} (log: {child.log_path})"
    if code == 0:
        return "error", f"{child.silent_exit} (log: {child.log_path})"
    last = tail.strip().splitlines()[-1][:200] if tail.strip() else ""
    early = "" if last or not child.forked else server_said(child.server_said_from)
    said = f": {last}" if last else f" (before its log was open, the fork server's output: {early})" if early else ""
    return child.exit_kind, f"exited with status {code} without reporting{said} (log: {child.log_path})"


def as_planned(spec: RunSpec, event: dict) -> tuple[dict, str | None]:
    """A run's ``run_started`` under its planned trial, and what differs when its trainer read
    back another (None when it trains the plan): the run keeps its planned name and row, and says
    what it trained, so it is never pooled with the runs of the trial it really was."""
    try:
        trained = Trial.from_fields(event)
    except (KeyError, TypeError, ValueError):
        return event, None
    planned = spec.trial
    if trained == planned:
        return event, None
    differs = []
    if (trained.micro_batch, trained.grad_accum) != (planned.micro_batch, planned.grad_accum):
        differs.append(f"split {trained.micro_batch}x{trained.grad_accum}")
    if trained.world_size != planned.world_size:
        differs.append(f"{trained.world_size} processes")
    for name, value in planned.settings:
        seen = trained.setting(name, value)
        if seen != value:
            differs.append(f"{name}={seen}")
    said = (f"planned {planned.label(SHORT)}, trained {trained.label(SHORT)} (its trainer read back "
            f"{', '.join(differs) or 'other settings'}): not measured as planned, never pooled with "
            "another run, and no verdict is drawn from it")
    rewritten = dict(event, **planned.fields(), label=spec.label, trained=trained.label(SHORT),
                     trained_fields=trained.fields())
    if not planned.settings:
        rewritten.pop("varied", None)
    return rewritten, said


def supervise(spec: RunSpec, child: Child, emit: Callable[[dict], None], stop: threading.Event,
              stall_timeout: float | None, waiting: Callable[[], bool] | None = None) -> tuple[str, str]:
    """Run ``child`` for ``spec`` to its end and say how it ended: ``(status, message)``.
    ``waiting``: whether the run is waiting for its turn (a head start): no stall.

    Every event is handed to ``emit`` as it arrives; the run's end is the one its lead rank
    (rank 0 on this machine) reports, else :func:`classify_end`'s reading, which is then emitted
    as the run's ``run_failed``."""
    try:
        child.start()
    except OSError as exc:  # its program gone since the checks, or not one that runs here
        with contextlib.suppress(AssertionError, OSError):  # (its log closed; a worker never started cannot be joined)
            child.reap()
        with contextlib.suppress(OSError):
            child.end()
        what = getattr(child, "cmd", None)
        return _ended(spec, emit, "error", f"could not start {what[0] if what else 'its process'} "
                                           f"({exc.strerror or exc})", started=False)
    watch = _Watch(spec, child, emit, stop, StallClock(stall_timeout), waiting)
    try:
        watch.until_gone()
    finally:
        child.reap()
        try:
            cut = child.end()  # what the run started ends with it; its log finished
        except (OSError, ValueError):  # (a /proc that cannot be read: the run's end stands)
            cut = ""
    final = watch.final
    if final is None:
        kind, message = classify_end(child, spec, stop.is_set(), watch.stalled)
        final = _ended(spec, emit, kind, message, watch.started)
    if cut and not watch.stalled:  # (what a stalled run says is not taken)
        emit(make(NOTICE, spec.run_id, level="warning", message=cut))
    return final


class _Watch:
    """One run's process watched to its end: its events passed on, and stopped (SIGTERM, then
    SIGKILL) when the sweep stops, when it stalls, or when it lingers after its end."""

    def __init__(self, spec: RunSpec, child: Child, emit: Callable[[dict], None], stop: threading.Event,
                 clock: StallClock, waiting: Callable[[], bool] | None):
        self.spec, self.child, self.emit, self.stop, self.clock, self.waiting = spec, child, emit, stop, clock, waiting
        self.started = False  # whether the run announced itself (a script may die before its trainer does)
        self.final: tuple[str, str] | None = None
        self.stalled: str | None = None
        self.term_at: float | None = None
        self.final_at: float | None = None
        self.mismatch: str | None = None

    def until_gone(self) -> None:
        dead_since: float | None = None
        child = self.child
        while True:
            now = time.monotonic()
            self._signal(now)
            event = child.next_event(0.1)
            if event is not None:
                self._take(event, now)
                dead_since = None if child.alive() else dead_since
                continue
            if not child.alive():
                dead_since = dead_since or now
                # gone, and nothing more arrived: after its end, at once; else give its last
                # lines time to come
                if self.final is not None or now - dead_since > DRAIN_S:
                    return

    def _signal(self, now: float) -> None:
        """SIGTERM a run told to stop, a stalled one, and one that said it ended but lingers;
        SIGKILL it :data:`KILL_AFTER_S` later."""
        child = self.child
        if self.waiting is not None and self.waiting():
            self.clock.last = now  # its turn is another run's: waiting is not stalling
        if self.stalled is None and self.term_at is None and self.final is None:
            self.stalled = self.clock.stalled()
        lingering = self.final_at is not None and now - self.final_at > child.linger_s
        if (self.stop.is_set() or self.stalled or lingering) and self.term_at is None and child.alive():
            self.term_at = now
            child.note_tree()  # (what it started, found again once it has gone)
            child.signal(signal.SIGTERM)
            if self.stalled:
                child.signal(signal.SIGCONT)  # a stopped process acts on SIGTERM only once continued
        if self.term_at is not None and child.alive() and now - self.term_at > KILL_AFTER_S:
            child.signal(signal.SIGKILL)

    def _take(self, event: dict, now: float) -> None:
        """Pass on one event; the run's own say how it ended, or that it trains another trial."""
        ours = event.get("run_id") == self.spec.run_id
        if ours and self.stalled:
            return  # what a stalled run sends while it is stopped is not measured
        if ours and self.mismatch is not None and event.get("type") in (RUN_FINISHED, RUN_FAILED):
            return  # it ended as a mismatch, whatever it says of its end
        if ours and event.get("type") == RUN_STARTED:
            event, said = as_planned(self.spec, event)
            if said is not None and self.mismatch is None and self.final is None:
                self.mismatch, self.final, self.final_at = said, (MISMATCH, said), now
                self.emit(event)
                event = make(RUN_FAILED, self.spec.run_id, kind=MISMATCH, message=said)
                # its training goes on for nothing: stopped as a stop would
                self.term_at = now
                self.child.signal(signal.SIGTERM)
        if ours:
            self.clock.saw(event)
            self.started = self.started or event.get("type") == RUN_STARTED
            if (self.final is None and event.get("type") in (RUN_FINISHED, RUN_FAILED)
                    and event.get("rank", 0) == 0):
                self.final = (("ok", "") if event["type"] == RUN_FINISHED
                              else (event.get("kind", "error"), event.get("message", "")))
                self.final_at = now
        self.emit(event)


def _ended(spec, emit, kind: str, message: str, started: bool) -> tuple[str, str]:
    """Emit how a run ended that did not say so itself; a failure gets its row, under its trial's
    name, also when it never started."""
    if not started and kind != "interrupted":
        emit(make(RUN_STARTED, spec.run_id, label=spec.label, mode="unreported", why=spec.why, **spec.trial.fields()))
    emit(make(RUN_FAILED, spec.run_id, kind=kind, message=message))
    return kind, message
