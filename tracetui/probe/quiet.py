"""How quiet the machine was while a run measured its steps.

Host-bound training is slowed by anything else wanting a core, and a GPU shared with another
process or held back by its clocks gives slower steps than the split deserves. A ranking that
rests on such a run is a ranking of the machine's mood, so each run records, over its measured
steps: CPU time that other processes used (``/proc/stat`` less this process's own ``rusage``),
time stolen by the hypervisor, and (from the GPU samples, see :mod:`.gpu`) other processes on
its GPU and throttling. :func:`judge` turns that into a one-line reason to hold a verdict back.
"""

from __future__ import annotations

import os
import resource
import time
from typing import Any

from ..core import envvars


def _proc_stat() -> tuple[float, float] | None:
    """(busy, steal) CPU seconds of the whole machine since boot, or None where unreadable."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            first = fh.readline().split()
    except OSError:
        return None
    if not first or first[0] != "cpu":
        return None
    vals = [int(x) for x in first[1:]]
    vals += [0] * (8 - len(vals))
    user, nice, system, _idle, _iowait, irq, softirq, steal = vals[:8]
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    # guest time is already inside user on Linux; idle and iowait are not work
    return (user + nice + system + irq + softirq) / tick, steal / tick


def _tree_cpu(root: int) -> float | None:
    """CPU seconds of the process tree under ``root`` (itself included): each live process's
    own time plus what its reaped children used (``cutime``/``cstime``), so a descendant counts
    whether it is alive, finished inside the window, or a data loader worker still running."""
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    try:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone since the listing
        parent[pid] = int(fields[1])
        cpu[pid] = sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
    if root not in cpu:
        return None
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo.extend(children.get(pid, ()))
    return total


def _own_cpu() -> float:
    """CPU seconds of this process and the children it has waited for (no /proc)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def measuring_root() -> int:
    """The process whose tree counts as this measurement's own. A trial started by tracetui
    (a sweep's worker, a script under ``tracetui sweep``, a torchrun rank) counts its parent's
    tree: the sweep's other lanes, the other ranks and tracetui itself share the machine on
    purpose, and are not "other processes". A script on its own counts its own tree."""
    if os.environ.get(envvars.TRIAL) or os.environ.get(envvars.SOCKET) or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        owner = envvars.value_or(envvars.OWNER_PID)
        # tracetui itself when it says who it is (a trial forked by its fork server has the
        # server as parent), else the parent
        return owner if owner is not None and _alive(owner) else os.getppid()
    return os.getpid()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except PermissionError:
        return True
    except OSError:
        return False


def snapshot(root: int | None = None) -> dict[str, float] | None:
    stat = _proc_stat()
    if stat is None:
        return None
    root = measuring_root() if root is None else root
    own = _tree_cpu(root)
    return {"t": time.monotonic(), "busy": stat[0], "steal": stat[1],
            "own": own if own is not None else _own_cpu(), "root": root}


def between(a: dict[str, float] | None, b: dict[str, float] | None) -> dict[str, Any]:
    """The machine's CPU picture between two snapshots of this process."""
    cores = os.cpu_count() or 1
    if a is None or b is None or b["t"] <= a["t"]:
        return {"cores": cores}
    span = b["t"] - a["t"]
    # clock ticks of /proc (1/100 s) on both sides: a few ticks of rounding over a short window
    other = max(0.0, (b["busy"] - a["busy"]) - (b["own"] - a["own"])) / span
    steal = 100.0 * (b["steal"] - a["steal"]) / (span * cores)
    return {"cores": cores, "seconds": round(span, 3), "own_cpu_cores": round((b["own"] - a["own"]) / span, 3),
            "other_cpu_cores": round(other, 3), "steal_pct": round(max(0.0, steal), 2)}


