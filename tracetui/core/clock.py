"""When this tracetui command's own parts happened (unix seconds), for the account of where its
time went (:func:`tracetui.analysis.time_spent`): the process's start (``command``), the fork
server's start and the end of its imports as a process forked from it reads them (``server``,
``libraries``), and the end of the checks (``checked``). A sweep writes them into its log as it
starts (a ``sweep`` event, with its own start and, at its end, its end)."""

from __future__ import annotations

import os
import shlex
import sys
import time

#: name -> unix seconds, as this command has reached them
marks: dict[str, float] = {}

#: this command's arguments, where it is this process (``tracetui ARGS`` from the shell)
argv: list[str] | None = None


def process_started() -> float:
    """When this process started: on Linux its age from ``/proc`` (to the clock tick, 10 ms),
    taken from now; elsewhere now (the interpreter's own start, tens of ms, then goes uncounted)."""
    now = time.time()
    try:
        with open("/proc/self/stat") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])  # field 22: start, in ticks after boot
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
        age = uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return now
    return now - age if 0.0 <= age < 3600.0 else now


def mark_command_start(process: bool) -> None:
    """First thing in a command: its start; ``process``: the command is this process (``tracetui``
    from the shell), which started it (its interpreter's start counts); else (called in a
    process that does more, as the tests do) now."""
    global argv
    marks.clear()
    marks["command"] = process_started() if process else time.time()
    argv = list(sys.argv[1:]) if process else None


def command_line() -> str | None:
    """The command this process runs, as the user would type it again (``tracetui ARGS``), or
    None where it was called from Python."""
    return None if argv is None else shlex.join(["tracetui", *argv])


def take() -> dict[str, float]:
    """The marks so far, handed to the sweep that starts now (a later sweep of the same process
    starts afresh)."""
    got = dict(marks)
    marks.clear()
    return got
