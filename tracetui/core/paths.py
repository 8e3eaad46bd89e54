"""The paths a command is given, checked before it starts: a file to read (``show``'s logs,
``--config``), the folder runs are written to (``--runs-dir``, in every subcommand), a file to
write (``-o``, ``--steps-csv``, every setting declared an output). Each problem is said in words
(what the path is, or why it cannot be used), for one line naming the flag. And the one way an
output is written (:func:`write_whole`), which never opens what is at the path."""

from __future__ import annotations

import errno
import os
import stat
import tempfile


def _stat_problem(exc: OSError, path: str) -> str:
    if exc.errno == errno.ENOENT:
        return "does not exist" if not os.path.islink(path) else "is a symbolic link to nothing"
    if exc.errno == errno.ELOOP:
        return "is a loop of symbolic links"
    if exc.errno == errno.ENOTDIR:
        return "is inside a file, not a folder"
    if exc.errno == errno.EACCES:
        return "cannot be reached (permission denied)"
    if exc.errno == errno.ENAMETOOLONG:
        return "is too long a path"
    return f"cannot be checked ({exc.strerror})"


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a file" if stat.S_ISREG(mode) else "a special file"


def _text_problem(path: str) -> str | None:
    if not path:
        return "is empty"
    if not path.isprintable():
        return "holds a character that is not printable"
    if len(path) > 4096:
        return "is too long a path"
    return None


def input_file_problem(path: str) -> str | None:
    """Why ``path`` is not a file that can be read, in words, or None. Never opens a FIFO
    (that would wait for a writer for ever)."""
    why = _text_problem(path)
    if why:
        return why
    try:
        st = os.stat(path)
    except OSError as exc:
        return _stat_problem(exc, path)
    if not stat.S_ISREG(st.st_mode):  # (a FIFO never opened: it would wait for a writer)
        return f"is {_kind(st.st_mode)}, not a file"
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    return None


def folder_problem(path: str, create: bool = True) -> str | None:
    """Why ``path`` cannot be a folder this process writes into, in words, or None; ``create``:
    make it (and its parents) when missing. Proven by writing, not guessed from the mode bits
    (which say nothing for root, nor on a read-only mount): a file is made in it and removed."""
    why = _text_problem(path)
    if why:
        return why
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            return "is a symbolic link to nothing"
        if not create:
            return "does not exist"
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG):
                return _stat_problem(exc, path)
            return f"cannot be created ({exc.strerror})"
        st = os.stat(path)
    except OSError as exc:
        return _stat_problem(exc, path)
    if not stat.S_ISDIR(st.st_mode):
        return f"is {_kind(st.st_mode)}, not a folder"
    try:
        fd, probe = tempfile.mkstemp(prefix=".tracetui-write-check-", dir=path)
    except OSError as exc:
        return f"is not writable ({exc.strerror})"
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:
        pass
    return None


def output_file_problem(path: str) -> str | None:
    """Why ``path`` cannot be a file tracetui writes (a summary, a steps CSV, a config), in words,
    or None. Only a regular file, or nothing, may be there: a folder, a FIFO, a socket or a device
    (``/dev/full``) is refused, and a symbolic link is never written through (``lstat``: nothing
    is opened, so a FIFO never makes this wait). (Its folder: :func:`folder_problem`.)"""
    why = _text_problem(path)
    if why:
        return why
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        return _stat_problem(exc, path)
    if st is not None and stat.S_ISLNK(st.st_mode):
        return "is a symbolic link, which tracetui never writes through"
    if st is not None and not stat.S_ISREG(st.st_mode):
        return f"is {_kind(st.st_mode)}, not a file"
    return None


class OutputRefused(OSError):
    """An output not written because of what is at its path (``str()``: the reason, in words)."""


def write_whole(path: str, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: into a new file beside it (``mkstemp``:
    made afresh, never an existing one opened), then renamed over ``path``. What is at ``path``
    is never opened: a FIFO put there at any time cannot make this wait (a rename replaces the
    name), and a symbolic link or anything but a regular file found there is refused
    (:class:`OutputRefused`). The mode of a file replaced is kept. Raises ``OSError`` (a full
    disk, a folder that cannot be written), the temporary file removed."""
    why = output_file_problem(path)
    if why:
        raise OutputRefused(f"not written: {path} {why}")
    try:
        mode = stat.S_IMODE(os.lstat(path).st_mode)
    except OSError:
        mode = 0o644
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError) and exc.filename == tmp:  # the user gave path, not tmp
            exc.filename = path
        raise


#: bytes read at a time when a data file is checked
_SCAN_CHUNK = 1 << 20


def data_file_problem(path: str, text: bool = True, rows: bool = False) -> str | None:
    """Why the data file at ``path`` (a regular file) cannot be a data set, in words, or None:
    empty (no bytes, or, for ``text`` formats, blank lines alone); for ``text`` formats, not
    valid UTF-8, where first: its line (``rows``: "row", a JSONL file's rows being its lines)
    and the byte. Read once, a megabyte at a time; a loader would otherwise fail on it with a
    traceback from deep inside (pyarrow's), or ``StopIteration``."""
    try:
        with open(path, "rb") as fh:
            lines, blank, carry = 0, True, b""
            while True:
                chunk = fh.read(_SCAN_CHUNK)
                data = carry + chunk
                if not data:
                    break
                blank = blank and not data.strip()
                if text:
                    try:
                        data.decode("utf-8")
                        carry = b""
                    except UnicodeDecodeError as exc:
                        if chunk and exc.reason == "unexpected end of data":
                            carry = data[exc.start:]  # a character cut by the chunk's end
                            data = data[:exc.start]
                        else:
                            line = lines + data.count(b"\n", 0, exc.start) + 1
                            column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
                            return (f"is not valid UTF-8: {'row' if rows else 'line'} {line} has byte "
                                    f"0x{data[exc.start]:02x} at byte {column} of the line")
                lines += data.count(b"\n")
                if not chunk:
                    break
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if blank:
        return "is empty" + ("" if os.path.getsize(path) == 0 else " (blank lines alone)")
    return None
