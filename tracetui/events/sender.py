"""The sending end of the wire (:mod:`.wire`): :class:`SocketSink` sends a process's events
(``TraceCallback``'s, a sweep trial's) to a listener; when nothing listens, or the listener goes
away, it keeps every event of the run in a JSONL file instead (path printed once). It never
blocks the caller: events go to an in-process buffer that a sender thread empties."""

from __future__ import annotations

import array
import collections
import os
import socket
import sys
import threading
import time
from pathlib import Path

from ..core import envvars
from ..core.text import clean
from .schema import dumps
from .sockpath import default_socket_dir, peer_uid, unsafe_folder
from .wire import DRAIN_TIMEOUT_S, HELLO, HELLO_TIMEOUT_S, SEND_TIMEOUT_S


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
