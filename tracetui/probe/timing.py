"""Phase-edge clocks: CUDA events on a GPU, ``perf_counter`` on the CPU.

A mark is taken at every phase edge. On CUDA the mark records an event on the current stream
and is resolved later with ``query()``, so timing never makes the host wait for the device:
no ``synchronize()`` on the training path.
"""

from __future__ import annotations

import time
from typing import Any


class Mark:
    __slots__ = ("label", "host", "event")

    def __init__(self, label: str, host: float, event: Any = None):
        self.label = label
        self.host = host
        self.event = event


class HostClock:
    """Host wall clock: used on the CPU, where the work is done by the time the call returns."""

    cuda = False

    def mark(self, label: str) -> Mark:
        return Mark(label, time.perf_counter())

    def ready(self, mark: Mark) -> bool:
        return True

    def elapsed_ms(self, a: Mark, b: Mark) -> float:
        return (b.host - a.host) * 1000.0

    def release(self, marks: list[Mark]) -> None:
        pass

    def wait(self, mark: Mark) -> None:
        pass


class CudaClock:
    """CUDA events recorded on the current stream at each edge and read once they complete.

    Events are pooled: creating one per edge would cost a driver call each time.
    """

    cuda = True

    def __init__(self) -> None:
        import torch

        self._torch = torch
        self._pool: list[Any] = []

    def mark(self, label: str) -> Mark:
        event = self._pool.pop() if self._pool else self._torch.cuda.Event(enable_timing=True)
        event.record()
        return Mark(label, time.perf_counter(), event)

    def ready(self, mark: Mark) -> bool:
        return bool(mark.event.query())

    def elapsed_ms(self, a: Mark, b: Mark) -> float:
        return float(a.event.elapsed_time(b.event))

    def release(self, marks: list[Mark]) -> None:
        for m in marks:
            if m.event is not None:
                self._pool.append(m.event)
                m.event = None

    def wait(self, mark: Mark) -> None:
        """Block until ``mark`` has completed. Only for the end of training, never inside it."""
        mark.event.synchronize()


def make_clock(cuda: bool):
    return CudaClock() if cuda else HostClock()
