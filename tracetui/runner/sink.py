"""A non-blocking event sink for the worker process.

Training threads hand events to :meth:`QueueSink.emit`, which only appends to an in-process
buffer; a sender thread moves them onto the bounded multiprocessing queue, waiting there if the
parent is slow. So a full queue slows the sender, never training. If the buffer itself grows past
``cap`` (the parent stopped reading), GPU samples are dropped first and counted.
"""

from __future__ import annotations

import collections
import queue as queue_mod
import threading
from typing import Any

from ..events.schema import NOTICE, make

_STOP = object()


class QueueSink:
    def __init__(self, mp_queue: Any, cap: int = 200_000):
        self._q = mp_queue
        self._buf: collections.deque = collections.deque()
        self._cv = threading.Condition()
        self._cap = cap
        self.dropped = 0
        self._thread = threading.Thread(target=self._send_loop, name="tracetui-sink", daemon=True)
        self._thread.start()

    def emit(self, event: dict) -> None:
        with self._cv:
            if len(self._buf) >= self._cap and event.get("type") == "gpu":
                self.dropped += 1
                return
            self._buf.append(event)
            self._cv.notify()

    def _send_loop(self) -> None:
        while True:
            with self._cv:
                while not self._buf:
                    self._cv.wait()
                item = self._buf.popleft()
            if item is _STOP:
                return
            while True:
                try:
                    self._q.put(item, timeout=0.5)
                    break
                except queue_mod.Full:
                    continue

    def close(self, timeout: float = 10.0, run_id: str = "") -> None:
        """Send what is buffered, then stop the sender (waits at most ``timeout`` s). GPU samples
        dropped while the queue was full are reported in a notice, so a gap in the GPU chart
        has its reason."""
        with self._cv:
            if self.dropped and run_id:
                self._buf.append(make(NOTICE, run_id, level="warning",
                                      message=f"{self.dropped} GPU samples dropped: the event queue was full"))
            self._buf.append(_STOP)
            self._cv.notify()
        self._thread.join(timeout)
