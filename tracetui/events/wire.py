"""The wire between a training process and tracetui: newline-delimited JSON events over a local
UNIX socket.

:class:`SocketSink` sends a process's events (``TraceCallback``'s, a sweep trial's); when
nothing listens, or the listener goes away, it keeps every event of the run in a JSONL file
instead (path printed once). It never blocks the caller: events go to an in-process buffer that
a sender thread empties. :class:`SocketListener` (used by ``watch``, ``sweep -- script`` and
``run``) drops, and counts, lines over :data:`MAX_LINE`, invalid JSON and schema violations. Both
ends check who is at the other: the same user, in a private folder.
"""

from __future__ import annotations

import array
import collections
import errno
import os
import selectors
import socket
import stat
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from ..core import envvars
from .schema import OUT_OF_BOUNDS, dumps, parse_line
from ..core.text import clean

#: the longest line (one event) a listener accepts, in bytes
MAX_LINE = 64 * 1024
#: bytes a listener buffers per connection before a line must end
_MAX_PENDING = MAX_LINE + 1
#: connections a listener serves at once. A connection that has sent no event yet (nothing, or
#: only a part of a line, or lines that are not events) is closed after :data:`SILENT_S`, and the
#: oldest such one is closed at once to let a new one in: connections that never say anything
#: cannot keep a client out (a callback, once greeted, sends its run's start at once). Past the
#: limit with every connection a client, a new one is closed (its callback falls back to its
#: JSONL file, so nothing is lost)
MAX_CONNECTIONS = 128
SILENT_S = 10.0
#: at most one line this often, while a listener runs, on what it refused or dropped since
NOTICE_EVERY_S = 10.0
#: what a connection closed before it sent any event counts as
SILENT = "connection that sent no event"
#: bytes of unfinished lines a listener holds over all connections together
MAX_BUFFERED = 4 * 1024 * 1024
#: what a listener sends each client it accepts: a callback that does not get it within
#: :data:`HELLO_TIMEOUT_S` knows nobody reads the socket (a listener that stopped serving still
#: lets clients connect into its backlog) and keeps its events in its file instead
HELLO = b"tracetui-watch 1\n"
HELLO_TIMEOUT_S = 2.0
#: a send that moves no byte for this long means the listener stopped reading
SEND_TIMEOUT_S = 3.0
#: at the end of a run, how long the listener may take to read what was sent
DRAIN_TIMEOUT_S = 3.0


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


def _unsent(sock: socket.socket) -> int | None:
    """Bytes sent on ``sock`` that the peer has not read yet (Linux ``SIOCOUTQ``), or None."""
    try:
        import fcntl
        import termios

        buf = array.array("i", [0])
        fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, buf)
        return buf[0]
    except (ImportError, AttributeError, OSError):
        return None


def script_say(line: str) -> None:
    """A line on the training script's stderr (quoting paths and exceptions: one printable line)."""
    try:
        sys.stderr.write(clean(line) + "\n")
    except (OSError, ValueError):
        pass


# ---------------------------------------------------------------------------------------------
# Sending side


