"""A run's own output (its standard output and error, and those of everything it starts), kept in
its log within a bound: the first :data:`HEAD_BYTES` and the last :data:`TAIL_BYTES`, and a line
between them saying how much was cut.

The run writes into a pipe; a thread of tracetui's reads it into the log (:class:`RunOutput`).
The log on disk is whole at any time, and never over the head, twice the tail and that line: once
it reaches that, the older half of what follows the head is cut (the tail kept, the line
rewritten with the count so far). What reads a failure from the log (the supervisor's
:func:`~tracetui.runner.supervise.classify_end`: an out-of-memory, the last line said) reads its
tail, which is kept whole. (A script that wrote 1 GB to its output left a 1 GiB log.)

The pipe holds :data:`PIPE_BYTES` (where the system allows): a run's ordinary output never waits
for the reader; a run that floods its output waits for it, at the speed of a file write.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import sys
import threading
from pathlib import Path
from typing import Any

#: what a run's log keeps of its output: the first and the last bytes
HEAD_BYTES = 2 * 1024 * 1024
TAIL_BYTES = 8 * 1024 * 1024
#: what a run's output pipe holds (Linux F_SETPIPE_SZ; 1 MiB is what an ordinary user may set)
PIPE_BYTES = 1024 * 1024
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
#: how long :meth:`RunOutput.close` waits for the last writer of the pipe to go
CLOSE_WAIT_S = 2.0


def size_text(n: int) -> str:
    """``n`` bytes in words (``1.0 GiB``, ``512 KiB``, ``12 bytes``)."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def cut_line(cut: int, head: int, tail: int, final: bool) -> bytes:
    """The line a log holds where its middle was cut."""
    said = "cut here" if final else "cut here so far"
    return (f"\n[tracetui: {cut} bytes ({size_text(cut)}) of this run's output {said}: its log keeps the "
            f"first {size_text(head)} and the last {size_text(tail)}]\n").encode()


