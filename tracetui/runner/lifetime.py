"""How trial processes are started, and why none outlives tracetui.

Each trial runs in a process of its own (an out-of-memory or a crash cannot poison the next). On
Linux it is forked from a *fork server* that imported torch, transformers, TRL and PEFT once
(:func:`trial_context`): a trial reaches its first step without a fresh interpreter's start
and imports. The server never initialises CUDA
(each trial does its own), and its imported objects are frozen out of the collector's reach
(:mod:`tracetui.runner.startup.gcfreeze`). In docs/results/h200_start_3 (both ways in one call, in an
order that cancels the host's drift) forked trials stepped as fast as fresh interpreters or
faster. ``TRACETUI_START=spawn`` starts every trial as a fresh interpreter instead (the only
way elsewhere than Linux).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue as queue_mod
import signal
import sys
import tempfile
import threading
import time
from typing import Callable

from ..core import envvars
from ..core.foreign import drop_fork_server_alive_fd, fork_server_pid

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


@contextlib.contextmanager
def _terminal_signals_blocked():
    """:data:`TERMINAL_SIGNALS` blocked in this thread: a mask every process it starts inherits."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, TERMINAL_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def start_shielded(proc) -> None:
    """Start ``proc`` (a multiprocessing process) with :data:`TERMINAL_SIGNALS` blocked, a mask it
    inherits: a Ctrl-C during its interpreter's start-up would otherwise print a traceback on the
    terminal. The worker ignores them, then unblocks them (:func:`tracetui.runner.worker.run`)."""
    with _terminal_signals_blocked():
        proc.start()


def launch(start: Callable):
    """Run ``start`` (which starts a trial process and returns its handle) on the launcher
    thread, from whatever thread asks."""
    return _launcher.call(start)


#: the libraries of :data:`PRELOAD`, imported in this order by :mod:`tracetui.runner.startup.libraries`
LIBRARIES = ["torch", "transformers", "transformers.trainer", "peft", "datasets", "trl.trainer.sft_config",
             "trl.trainer.sft_trainer"]
#: what every trial imports, imported once by the fork server (none of it initialises CUDA)
PRELOAD = ["tracetui.runner.startup.gcoff", "tracetui.runner.startup.serverlog", "tracetui.runner.adopt",
           "tracetui.runner.startup.metadata", "tracetui.runner.startup.optional", "tracetui.runner.startup.libraries",
           "tracetui.runner.worker", "tracetui.runner.sources", "tracetui.probe.callback",
           "tracetui.runner.startup.warm", "tracetui.runner.startup.gcfreeze"]  # (last: it freezes what the others made)
#: torch's fork-safe CUDA check (NVML, not the driver): on in the fork server only
NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"


def forking() -> bool:
    """Whether trials are forked from the fork server (see the module's note)."""
    return os.environ.get(envvars.START, "forkserver") == "forkserver" and sys.platform.startswith("linux")


def check_start_env() -> None:
    """A misspelt ``TRACETUI_START`` (``forksever``) would quietly start fresh interpreters:
    refuse it with one line instead."""

    envvars.env_value(envvars.START)


def trial_context():
    """The multiprocessing context trials start in: a fork server with :data:`PRELOAD`
    imported, started now (from the main thread, with the terminal's signals ignored, which
    the server and every trial forked from it inherit: the sweep alone decides what a Ctrl-C
    or a hang-up stops, and tells each trial with SIGTERM). ``spawn`` where there is no fork
    server (not Linux) or ``TRACETUI_START=spawn``. Called again, it returns the running server."""
    check_start_env()
    if not forking():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    main = threading.current_thread() is threading.main_thread()
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in TERMINAL_SIGNALS} if main else {}
    try:
        _ensure_server()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    return ctx


def _ensure_server() -> None:
    """Start the fork server, or start it again if it has died (``ensure_running`` does both;
    it returns at once while the server lives)."""
    from multiprocessing import forkserver

    # the server's imports must not initialise the CUDA driver (a forked child could not use
    # it): torch's availability checks go through NVML there; each trial turns it back off
    before = os.environ.get(NVML_CHECK)
    if before == "1":
        os.environ[envvars.USER_NVML_CHECK] = "1"  # the user's own: trials keep it
    os.environ[NVML_CHECK] = "1"
    os.environ[envvars.FORK_SERVER] = "1"  # a server that starts now is a subreaper (tracetui.runner.adopt)
    os.environ.pop(envvars.SERVER_LOG, None)  # (one left in the shell names no file of ours: the server removes it)
    try:
        _stop_a_server_not_ours()
        _until_a_killed_server_has_ended()
        if (not server_pid() or process_gone(server_pid())) and (log := _new_server_log()):
            os.environ[envvars.SERVER_LOG] = log  # the one that starts now writes its standard error there
        forkserver.ensure_running()
        if server_pid():
            _our_servers.add(server_pid())
        _stop_server_at_exit()
    finally:
        os.environ.pop(envvars.FORK_SERVER, None)
        os.environ.pop(envvars.SERVER_LOG, None)
        if before is None:
            os.environ.pop(NVML_CHECK, None)
        else:
            os.environ[NVML_CHECK] = before


#: the fork servers this process started itself (:func:`_ensure_server`)
_our_servers: set[int] = set()