class SocketSink:
    """Events to a listener socket, falling back to a JSONL file; never blocks the caller.

    The socket is used only when the listener proves it is there and serving: it must run as
    this user (``SO_PEERCRED``), sit in a private folder when the folder is the default one, and
    greet the connection (:data:`HELLO`). A listener that stops reading is noticed either way: a
    send that moves nothing for :data:`SEND_TIMEOUT_S`, or bytes still unread
    :data:`DRAIN_TIMEOUT_S` after the run ends. Then every event of the run goes to the file.
    """

    def __init__(self, socket_path: str, jsonl_path: str, quiet: bool = False):
        self.socket_path = socket_path
        self.jsonl_path = jsonl_path
        self.quiet = quiet
        self._buf: collections.deque = collections.deque()
        # This run's events, replayed into the file if the listener goes away: every step and run
        # event, and the latest GPU samples (a day of 10 Hz samples would not fit in memory).
        self._history: list[dict] = []
        self._gpu_history: collections.deque = collections.deque(maxlen=20_000)
        self._cv = threading.Condition()
        self._closing = False
        self._sock: socket.socket | None = None
        self._file = None
        #: why the socket is not used (None while it is, or before the first event)
        self.why_file: str | None = None
        self._thread = threading.Thread(target=self._loop, name="tracetui-attach", daemon=True)
        self._thread.start()

    def emit(self, event: dict) -> None:
        with self._cv:
            self._buf.append(event)
            self._cv.notify()

    def _connect(self) -> None:
        why = self._try_connect()
        if why is not None:
            self._sock = None
            self._open_file(why)

    def _try_connect(self) -> str | None:
        """Connect to the listener; return why not, or None when connected."""
        folder = Path(self.socket_path).parent
        if folder == default_socket_dir():
            bad = unsafe_folder(folder) if folder.exists() or folder.is_symlink() else None
            if bad:
                return (f"the socket folder {folder} {bad}, so the socket there is not trusted "
                        f"(remove the folder, or set {envvars.SOCKET})")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(HELLO_TIMEOUT_S)
            s.connect(self.socket_path)
            uid = peer_uid(s)
            if uid is not None and uid != os.geteuid():
                s.close()
                return f"the listener at {self.socket_path} runs as another user (uid {uid}); not sending to it"
            hello = b""
            while not hello.endswith(b"\n") and len(hello) < 64:
                chunk = s.recv(64 - len(hello))
                if not chunk:
                    break
                hello += chunk
            if hello != HELLO:
                s.close()
                return f"the listener at {self.socket_path} does not answer"
            s.settimeout(SEND_TIMEOUT_S)
        except socket.timeout:
            s.close()
            return f"the listener at {self.socket_path} does not answer"
        except OSError:
            s.close()
            return f"no watcher at {self.socket_path}"
        self._sock = s
        return None

    def _open_file(self, why: str) -> None:
        if self._file is not None:
            return
        self.why_file = why
        try:
            Path(self.jsonl_path).parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.jsonl_path, "a", encoding="utf-8")
        except OSError as exc:
            if not self.quiet:
                script_say(f"tracetui: {why}; cannot keep events in {self.jsonl_path} ({exc.strerror})")
            self._file = False  # type: ignore[assignment]
            return
        if not self.quiet:
            script_say(f"tracetui: {why}; events kept in {self.jsonl_path}")
        for e in sorted(self._history + list(self._gpu_history), key=lambda e: e["t"]):
            self._write_file(e)

    def _write_file(self, event: dict) -> None:
        if self._file:
            try:
                self._file.write(dumps(event, separators=(",", ":")) + "\n")
                self._file.flush()
            except OSError:
                pass  # a full disk: the socket is gone too; training goes on

    def _remember(self, event: dict) -> None:
        (self._gpu_history if event.get("type") == "gpu" else self._history).append(event)

    def _drop_socket(self, why: str) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._open_file(why)

    def _send(self, event: dict) -> None:
        if self._sock is not None:
            try:
                self._sock.sendall((dumps(event, separators=(",", ":")) + "\n").encode())
                self._remember(event)
                return
            except socket.timeout:  # the listener is there but stopped reading
                self._drop_socket(f"the watcher at {self.socket_path} stopped reading")
            except OSError:  # the listener went away mid-run
                self._drop_socket(f"the watcher at {self.socket_path} went away")
        self._write_file(event)

    def _drain(self) -> None:
        """At the end: wait until the listener has read everything sent, else use the file."""
        if self._sock is None:
            return
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while True:
            left = _unsent(self._sock)
            if not left:  # all read, or the system cannot say
                return
            if time.monotonic() > deadline:
                self._drop_socket(f"the watcher at {self.socket_path} stopped reading")
                return
            time.sleep(0.02)

    def _loop(self) -> None:
        try:
            self._connect()
            while True:
                with self._cv:
                    while not self._buf and not self._closing:
                        self._cv.wait()
                    if not self._buf and self._closing:
                        break
                    batch = list(self._buf)
                    self._buf.clear()
                for event in batch:
                    self._send(event)
            self._drain()
        finally:
            if self._sock is not None:
                self._sock.close()
            if self._file:
                self._file.close()

    def close(self, timeout: float = 10.0) -> None:
        with self._cv:
            self._closing = True
            self._cv.notify()
        self._thread.join(timeout)


# ---------------------------------------------------------------------------------------------
# Listening side


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
    parent = p.parent
    text = os.fspath(path)
    size = len(os.fsencode(text)) if text.isprintable() else -1
    if not 0 < size <= SOCKET_PATH_MAX:
        raise ListenerError(f"{name}: {clean(text)} " + ("holds a character that is not printable" if size < 0 else
                            f"is {size} bytes long, over the 107 a socket path may have" if size else "is empty")
                            + "; give a shorter path")
    if private is None:
        private = parent == default_socket_dir()
    made = False
    if not parent.exists() and not parent.is_symlink():
        try:
            parent.mkdir(parents=True, mode=0o700)
            os.chmod(parent, 0o700)  # ours: whatever the umask, nobody else gets in
            made = True
        except FileExistsError:
            pass  # someone made it meanwhile: checked below like any existing folder
        except OSError as exc:
            raise ListenerError(f"{name}: cannot create {parent} ({exc.strerror}); choose another path") from None
    if private and not made:
        bad = unsafe_folder(parent)
        if bad:
            raise ListenerError(f"{name}: the socket folder {parent} {bad}, so another user could take the socket; "
                                f"remove it (rm -r {parent}) or give --socket in a folder of your own")
    elif not private and origin is not None:
        bad = writable_by_others(parent)
        if bad:
            raise ListenerError(f"{name}: the socket folder {clean(str(parent))} {bad}, so another user could replace "
                                f"the socket; {fix}")
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return made
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
    return made


