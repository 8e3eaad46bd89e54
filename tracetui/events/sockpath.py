"""Where a watch's socket goes, and the checks of its path and folder before anything listens
there: a folder only this user can write (made 0700, or refused), a path a socket may have, and
a socket left by a dead watcher removed while a live one, or anything else, is refused; and who
is at the other end of a connection (:func:`peer_uid`)."""

from __future__ import annotations

import errno
import os
import socket
import stat
import struct
import tempfile
from pathlib import Path

from ..core import envvars
from ..core.text import clean

#: a UNIX socket's path (sun_path) holds at most this many bytes
SOCKET_PATH_MAX = 107


def socket_temp_dir(room: int = 48) -> str:
    """Where tracetui's own sockets go: the temp directory (``$TMPDIR``), or ``/tmp`` where that
    leaves under ``room`` bytes for a socket's folder and name (a long scratch ``$TMPDIR`` of a
    cluster job): the path a socket may have is short."""
    tmp = tempfile.gettempdir()
    return tmp if len(os.fsencode(tmp)) + room <= SOCKET_PATH_MAX else "/tmp"


def private_socket(prefix: str, name: str) -> tuple[str, str]:
    """A fresh folder of this process's own (0700) for one socket, and the socket's path in it."""
    folder = tempfile.mkdtemp(prefix=prefix, dir=socket_temp_dir())
    return folder, os.path.join(folder, name)


def default_socket_dir() -> Path:
    """``$XDG_RUNTIME_DIR/tracetui``, else ``tracetui-UID`` in :func:`socket_temp_dir`."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "tracetui"
    return Path(socket_temp_dir()) / f"tracetui-{os.getuid()}"


def default_socket_path() -> str:
    """``TRACETUI_SOCKET``, else ``watch.sock`` in :func:`default_socket_dir`. That folder is
    made 0700 by the listener, and refused by both ends when someone else could write to it
    (:func:`unsafe_folder`): only this user can reach the socket."""
    env = envvars.value_or(envvars.SOCKET, say=True)
    if env:
        return env
    return str(default_socket_dir() / "watch.sock")


def unsafe_folder(folder: str | os.PathLike) -> str | None:
    """Why ``folder`` cannot hold a private socket (not a real folder, another owner, writable by
    group or others), or None when it can. Such a folder in the shared temp directory lets another
    user replace the socket and receive this user's events."""
    try:
        st = os.lstat(folder)
    except OSError as exc:
        return f"cannot be checked ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if st.st_uid != os.geteuid():
        return f"belongs to another user (uid {st.st_uid})"
    if st.st_mode & 0o022:
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def writable_by_others(folder: str | os.PathLike) -> str | None:
    """Why another user could replace a socket in ``folder`` (a folder given by the user), or
    None: the folder or one above it belongs to another user (not root), or others may write
    to it without the sticky bit (which keeps them from removing or renaming what is not theirs).
    Such a user could put their own socket in its place, and this watch would wait for clients
    that never come, and remove their socket at its end."""
    try:
        real = Path(os.path.realpath(folder))
    except (OSError, ValueError) as exc:
        return f"cannot be checked ({getattr(exc, 'strerror', None) or exc})"
    for place in (real, *real.parents):
        try:
            st = os.stat(place)
        except OSError as exc:
            return f"cannot be checked ({exc.strerror})"
        what = None
        if st.st_uid not in (0, os.geteuid()):
            what = f"belongs to another user (uid {st.st_uid})"
        elif st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            who = "its group and others" if st.st_mode & 0o022 == 0o022 else "others" if st.st_mode & 0o002 else "its group"
            what = f"is writable by {who} without the sticky bit (mode {stat.S_IMODE(st.st_mode):o})"
        if what:
            return what if place == real else f"is inside {place}, which {what}"
    return None


def socket_origin(given: str | None) -> str:
    """Where a watch's socket path came from, as its messages name it: ``--socket``, or
    ``TRACETUI_SOCKET`` when the path is that variable's."""
    if not given and envvars.value_or(envvars.SOCKET):
        return envvars.SOCKET
    return "--socket"