def _stop_a_server_not_ours() -> None:
    """multiprocessing keeps one fork server per process: one that other code of this process
    started before tracetui (a plain ``get_context("forkserver")``) is not a subreaper, did not
    import :data:`PRELOAD` and has the terminal's signals, and ``ensure_running`` would hand it
    on as it is. What a run left behind would then re-parent to PID 1, where no rule finds a
    process that never exec'd (:func:`end_run`). Such a server is stopped, and one of tracetui's
    started in its place."""
    pid = server_pid()
    if pid and pid not in _our_servers and not process_gone(pid):
        stop_server()
        deadline = time.monotonic() + 5.0
        while not process_gone(pid) and time.monotonic() < deadline:  # (a signal is not delivered at once)
            time.sleep(0.01)


def _until_a_killed_server_has_ended(limit_s: float = 5.0) -> None:
    """A killed server's main thread is a zombie before its other threads have ended, and until
    they have, ``waitpid`` (which ``ensure_running`` asks) calls it alive: the next trial would
    be sent to it and fail. Wait for its end (without reaping it: that is ensure_running's)."""
    pid = server_pid()
    if not pid or not process_gone(pid):
        return
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return
        except ChildProcessError:
            return
        time.sleep(0.01)


def restart_server_if_gone() -> None:
    """Before each forked trial: a fork server killed from outside (an out-of-memory killer, a
    ``pkill python``) is started again, on the launcher thread with the terminal's signals
    blocked (a mask the new server and its trials inherit, as the first one had them
    ignored). Without it every later trial failed to start."""
    def shielded() -> None:
        with _terminal_signals_blocked():
            _ensure_server()

    launch(shielded)


_at_exit: list[int] = []


def _stop_server_at_exit() -> None:
    """Once per process: :func:`stop_server` when tracetui exits. Left to end by itself (it
    ends once tracetui's end of its pipe closes), the server outlived tracetui by its own
    interpreter's shutdown, holding tracetui's standard output and error open meanwhile: a
    ``tracetui --export csv -o - | ...``, or any caller waiting for the output to end, waited.
    By the time ``atexit`` runs, every trial has been reaped (one that has not,
    after a last-resort exit, dies with the server, as it would have)."""
    if os.getpid() not in _at_exit:
        import atexit

        mine = os.getpid()
        # (a process forked from this one inherits the handler: the server is not its to stop)
        atexit.register(lambda: _end_server() if os.getpid() == mine else None)
        _at_exit.append(mine)


def _end_server() -> None:
    """At exit: the server stopped, and the files of its standard error closed (removed too,
    where no server came to open one)."""
    stop_server()
    for fd, path in _server_logs:
        with contextlib.suppress(OSError):
            os.close(fd)
        with contextlib.suppress(OSError):
            os.remove(path)


#: the files the fork servers of this process wrote their standard error to, the running one's
#: last: this process's descriptor of each (never closed before tracetui's exit, so that a
#: reader never holds one closed meanwhile), and its path, whose name the server removes once it
#: has the file open (so that nothing is left however tracetui ends; the file lives while
#: someone holds it open)
_server_logs: list[tuple[int, str]] = []


def _new_server_log() -> str | None:
    """A new file for the standard error of the server that starts now, and its path; None
    where no temporary file can be made (the server's output then goes where tracetui's does)."""
    try:
        fd, path = tempfile.mkstemp(prefix="tracetui-server-", suffix=".log")
    except OSError:
        return None
    _server_logs.append((fd, path))
    return path


def server_log_size() -> int:
    """How many bytes the fork server has written to its standard error so far (0 before one)."""
    try:
        return os.fstat(_server_logs[-1][0]).st_size
    except (OSError, IndexError):
        return 0


def server_said(since: int) -> str:
    """The last line the fork server's standard error got after byte ``since``, or "": a trial
    forked from it that died before its run's log was open said its last words there (a
    traceback's last line names the error). Other trials forked meanwhile write there only in
    the same plight, so the line is this trial's unless two died so at once."""
    size = server_log_size()
    try:
        start = max(since, size - 4096)
        text = os.pread(_server_logs[-1][0], size - start, start).decode("utf-8", "replace")
    except (OSError, IndexError, ValueError):
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def stop_server() -> None:
    """Kill the fork server now: interrupted before any trial, tracetui exits while the server
    may still be importing, and left alone tracetui's exit waited for those imports (seconds)
    and the server spent them on a core; and at tracetui's exit
    (:func:`_stop_server_at_exit`). (It holds nothing a later sweep needs.)"""
    pid = server_pid()
    if pid and not process_gone(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def process_gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (exited, or a zombie nobody has reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] in ("Z", "X")
    except OSError:
        return True


def server_pid() -> int | None:
    """The fork server's pid (a forked trial's parent), when one runs."""
    return fork_server_pid()


def release_server() -> None:
    """In a forked trial: let go of the fork server's "tracetui is alive" pipe. multiprocessing
    hands every forked child the pipe's write end (so that it could fork more), and the server
    waits for the last holder to go before it exits: held by a trial, a killed tracetui would
    leave the server, and so the trial (whose parent-death signal waits for the server), alive."""
    if forking() and os.environ.get(NVML_CHECK) == "1" \
            and not os.environ.get(envvars.USER_NVML_CHECK):
        os.environ.pop(NVML_CHECK)  # the server's setting, not the user's: the usual check again
    fd = drop_fork_server_alive_fd()
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


def ensure_resource_tracker() -> None:
    """Start multiprocessing's resource tracker now, while ``sys.stderr`` is the real one.

    Textual replaces ``sys.stderr``; a tracker started later would be handed its bad file
    descriptor ("bad value(s) in fds_to_keep")."""
    try:
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    except (ImportError, OSError):  # platforms without one need nothing
        pass