class SocketListener:
    """Accepts attached scripts on a UNIX socket; valid events go to ``on_event``.

    One selector thread serves every connection with non-blocking reads: a client that floods,
    stalls mid-line or never sends cannot hold up the others. Only clients of this user are
    served (``SO_PEERCRED``), at most :data:`MAX_CONNECTIONS` at once, holding at most
    :data:`MAX_LINE` bytes of an unfinished line each and :data:`MAX_BUFFERED` together; a
    connection that sends no event is closed after :data:`SILENT_S`, or sooner to let a new
    one in, and what was refused or dropped is said as it happens (``on_notice``). Nothing
    one line holds can stop the thread: a line that cannot be parsed, breaks the schema or makes
    ``on_event`` raise is dropped and counted by reason in :attr:`dropped`, and the next line
    is read. Out of file descriptors, it waits (up to a second) before accepting again.
    """

    def __init__(self, path: str, on_event: Callable[[dict], None], max_connections: int = MAX_CONNECTIONS,
                 max_buffered: int = MAX_BUFFERED, origin: str | None = "--socket",
                 on_notice: Callable[[str], None] | None = None, silent_s: float = SILENT_S):
        """``origin``: where ``path`` came from (``--socket``, ``TRACETUI_SOCKET``; None: a private
        socket of tracetui's own), for :func:`prepare_socket_path`; ``on_notice``: called (from the
        listener's thread) with one line, at most every :data:`NOTICE_EVERY_S`, when connections or
        lines were refused or dropped since the last, or the socket was replaced."""
        self.path = path
        self.on_event = on_event
        self.on_notice = on_notice
        self.max_connections = max_connections
        self.max_buffered = max_buffered
        self.silent_s = silent_s
        self.dropped: dict[str, int] = {}
        self.accepted = 0
        self.connections = 0
        #: accept() failures for want of file descriptors (each followed by a pause)
        self.accept_errors = 0
        self.buffered = 0
        self._open: set = set()
        #: connections that have sent no event yet, oldest first: connection -> when accepted
        self._silent: dict = {}
        self._paused_until: float | None = None
        self._backoff = 0.0
        self._said: dict[str, int] = {}
        self._next_notice = 0.0
        self._next_look = 0.0
        self._replaced = False
        self._stop = threading.Event()
        self._sel = selectors.DefaultSelector()
        prepare_socket_path(path, origin=origin)
        self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket file is born 0600
        try:
            self._srv.bind(path)
        except OSError as exc:
            self._srv.close()
            raise ListenerError(f"{origin or '--socket'}: cannot listen on {path} ({exc.strerror or exc})") from None
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        st = os.lstat(path)
        #: the socket file this listener made: only it is removed at the end
        self._made = (st.st_dev, st.st_ino)
        self._srv.listen(64)
        self._srv.setblocking(False)
        self._sel.register(self._srv, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._loop, name="tracetui-listener", daemon=True)

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    def start(self) -> "SocketListener":
        self._thread.start()
        return self

    def _drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            timeout = 0.2
            if self._paused_until is not None:
                left = self._paused_until - time.monotonic()
                if left <= 0:
                    self._paused_until = None
                    self._sel.register(self._srv, selectors.EVENT_READ, None)
                else:
                    timeout = min(timeout, left)
            try:
                ready = self._sel.select(timeout=timeout)
            except Exception:  # noqa: BLE001 - the loop must live; do not spin either
                self._stop.wait(0.1)
                continue
            try:
                self._close_silent(time.monotonic() - self.silent_s)
                self._say_news()
            except Exception:  # noqa: BLE001 - the loop must live
                pass
            for key, _mask in ready:
                try:
                    if key.data is None:
                        self._accept()
                    else:
                        self._read(key.fileobj, key.data)
                except Exception:  # noqa: BLE001 - one connection's trouble is its own
                    self._drop("connection error")
                    if key.data is not None:
                        self._close_conn(key.fileobj, key.data)
        for key in list(self._sel.get_map().values()):
            key.fileobj.close()
        self._sel.close()

    def _accept(self) -> None:
        try:
            conn, _ = self._srv.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                # The waiting connection stays in the backlog and would wake select() at once:
                # stop listening for a while instead of spinning.
                self.accept_errors += 1
                self._backoff = min(1.0, max(0.05, self._backoff * 2))
                self._paused_until = time.monotonic() + self._backoff
                self._sel.unregister(self._srv)
            return
        self._backoff = 0.0
        uid = peer_uid(conn)
        if uid is not None and uid != os.geteuid():
            conn.close()
            self._drop("connection from another user")
            return
        if len(self._open) >= self.max_connections and self._silent:
            # the oldest connection that has sent no event makes room: silent ones never lock a client out
            oldest = next(iter(self._silent))
            self._close_conn(oldest, self._sel.get_key(oldest).data)
            self._drop(SILENT)
        if len(self._open) >= self.max_connections:
            conn.close()
            self._drop("connection over the limit")
            return
        conn.setblocking(False)
        try:
            conn.send(HELLO)
        except OSError:
            pass  # a client that sent its lines and left: they are still there to read
        self.connections += 1
        state = {"buf": bytearray(), "skipping": False}
        self._open.add(conn)
        self._silent[conn] = time.monotonic()
        self._sel.register(conn, selectors.EVENT_READ, state)

    def _close_silent(self, before: float) -> None:
        """Close the connections accepted before ``before`` (monotonic) that have sent no event."""
        while self._silent:
            conn, since = next(iter(self._silent.items()))
            if since > before:
                return
            self._close_conn(conn, self._sel.get_key(conn).data)
            self._drop(SILENT)

    def _say_news(self) -> None:
        """The live line (:attr:`on_notice`): what was refused or dropped since the last one, at
        most every :data:`NOTICE_EVERY_S`; and once, that the socket file is not this listener's
        any more (removed, or replaced by someone else's)."""
        now = time.monotonic()
        if self.on_notice is None:
            return
        if now >= self._next_look and not self._replaced:
            self._next_look = now + 2.0
            try:
                st = os.lstat(self.path)
                gone = (st.st_dev, st.st_ino) != self._made
            except OSError:
                gone = True
            if gone:
                self._replaced = True
                self.on_notice(f"the socket {self.path} was removed or replaced by someone else: no script can "
                               "reach this watch any more (restart it, on a path in a folder only you can write)")
        if now < self._next_notice or self.dropped == self._said:
            return
        new = {r: n - self._said.get(r, 0) for r, n in self.dropped.items() if n > self._said.get(r, 0)}
        self._said = dict(self.dropped)
        self._next_notice = now + NOTICE_EVERY_S
        listed = ", ".join(f"{n} {r}" for r, n in sorted(new.items()))
        self.on_notice(f"the socket {self.path} dropped {listed} (a connection that sends no event is closed "
                       f"after {self.silent_s:g} s, or at once for a newer one when {self.max_connections} are open)")

    def _close_conn(self, conn: socket.socket, state: dict) -> None:
        self.buffered -= len(state["buf"])
        state["buf"].clear()
        self._open.discard(conn)
        self._silent.pop(conn, None)
        try:
            self._sel.unregister(conn)
        except (KeyError, ValueError):
            pass
        conn.close()

    def _read(self, conn: socket.socket, state: dict) -> None:
        try:
            data = conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        buf = state["buf"]
        if not data:
            if buf and not state["skipping"]:
                self._drop("unterminated line")
            self._close_conn(conn, state)
            return
        before = len(buf)
        events = self.accepted
        buf.extend(data)
        try:
            while True:
                nl = buf.find(b"\n")
                if nl < 0:
                    if len(buf) > _MAX_PENDING or self.buffered - before + len(buf) > self.max_buffered:
                        if not state["skipping"]:
                            self._drop("oversized line" if len(buf) > _MAX_PENDING else "listener buffer full")
                        state["skipping"] = True
                        buf.clear()
                    return
                line = bytes(buf[:nl])
                del buf[: nl + 1]
                if state["skipping"]:  # the tail of an oversized line
                    state["skipping"] = False
                    continue
                self._handle(line)
        finally:
            self.buffered += len(buf) - before
            if self.accepted > events:
                self._silent.pop(conn, None)  # a client: it sent an event

    def _handle(self, line: bytes) -> None:
        if len(line) > MAX_LINE:
            self._drop("oversized line")
            return
        if not line.strip():
            return
        event, why = parse_line(line)
        if event is None:
            self._drop("invalid JSON" if why == "not JSON" else why if why == OUT_OF_BOUNDS else "schema mismatch")
            return
        try:
            self.on_event(event)
        except Exception:  # noqa: BLE001 - a receiver that chokes on one event costs that event only
            self._drop("event not handled")
            return
        self.accepted += 1

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        try:
            self._srv.close()
        finally:
            try:
                st = os.lstat(self.path)
                if (st.st_dev, st.st_ino) == self._made:  # never a socket someone put in its place
                    os.unlink(self.path)
            except OSError:
                pass

    def describe_drops(self) -> str:
        if not self.dropped:
            return ""
        return "dropped " + ", ".join(f"{n} {r}" for r, n in sorted(self.dropped.items()))