class ListenerError(Exception):
    """The socket cannot be served (one line for the user)."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(mode):
            return name
    return "not a socket"


def prepare_socket_path(path: str, private: bool | None = None, origin: str | None = "--socket") -> bool:
    """Get ``path`` ready to listen on; return True when its folder was made here.

    The folder is made 0700 when missing. ``private`` (default: the folder is
    :func:`default_socket_dir`): an existing folder must be this user's and writable by no one
    else, or it is refused. A folder given by the user (``origin``: ``--socket`` or
    ``TRACETUI_SOCKET``, which the messages name; None for tracetui's own private sockets) is
    refused where another user could replace the socket there (:func:`writable_by_others`), and
    never changed. A socket left by a dead watcher is removed, a live one refused; anything else
    at ``path`` (a file, a folder, a link) is refused, never removed."""
    name = origin or "--socket"
    fix = (f"set {envvars.SOCKET} to a path in a folder only you can write, or unset it" if name == envvars.SOCKET
           else "give --socket in a folder only you can write")
    p = Path(path)
    _check_length(os.fspath(path), name)
    if private is None:
        private = p.parent == default_socket_dir()
    made = _make_folder(p.parent, name)
    if private and not made:
        bad = unsafe_folder(p.parent)
        if bad:
            raise ListenerError(f"{name}: the socket folder {p.parent} {bad}, so another user could take the socket; "
                                f"remove it (rm -r {p.parent}) or give --socket in a folder of your own")
    elif not private and origin is not None:
        bad = writable_by_others(p.parent)
        if bad:
            raise ListenerError(f"{name}: the socket folder {clean(str(p.parent))} {bad}, so another user could "
                                f"replace the socket; {fix}")
    _clear_stale(p, name)
    return made


def _check_length(text: str, name: str) -> None:
    """Refuse a socket path that is empty, not printable, or longer than a socket path may be."""
    size = len(os.fsencode(text)) if text.isprintable() else -1
    if not 0 < size <= SOCKET_PATH_MAX:
        raise ListenerError(f"{name}: {clean(text)} " + ("holds a character that is not printable" if size < 0 else
                            f"is {size} bytes long, over the 107 a socket path may have" if size else "is empty")
                            + "; give a shorter path")


def _make_folder(parent: Path, name: str) -> bool:
    """Make the socket's folder 0700 where it is missing; whether it was made here."""
    if parent.exists() or parent.is_symlink():
        return False
    try:
        parent.mkdir(parents=True, mode=0o700)
        os.chmod(parent, 0o700)  # ours: whatever the umask, nobody else gets in
    except FileExistsError:
        return False  # someone made it meanwhile: checked like any existing folder
    except OSError as exc:
        raise ListenerError(f"{name}: cannot create {parent} ({exc.strerror}); choose another path") from None
    return True


def _clear_stale(p: Path, name: str) -> None:
    """Remove a socket at ``p`` that no watcher listens on; refuse a live one, or anything else there."""
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ListenerError(f"{name}: {p} cannot be checked ({exc.strerror}); give another path") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise ListenerError(f"{name}: {p} exists and is {_kind(st.st_mode)}, not a socket; "
                            "give another path (tracetui removes only a stale socket)")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(p))
    except OSError as exc:
        if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
            try:
                p.unlink(missing_ok=True)  # stale: its watcher is gone
            except OSError as exc2:
                raise ListenerError(f"{name}: cannot remove the stale socket {p} ({exc2.strerror}); "
                                    "give another path") from None
        else:
            raise ListenerError(f"{name}: {p} exists and cannot be checked ({exc.strerror})") from None
    else:
        raise ListenerError(f"{name}: another tracetui watch is listening on {p}; stop it or give another path")
    finally:
        probe.close()


def peer_uid(sock: socket.socket) -> int | None:
    """The user id of the process at the other end of a UNIX socket (``SO_PEERCRED``), or None
    where the system cannot say."""
    opt = getattr(socket, "SO_PEERCRED", None)
    if opt is None:
        return None
    try:
        _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, opt, struct.calcsize("3i")))
    except OSError:
        return None
    return uid
