"""The paths a command is given, checked before it starts: a file to read (``show``'s logs,
``--config``), the folder runs are written to (``--runs-dir``, in every subcommand). Each
problem is said in words (what the path is, or why it cannot be used), for one line naming the
flag; nothing here raises anything but :class:`~tracetui.config.ConfigError`."""

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
