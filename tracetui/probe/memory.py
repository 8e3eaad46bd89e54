"""A CPU run's peak data size over a window of steps (what ``--memory-limit`` caps there)."""

from __future__ import annotations


def reset_data_peak() -> None:
    """Start :func:`data_peak_gib`'s window: reset the kernel's resident high-water mark
    (``/proc/self/clear_refs`` 5; where refused, the window is the process's life)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def data_peak_gib() -> float | None:
    """On the CPU, the process's peak data size (GiB) since :func:`reset_data_peak`: what
    ``--memory-limit`` caps there (``RLIMIT_DATA``). The kernel keeps no peak of the data size,
    but does of the resident size: the resident high-water mark less file-backed pages, plus the
    data that is mapped but not resident. None where ``/proc`` says nothing (not Linux)."""
    try:
        with open("/proc/self/status") as fh:
            kb = {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in fh) if v.strip().endswith("kB")}
        peak = kb["VmHWM"] - kb.get("RssFile", 0) - kb.get("RssShmem", 0) + max(0, kb["VmData"] - kb["RssAnon"])
    except (OSError, KeyError, ValueError, IndexError):
        return None
    return peak / 2**20
