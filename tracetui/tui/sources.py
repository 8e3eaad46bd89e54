"""Where the TUI's events come from: a sweep it runs, a saved log it replays, or scripts that
attach over a socket. Each source pushes events into a thread-safe inbox; the app drains it on
a timer, so no source ever waits on the screen."""

from __future__ import annotations

import abc
import collections
import threading
from typing import Callable

from ..core.config import ConfigError
from ..events.wire import SocketListener

#: events the inbox holds before it drops what arrives (the event log on disk has every one):
#: a flood faster than the screen drains cannot grow the monitor without bound
INBOX_LIMIT = 100_000


class Inbox:
    """Thread-safe event buffer between producers and the UI thread. ``notify`` (the app's
    "events arrived" message) is called once per batch: when the first event lands in an empty,
    already-drained inbox, not once per event. Past ``limit`` events waiting, what arrives is
    dropped and counted (``dropped``): the sources write every event to the log before this."""

    def __init__(self, notify: Callable[[], None] | None = None, limit: int = INBOX_LIMIT) -> None:
        self._q: collections.deque = collections.deque()
        self._pending = False
        self.notify = notify
        self.limit = limit
        self.dropped = 0

    def put(self, event: dict) -> None:
        if len(self._q) >= self.limit:
            self.dropped += 1
            return
        self._q.append(event)  # deque.append is atomic
        if not self._pending and self.notify is not None:
            self._pending = True
            self.notify()

    def drain(self, limit: int = 1_000_000) -> list[dict]:
        self._pending = False  # a put from now on announces itself again
        out = []
        q = self._q
        while q and len(out) < limit:
            out.append(q.popleft())
        return out


class Source(abc.ABC):
    live = False
    can_rerun = False
    #: attached scripts come and go: the header shows who is connected
    watching = False
    #: called (from the source's thread) when it has no more to deliver: the app's "sweep
    #: finished" message
    on_done: Callable[[], None] | None = None

    @abc.abstractmethod
    def start(self, inbox: Inbox) -> None:
        """Begin delivering events into ``inbox`` (without blocking the caller)."""

    def stop(self) -> None:
        pass

    def running(self) -> bool:
        return False

    def join(self, timeout: float | None = None) -> None:
        pass

    def describe(self) -> str:
        return ""

    def news(self) -> list[str]:
        """Lines the source has to say since it was last asked (the monitor's status line)."""
        return []


class ReplaySource(Source):
    """Saved events (``tracetui show``, snapshot tests): all delivered at start."""

    def __init__(self, events: list[dict], title: str = "replay"):
        self.events = events
        self.title = title

    def start(self, inbox: Inbox) -> None:
        for e in self.events:
            inbox.put(e)

    def describe(self) -> str:
        return self.title


class SweepSource(Source):
    """Runs a :class:`~tracetui.runner.sweep.Sweep` in a background thread.

    The sweep thread drains the workers' multiprocessing queue and writes the JSONL; this source
    only forwards what it wrote to the inbox."""

    live = True
    can_rerun = True

    def __init__(self, sweep) -> None:
        self.sweep = sweep
        self._thread: threading.Thread | None = None
        self._inbox: Inbox | None = None
        self._running = False

    def start(self, inbox: Inbox) -> None:
        self._inbox = inbox
        self.sweep.on_event = inbox.put
        self._launch(self.sweep.run)

    def _launch(self, target) -> None:
        def body():
            try:
                target()
            finally:
                # not running by the time it says it is done: the app's last redraw, on that
                # word, reads the sweep as ended (its thread is still alive as it says it)
                self._running = False
                if self.on_done is not None:
                    self.on_done()

        self._running = True
        self._thread = threading.Thread(target=body, name="tracetui-sweep", daemon=True)
        self._thread.start()

    def running(self) -> bool:
        return self._running

    def rerun(self, run_id: str) -> bool:
        """Run the trial of ``run_id`` once more (False while the sweep runs, or for an
        unknown run)."""
        trial = self.sweep.trial_of(run_id)
        if self.running() or trial is None:
            return False
        self._launch(lambda: self.sweep.rerun(trial))
        return True

    def stop(self) -> None:
        self.sweep.stop()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def describe(self) -> str:
        return str(self.sweep.log.path)


class PreparingSource(SweepSource):
    """A sweep that is built once the checks it needs (the model, the data, the device: seconds
    of library imports in the fork server) have passed, on this source's thread, so that the
    monitor opens at once and says what it waits for. ``build`` returns the sweep, or raises
    :class:`~tracetui.core.config.ConfigError` (``error`` then holds its line, and the source is done);
    ``on_ready(sweep)`` is called once it is built."""

    def __init__(self, build, on_ready=None) -> None:
        super().__init__(None)
        self.build = build
        self.on_ready = on_ready
        self.error: str | None = None
        self._stopped = False

    def start(self, inbox: Inbox) -> None:
        self._inbox = inbox

        def prepare() -> None:
            try:
                sweep = self.build()
            except ConfigError as exc:
                self.error = str(exc)
                return
            except Exception as exc:  # noqa: BLE001 - said as the monitor's one line, as a refusal is
                self.error = f"could not start the sweep: {type(exc).__name__}: {exc}"
                return
            sweep.on_event = inbox.put
            self.sweep = sweep
            if self.on_ready is not None:
                self.on_ready(sweep)
            if self._stopped:  # quit while the checks ran: nothing starts
                sweep.stop()
            sweep.run()

        self._launch(prepare)

    def rerun(self, run_id: str) -> bool:
        return self.sweep is not None and super().rerun(run_id)

    def stop(self) -> None:
        self._stopped = True
        if self.sweep is not None:
            self.sweep.stop()

    def describe(self) -> str:
        return str(self.sweep.log.path) if self.sweep is not None else "no events yet (the checks run)"


class WatchSource(Source):
    """Scripts attached through :class:`~tracetui.callbacks.attach.TraceCallback`, over a socket."""

    live = False
    watching = True

    def __init__(self, path: str, log, origin: str = "--socket") -> None:
        self.path = path
        self.log = log
        self.origin = origin
        self.listener = None
        self._news: collections.deque = collections.deque()

    def start(self, inbox: Inbox) -> None:
        def on_event(e: dict) -> None:
            self.log.append(e)
            inbox.put(e)

        self.listener = SocketListener(self.path, on_event, origin=self.origin, on_notice=self._news.append).start()

    def news(self) -> list[str]:
        out = []
        while self._news:
            out.append(self._news.popleft())
        return out

    def stop(self) -> None:
        if self.listener is not None:
            self.listener.close()

    def describe(self) -> str:
        drops = self.listener.describe_drops() if self.listener else ""
        return f"watching {self.path}" + (f" · {drops}" if drops else "")


class CommandSource(Source):
    """One unmodified command run with the probe attached (``tracetui run``,
    :class:`~tracetui.runner.command.CommandRun`): done when the command ends."""

    live = True

    def __init__(self, run) -> None:
        self.run = run

    def start(self, inbox: Inbox) -> None:
        self.run.start(inbox.put)

        def ended() -> None:
            self.run.wait()
            if self.on_done is not None:
                self.on_done()

        threading.Thread(target=ended, name="tracetui-run-end", daemon=True).start()

    def running(self) -> bool:
        return self.run.running()

    def stop(self) -> None:
        # SIGTERM, then SIGKILL after a grace: never on the screen's thread
        threading.Thread(target=self.run.stop, name="tracetui-run-stop", daemon=True).start()

    def join(self, timeout: float | None = None) -> None:
        self.run.wait(timeout)

    def describe(self) -> str:
        return str(self.run.log.path)
