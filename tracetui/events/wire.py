"""The wire between a training process and tracetui: newline-delimited JSON events over a local
UNIX socket; its listening end.

:class:`~tracetui.events.sender.SocketSink` sends a process's events (``TraceCallback``'s, a
sweep trial's), or keeps them in a JSONL file when nothing listens. :class:`SocketListener` (used by ``watch``, ``sweep -- script`` and
``run``) drops, and counts, lines over :data:`MAX_LINE`, invalid JSON and schema violations. Both
ends check who is at the other: the same user, in a private folder (:mod:`.sockpath`: where a
socket goes, and the checks of its folder).
"""

from __future__ import annotations

import errno
import contextlib
import os
import selectors
import socket
import threading
import time
from typing import Callable

from .schema import OUT_OF_BOUNDS, parse_line
from .sockpath import SOCKET_PATH_MAX, ListenerError, peer_uid, prepare_socket_path

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
        # bound and listening under a name beside it, then renamed into place: a client that
        # sees the socket file never finds it refusing connections (bound, not yet listening)
        early = f"{path}~" if len(os.fsencode(path)) < SOCKET_PATH_MAX else path  # (no room: bound in place)
        old = os.umask(0o177)  # the socket file is born 0600
        try:
            if early != path:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(early)  # (left by a listener killed between its bind and its rename)
            self._srv.bind(early)
            os.chmod(early, 0o600)
            self._srv.listen(64)
            if early != path:
                os.rename(early, path)
        except OSError as exc:
            self._srv.close()
            raise ListenerError(f"{origin or '--socket'}: cannot listen on {path} ({exc.strerror or exc})") from None
        finally:
            os.umask(old)
        st = os.lstat(path)
        #: the socket file this listener made: only it is removed at the end
        self._made = (st.st_dev, st.st_ino)
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

    def _fault(self, where: str, exc: BaseException) -> None:
        """A failure of the listener's own loop (not of one connection): counted by where and
        what it was, so that the live line and the end say it; the loop goes on."""
        self._drop(f"listener error in {where} ({type(exc).__name__})")

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
            except Exception as exc:  # noqa: BLE001 - counted in dropped, so said (on_notice, describe_drops); the loop must live, and not spin
                self._fault("waiting for connections", exc)
                self._stop.wait(0.1)
                continue
            try:
                self._close_silent(time.monotonic() - self.silent_s)
                self._say_news()
            except Exception as exc:  # noqa: BLE001 - counted in dropped, so said (on_notice, describe_drops); the loop must live
                self._fault("its checks of silent connections and the socket", exc)
            for key, _mask in ready:
                try:
                    if key.data is None:
                        self._accept()
                    else:
                        self._read(key.fileobj, key.data)
                except Exception as exc:  # noqa: BLE001 - counted in dropped, so said (on_notice, describe_drops); one connection's trouble is its own
                    self._drop(f"connection error ({type(exc).__name__})")
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
        except Exception:  # noqa: BLE001 - counted in dropped, so said (on_notice, describe_drops); a receiver that chokes on one event costs that event only
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
