"""Nothing a run starts outlives the run.

A run's processes are found and ended when it ends (:func:`end_run`), whatever they did to leave
its process group (``setsid``, a double fork that re-parents them):

* Where tracetui's code is the run's own process (the built-in worker, a script run forked from
  the fork server), that process is a child subreaper (prctl PR_SET_CHILD_SUBREAPER,
  :func:`run_tree`): an orphan anywhere below it re-parents to it, not to PID 1, so while the run
  lives everything it started stays below it. The fork server is a subreaper too
  (:mod:`tracetui.runner.adopt`): once a run's process has gone, its orphans re-parent to the
  server, whose own children are otherwise only the processes tracetui forked there
  (:func:`_started_here`); what else is there was a run's. (The server reaps them: it waits for
  any child.)
* Every process of a run carries the run's mark in its environment (``TRACETUI_RUN_TREE``), which
  whatever it starts inherits, and which /proc shows for every process that exec'd with it: the
  processes of a run that starts as a fresh process (``run -- CMD``, ``sweep --fresh``,
  torchrun, a command of another environment) are found by it, wherever they went.

Not a cgroup per run: it needs write access to the cgroup tree (root, or a systemd delegation),
which most users' machines do not give. Not tracetui itself as the subreaper: its own children
include processes it does not track (multiprocessing's resource tracker, helpers that libraries
start), so an orphan it adopted could not be told from them, and it would have to reap what it
adopted. Not a fresh process's command as the subreaper (a subreaper mark outlives exec): the
user's program would collect orphans it never reaps, and lose them when it exits all the same.
What no rule finds: a process a fresh process's run starts with its environment cleared, that
also leaves its process tree before the run ends.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from typing import Callable

from ..core import envvars
from .lifetime import _prctl, forking, launch, process_gone, server_pid

PR_SET_CHILD_SUBREAPER = 36
#: after SIGTERM, how long a run's leftover processes have before SIGKILL
LEFTOVER_GRACE_S = 1.0

_tree_numbers = itertools.count(1)
#: the processes that made a run's mark (:func:`new_tree`), each once
_trees_at_exit: list[int] = []


def become_subreaper(prctl=None) -> bool:
    """Make this process a child subreaper: orphans below it re-parent to it. False where the
    system has no such thing."""
    prctl = prctl or _prctl()
    return prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def new_tree() -> str:
    """A fresh mark for one run's processes: this process's pid and the run's number in it. The
    first one also ends, at this process's exit, whatever a run left (:func:`end_every_run`)."""
    if os.getpid() not in _trees_at_exit:
        import atexit

        mine = os.getpid()
        _trees_at_exit.append(mine)
        # (registered after the fork server's stop: run before it, while the server is there)
        atexit.register(lambda: end_every_run() if os.getpid() == mine else None)
    return f"{os.getpid()}:{next(_tree_numbers)}"


def run_tree(tree: str, target: Callable, *args):
    """Process entry point of a run that tracetui's code starts (a forked or spawned worker, a
    forked script run): the process becomes a subreaper of what it starts and carries the run's
    mark ``tree``, then runs ``target(*args)``."""
    become_subreaper()
    os.environ[envvars.RUN_TREE] = tree
    return target(*args)


def _started_here() -> set[int]:
    """The pids of the processes this process started through multiprocessing and has not joined
    yet: every process it forked from the fork server (trials, the checks, a pool's workers).
    multiprocessing's own record (``active_children`` would also poll them, racing the threads
    that wait for them)."""
    from multiprocessing import process

    return {p.pid for p in process._children.copy() if p.pid}  # noqa: SLF001 - no public read-only one


