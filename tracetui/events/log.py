"""Append-only JSONL event logs: every event is on disk as soon as it arrives.

One line per event, written with one ``write`` on an ``O_APPEND`` descriptor, so a crash of
anything (worker, TUI, the machine's power aside) loses nothing already measured, and
``tracetui show`` can rebuild every table from it. A line the disk cannot take whole is taken
back out (the file is cut back to the last whole line): the log never holds a torn line, and
:attr:`EventLog.failed_lines` counts exactly the events that are not in it.
"""

from __future__ import annotations

import errno
import gzip
import os
import time
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterable, Iterator

from .schema import dumps, parse_line

#: lines longer than this are not events (and not read into memory whole)
MAX_LINE = 1 << 20
#: bytes read at a time by :func:`read_events`
_CHUNK = 1 << 16


class EventLog:
    """Appends events to ``path`` as JSON lines, each on disk once :meth:`append` returns True.

    A write that fails (a full disk, a file size limit, an I/O error) is never fatal and never
    leaves part of a line behind. ``error`` holds the first failure's reason as one line, and
    ``failed_lines`` the number of events that are not in the file. A caller that finishes with
    ``failed_lines`` above 0 must say so (``incomplete_message``) and exit with a status that
    says its outputs are incomplete.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.error: str | None = None
        self.failed_lines = 0
        self.written = 0
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._end = os.lseek(self._fd, 0, os.SEEK_END)
        if self._end and not self._ends_with_newline():
            # A torn last line from an earlier writer: end it, so the next event is a line of its own.
            self._write_line(b"\n")

    @property
    def incomplete(self) -> bool:
        """Some events could not be written: the log is missing them."""
        return self.failed_lines > 0

    def incomplete_message(self) -> str:
        """One line for the user when :attr:`incomplete`, else ``""``."""
        if not self.failed_lines:
            return ""
        return (f"{self.failed_lines} event(s) could not be written to {self.path} ({self.error}); "
                "the log and what is built from it are incomplete: free space and run again")

    def _ends_with_newline(self) -> bool:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(-1, os.SEEK_END)
                return fh.read(1) == b"\n"
        except OSError:
            return True

    def _write_line(self, data: bytes) -> str | None:
        """Write ``data`` whole at the end of the file; return why not (the file then unchanged)."""
        assert self._fd is not None
        done = 0
        try:
            while done < len(data):
                n = os.write(self._fd, data[done:] if done else data)
                if n <= 0:
                    raise OSError(errno.ENOSPC, "no space left on device")
                done += n
        except OSError as exc:
            why = exc.strerror or str(exc)
            if exc.errno == errno.EFBIG:
                why = "file too large (the file size limit is reached)"
            if done:
                try:  # take the part that got in back out: no torn line
                    os.ftruncate(self._fd, self._end)
                except OSError as exc2:
                    why += f"; a partial line could not be removed ({exc2.strerror})"
            return why
        self._end = os.lseek(self._fd, 0, os.SEEK_CUR)
        return None

    def append(self, event: dict) -> bool:
        """Write one event; return whether it is in the file. A failure is counted
        (``failed_lines``), its reason kept (``error``), and the log goes on."""
        if self._fd is None:
            self.failed_lines += 1
            self.error = self.error or f"{self.path} is closed"
            return False
        data = (dumps(event, separators=(",", ":")) + "\n").encode("utf-8", "replace")
        why = self._write_line(data)
        if why is None:
            self.written += 1
            return True
        self.failed_lines += 1
        if self.error is None:
            self.error = f"cannot write {self.path}: {why}"
        return False

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def discard_if_empty(self) -> None:
        """Close, and remove the file and its folder if nothing was ever written (a watch that
        was refused leaves nothing behind)."""
        self.close()
        try:
            if self.path.stat().st_size == 0:
                self.path.unlink()
                self.path.parent.rmdir()
        except OSError:
            pass


@dataclass
class ReadReport:
    events: list[dict] = field(default_factory=list)
    skipped: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str) -> None:
        self.skipped += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def summary(self) -> str:
        if not self.skipped:
            return ""
        parts = ", ".join(f"{n} {r}" for r, n in sorted(self.reasons.items(), key=lambda kv: -kv[1]))
        return f"skipped {self.skipped} bad line(s): {parts}"


def _lines(fh: IO[bytes], report: "ReadReport", max_line: int) -> Iterator[bytes]:
    """The lines of ``fh``, read ``_CHUNK`` bytes at a time: a line over ``max_line`` bytes is
    skipped (and counted) as it streams past, never held whole."""
    buf = bytearray()
    skipping = False
    while True:
        chunk = fh.read(_CHUNK)
        if not chunk:
            break
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                if not skipping:
                    buf += chunk[start:]
                    if len(buf) > max_line:
                        report.skip("over-long line")
                        skipping = True
                        buf.clear()
                break
            if skipping:
                skipping = False
            else:
                buf += chunk[start:nl]
                if len(buf) > max_line:
                    report.skip("over-long line")
                else:
                    yield bytes(buf)
                buf.clear()
            start = nl + 1
    if buf and not skipping:
        yield bytes(buf)


def read_events(paths: Iterable[str | os.PathLike], report: ReadReport | None = None,
                max_line: int = MAX_LINE) -> ReadReport:
    """Read and validate events from JSONL files, skipping (and counting) what is broken:
    truncated or garbage lines, unknown schema versions, events that break the schema, lines
    over ``max_line`` bytes. Memory stays bounded by the longest line kept, whatever the file."""
    report = report or ReadReport()
    for path in paths:
        with _open_log(path) as fh:
            try:
                for raw in _lines(fh, report, max_line):
                    line = raw.strip()
                    if not line:
                        continue
                    event, why = parse_line(line)
                    if event is not None:
                        report.events.append(event)
                    else:
                        report.skip("not JSON (truncated or garbage)" if why == "not JSON" else why)
            except (EOFError, zlib.error, gzip.BadGzipFile):
                report.skip("a gzip stream cut short or corrupt (the events before it are kept)")
    return report


def _open_log(path: str | os.PathLike):
    """An event log as bytes: plain JSONL, or gzip-compressed (``events.jsonl.gz``, as logs are
    archived), told apart by the gzip magic number, not the name."""
    with open(path, "rb") as fh:
        compressed = fh.read(2) == b"\x1f\x8b"
    return _GzipLog(path) if compressed else open(path, "rb")


class _GzipLog:
    """A gzip log read a little at a time: a stream cut short raises at the cut, and what was
    decompressed before it has been handed on (one large read would lose it with the error)."""

    PIECE = 8192

    def __init__(self, path: str | os.PathLike):
        self._fh = gzip.open(path, "rb")

    def read(self, n: int = -1) -> bytes:
        return self._fh.read(self.PIECE if n is None or n < 0 else min(n, self.PIECE))

    def __enter__(self) -> "_GzipLog":
        return self

    def __exit__(self, *exc) -> None:
        self._fh.close()


def new_sweep_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:4]