class RunOutput:
    """The pipe a run's output goes into, and the thread that keeps it in ``path`` (see the
    module's note). ``writer``: the pipe's end to give the run (as its stdout and stderr);
    :meth:`started` once the run has it; :meth:`close` once the run's processes have ended."""

    def __init__(self, path, head: int | None = None, tail: int | None = None, fresh: bool = False):
        """``head``, ``tail``: the bytes kept (default :data:`HEAD_BYTES`, :data:`TAIL_BYTES`);
        ``fresh``: the log starts empty (else what it holds already is kept, as the head's)."""
        self.path = str(path)
        self.head = HEAD_BYTES if head is None else head
        self.tail = TAIL_BYTES if tail is None else tail
        #: bytes of output: all of it, cut from the log's middle, and lost (the log could not take them)
        self.total = self.cut = self.lost = 0
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | (os.O_TRUNC if fresh else 0), 0o644)
        self._size = os.lseek(self._fd, 0, os.SEEK_END)  # (what is there already counts as head)
        #: where the head ends, once the output has gone past it; the cut's line there, its length
        self._head_end: int | None = None
        self._line = 0
        self._reader, self.writer = os.pipe()
        try:
            fcntl.fcntl(self.writer, _F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass  # (a system that allows less: its default)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tracetui-run-output", daemon=True)
        self._thread.start()

    def started(self) -> None:
        """The run holds the pipe's write end: tracetui's copy goes (the pipe ends when the run's
        processes have all gone)."""
        if self.writer >= 0:
            os.close(self.writer)
            self.writer = -1

    def _loop(self) -> None:
        after_stop = 0
        try:
            while True:
                wait = 0 if self._stop.is_set() else 0.2
                if not select.select([self._reader], [], [], wait)[0]:
                    if self._stop.is_set():
                        return
                    continue
                data = os.read(self._reader, 1 << 16)
                if not data:
                    return
                self._take(data)
                if self._stop.is_set():  # asked to end: what the pipe holds now, then no more
                    after_stop += len(data)
                    if after_stop > 2 * PIPE_BYTES:
                        return
        except OSError:
            return

    def _write(self, data: bytes, at: int) -> None:
        try:
            done = os.pwrite(self._fd, data, at)
        except OSError:
            done = 0
        self.lost += len(data) - done  # a full disk: the output goes on, the log cannot take it

    def _take(self, data: bytes) -> None:
        self.total += len(data)
        if self._head_end is None:
            room = max(0, self.head - self._size)
            if room:
                self._write(data[:room], self._size)
                self._size += min(room, len(data))
                data = data[room:]
            if not data:
                return
            self._head_end = self._size  # past the head: from here on, the tail
        self._write(data, self._size)
        self._size += len(data)
        if self._size - self._head_end - self._line > 2 * self.tail:
            self._keep_tail(final=False)

    def _keep_tail(self, final: bool) -> None:
        """Cut the log's middle: the head, the cut's line, the last :attr:`tail` bytes (from the
        start of a line where one starts near)."""
        first = self._head_end + self._line  # what came after the head and the last cut's line
        start = max(first, self._size - self.tail)
        try:
            kept = os.pread(self._fd, self._size - start, start)
        except OSError:
            return
        newline = kept.find(b"\n", 0, 4096)
        if start > first and 0 <= newline < len(kept) - 1:
            kept = kept[newline + 1:]
        self.cut += self._size - first - len(kept)
        line = cut_line(self.cut, self.head, self.tail, final)
        try:
            os.ftruncate(self._fd, self._head_end)
        except OSError:
            return
        self._write(line + kept, self._head_end)
        self._line = len(line)
        self._size = self._head_end + len(line) + len(kept)

    def close(self, wait_s: float = CLOSE_WAIT_S) -> int:
        """Read the pipe to its end (every writer gone), or for ``wait_s`` seconds more, then
        stop; the log then holds its head, a line saying how much was cut, and its tail. The
        bytes cut (0: the log holds all the output)."""
        self.started()
        self._thread.join(wait_s)
        self._stop.set()
        self._thread.join()
        try:
            if self._head_end is not None and (self.cut or self._size - self._head_end > self.tail):
                self._keep_tail(final=True)
        finally:
            os.close(self._fd)
            os.close(self._reader)
        return self.cut

    def notice(self) -> str:
        """What the run's notice says of its cut output ("" when nothing was cut)."""
        if not self.cut:
            return ""
        return (f"its output was {size_text(self.total)}: its log {self.path} keeps the first "
                f"{size_text(self.head)} and the last {size_text(self.tail)}; {size_text(self.cut)} cut from the "
                "middle, as the log says there")


class PassFd:
    """A file descriptor in a multiprocessing payload: the process started with it gets its own copy
    (through the fork server or a spawned interpreter, as multiprocessing passes a pipe), and reads
    the number back where the payload is unpickled."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        from multiprocessing import reduction

        return _inherited_fd, (reduction.DupFd(self.fd),)


def _inherited_fd(dup) -> int:
    return dup.detach()


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


class TolerantLog:
    """The worker's output log, which must never stop training: on a full disk a library's print
    or progress bar would raise ``OSError`` inside the training loop (and Python's exit would
    fail flushing it), turning a healthy run into an error. Writes that fail are dropped."""

    def __init__(self, fh):
        self._fh = fh

    def write(self, text: str) -> int:
        try:
            return self._fh.write(text)
        except (OSError, ValueError):
            return len(text)

    def flush(self) -> None:
        try:
            self._fh.flush()
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str):  # fileno, isatty, encoding ...
        return getattr(self._fh, name)


def worker_output(spec: dict) -> tuple[Any, str]:
    """In tracetui's worker (:mod:`.worker`): the run's output to its log; and what to say where the log cannot be written ("")."""
    # Keep the child's prints off the terminal the TUI draws on. The sweep made the log before
    # starting this process (SweepBase._supervised); if it cannot be opened all the same, the
    # output goes nowhere and the run says so, never a traceback on the user's terminal.
    lost_log = ""
    try:
        if spec.get("output_fd") is not None:  # the run's output pipe, which the sweep keeps in the log
            log = TolerantLog(open(spec["output_fd"], "w", buffering=1, encoding="utf-8"))
        else:
            log = TolerantLog(open(spec["log_path"], "a", buffering=1, encoding="utf-8"))
    except OSError as exc:
        log = TolerantLog(open(os.devnull, "w", buffering=1, encoding="utf-8"))
        lost_log = f"its log {spec['log_path']} cannot be written ({exc.strerror}): its output is lost"
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    return log, lost_log