def _processes() -> dict[int, tuple[int, int]]:
    """Every live process now: pid -> (parent pid, start time in clock ticks); zombies left out."""
    table = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[-1].split()
        except OSError:
            continue
        if len(fields) > 19 and fields[0] not in (b"Z", b"X"):
            table[int(name)] = (int(fields[1]), int(fields[19]))
    return table


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[-1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _carries(pid: int, mark: bytes, prefix: bool) -> bool:
    """Whether process ``pid``'s environment holds ``mark`` (``NAME=VALUE``; ``prefix``: a value
    that starts so)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            entries = fh.read().split(b"\0")
    except OSError:
        return False
    return any(e.startswith(mark) if prefix else e == mark for e in entries)


def run_processes(tree: str | None, *, prefix: bool = False, adopter: int | None = None,
                  below: tuple[int, ...] = ()) -> dict[int, int]:
    """The live processes of a run: those carrying its mark ``tree`` (``prefix``: every mark that
    starts so), the children the fork server ``adopter`` has that this process did not fork there
    (:func:`_started_here`), the processes below ``below``, and everything below those. pid ->
    start time. Never this process or ``adopter``."""
    own = _started_here() if adopter is not None else set()
    table = _processes()
    me = os.getpid()
    mark = f"{envvars.RUN_TREE}={tree}".encode() if tree else None
    found = set(p for p in below if p in table)
    for pid, (ppid, _) in table.items():
        if pid in (me, adopter) or ppid == 2 or pid == 2:  # (2: the kernel's threads)
            continue
        if adopter is not None and ppid == adopter and pid not in own:
            found.add(pid)
        elif mark is not None and _carries(pid, mark, prefix):
            found.add(pid)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    found -= {me, adopter}
    return {pid: table[pid][1] for pid in found if pid in table}


def end_processes(found: dict[int, int], grace_s: float = LEFTOVER_GRACE_S) -> int:
    """End ``found`` (pid -> start time, :func:`run_processes`): SIGTERM (and SIGCONT, for a
    stopped one), SIGKILL after ``grace_s``; a pid that now names another process is left alone
    (each is held by a pidfd, checked against its start time). How many were ended."""
    held: dict[int, int | None] = {}
    for pid, started in found.items():
        fd = None
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        except (OSError, AttributeError):
            fd = None  # no pidfds (an old kernel): signalled by pid
        if _start_time(pid) != started:
            if fd is not None:
                os.close(fd)
            continue
        held[pid] = fd

    def send(sig: int, pids) -> None:
        for pid in pids:
            try:
                if held[pid] is not None:
                    signal.pidfd_send_signal(held[pid], sig)
                else:
                    os.kill(pid, sig)
            except OSError:
                pass

    def wait(pids, limit_s: float) -> list[int]:
        deadline = time.monotonic() + limit_s
        left = [p for p in pids if not process_gone(p)]
        while left and time.monotonic() < deadline:
            time.sleep(0.02)
            left = [p for p in left if not process_gone(p)]
        return left

    try:
        send(signal.SIGTERM, held)
        send(signal.SIGCONT, held)
        left = wait(held, grace_s)
        send(signal.SIGKILL, left)
        wait(left, 2.0)
    finally:
        for fd in held.values():
            if fd is not None:
                os.close(fd)
    return len(held)


def end_run(tree: str | None, forked_from_server: bool = False, below: tuple[int, ...] = ()) -> int:
    """After a run's own process has ended: end every process the run started that is still there
    (see the section's note). ``forked_from_server``: its process was forked from the fork server,
    which adopted its orphans; ``below``: pids whose processes were below the run's process while
    it lived. How many were ended."""
    server = server_pid() if forked_from_server and forking() else None
    if server is not None and process_gone(server):
        server = None
    # read on the launcher thread, where every trial is forked: none is forked while it reads
    found = launch(lambda: run_processes(tree, adopter=server, below=below))
    return end_processes(found) if found else 0


def end_every_run() -> int:
    """At tracetui's exit: every process left of any run of this process (its mark, the fork
    server's adopted children)."""
    if os.getpid() not in _trees_at_exit:
        return 0  # no run was started here
    server = server_pid() if forking() else None
    found = run_processes(f"{os.getpid()}:", prefix=True,
                          adopter=server if server and not process_gone(server) else None)
    return end_processes(found) if found else 0
