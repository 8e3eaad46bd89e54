"""A command's explicit outputs (``-o``, ``--steps-csv``, every setting declared an output), before
anything runs: each a path that can be written, not one already there unless ``--force``, no two
flags on one file, and locked against a second command writing it at the same time.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..core.config import ConfigError, output_settings
from ..core.paths import folder_problem, output_file_problem
from ..core.text import clean

_held_locks: dict[str, int] = {}


def _lock_path(path: str) -> str:
    return os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tracetui-lock")


def lock_output(path: str, flag: str) -> None:
    """Hold an exclusive lock beside ``path`` for as long as this process lives (or until
    :func:`release_outputs`): a second sweep writing the same file is refused with one line
    instead of silently replacing the first one's results. The kernel drops the lock when the
    process dies however it dies, so a lock file left by a killed sweep never blocks anyone."""
    import fcntl

    if path == "-":
        return
    key = os.path.abspath(path)
    if key in _held_locks:
        return
    lock = _lock_path(key)
    while True:
        try:  # (never through a link; O_NONBLOCK: a FIFO put there cannot make this wait)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError:
            return  # a folder we cannot write in: the output check says so where it matters
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # not a lock file of ours: nothing to lock
            os.close(fd)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            finally:
                os.close(fd)
            raise ConfigError(flag, f"{path} is being written by another tracetui sweep"
                              + (f" (pid {holder})" if holder.isdigit() else "") + ", which is still running",
                              "wait for it to finish, or give another path") from None
        except OSError:  # a file system without locks
            os.close(fd)
            return
        try:  # its last holder may have removed it between our open and lock: lock what is there
            st, mine = os.stat(lock), os.fstat(fd)
            if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:  # who holds it, for the line that refuses a second writer (a full disk: held all the same)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except OSError:
        pass
    _held_locks[key] = fd


def release_outputs() -> None:
    """Drop the output locks (removing their files while they are still held: see :func:`lock_output`)."""
    for key, fd in list(_held_locks.items()):
        try:
            os.unlink(_lock_path(key))
        except OSError:
            pass
        os.close(fd)
        del _held_locks[key]


def check_new(path: str | None, flag: str, force: bool) -> None:
    """Refuse an explicit output that is already there (a summary of an earlier sweep, a file of
    the user's) unless ``--force``: results are never replaced silently."""
    if not path or path == "-" or force:
        return
    p = Path(path)
    if p.is_file() and p.stat().st_size > 0:
        raise ConfigError(flag, f"{path} already exists", "give another path, or add --force to replace it")


def check_writable(path: str, flag: str) -> None:
    """``path`` as an output of ``flag``: nothing there but a regular file, in a folder that can
    be written (:func:`tracetui.core.paths.output_file_problem`); else one line naming the flag."""
    if path == "-":
        return
    why = output_file_problem(path)
    if why:
        raise ConfigError(flag, f"{clean(path)} {why}", "give the path of a file"
                          + (" (- for stdout)" if flag in ("--output", "--steps-csv") else ""))
    parent = os.path.dirname(os.path.abspath(path))
    why = folder_problem(parent, create=False)  # (proven by writing there)
    if why:
        raise ConfigError(flag, f"folder {clean(parent)} {why}", "create it or choose another path"
                          if why == "does not exist" else "choose a path in a folder you can write")


def output_paths(ns, cfg=None) -> list[tuple[str, str]]:
    """The explicit output paths of a command, with their flags (the defaults are the sweep's own):
    ``-o``, ``--steps-csv``, and every setting declared an output (:func:`tracetui.core.config.output_settings`)."""
    source = cfg if cfg is not None else ns
    given = [(getattr(ns, "output", None), "--output"), (getattr(ns, "steps_csv", None), "--steps-csv")]
    given += [(getattr(source, name, None), flag) for name, flag in output_settings()]
    return [(path, flag) for path, flag in given if path]


def check_outputs(ns, cfg=None, lock: bool = True) -> None:
    """Every explicit output, before anything runs: a path that can be written, not a symbolic
    link, not one already there (unless ``--force``), no two flags on one file, and (``lock``)
    locked against a second command writing it at the same time."""
    peak = getattr(ns, "peak_tflops", None)
    if cfg is None and isinstance(peak, float) and not 0 < peak < 1e6:  # show, watch (a sweep's config checks its own)
        raise ConfigError("--peak-tflops", f"must be a positive number of TFLOP/s, got {peak}",
                          "give e.g. --peak-tflops 989 (an H100 SXM's dense bf16)")
    seen: dict[str, str] = {}
    for path, flag in output_paths(ns, cfg):
        if path == "-":
            continue
        key = os.path.abspath(path)
        if key in seen:
            raise ConfigError(flag, f"{path} is also given to {seen[key]}", "give each output its own path")
        seen[key] = flag
        check_writable(path, flag)
    if lock:
        # Before the checks that take seconds (a second sweep on the same outputs is refused at
        # once), and held until the process ends; let go if anything below refuses the run.
        if not _held_locks:
            import atexit

            atexit.register(release_outputs)
        for path, flag in output_paths(ns, cfg):
            lock_output(path, flag)
    try:
        if lock:  # after the lock, so that a command still writing it is named as such
            for path, flag in output_paths(ns, cfg):
                check_new(path, flag, bool(getattr(ns, "force", False)))
    except ConfigError:
        release_outputs()
        raise
