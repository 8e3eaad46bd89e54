"""What the analysis keeps in memory of an endless stream of events, bounded whatever arrives.

A watcher or a sweep can run for days, and a client can send a million valid events: every one
goes to the event log on disk as it arrives, but :class:`tracetui.analysis.Results` cannot hold
them all (about 2 KB of Python objects per step: 314 MB after 196 000 events, unbounded). It
holds them in :class:`EvenSample` lists under a memory budget (:data:`MEMORY_BUDGET`): past it,
the run holding the most is thinned to every other step (and from then on keeps every second
one, every fourth after the next thinning, ...), so each run keeps an even sample of its whole
length, the latest step always among them; the statistics (medians, intervals) are taken over
that sample, and the counts say how many steps there were. A run's other events (its start, its
settings, its notices) count against the same budget: once it is spent on them, runs that start
later are left out of the summary (counted). ``tracetui show`` of the event log gives every step
(it reads with no budget).
"""

from __future__ import annotations

from typing import Any

#: what :class:`~tracetui.analysis.Results` holds of a stream's events, in (estimated) bytes
#: of Python objects: 96 MiB, about 45 000 ordinary steps; ``tracetui watch`` stays near
#: 150 MB whatever arrives (benchmarks/watch_flood.py)
MEMORY_BUDGET = 96 << 20
#: notices a run keeps (its first half and its latest), each cut to :data:`NOTICE_CHARS`
MAX_NOTICES = 16
NOTICE_CHARS = 1000
#: sweeps whose own times a Results keeps, and marks per sweep
MAX_SWEEPS = 256
MAX_MARKS = 64

_CONTAINERS = (dict, list, str)


def approx_bytes(value: Any) -> int:
    """About how many bytes ``value`` (a decoded JSON value) takes as Python objects: a
    step event about 2 KB. Arithmetic only (a few microseconds a step), never under the truth
    by much: dict slots and keys 72 B, numbers 24 B, strings 49 B plus their length."""
    cls = value.__class__
    if cls is dict:
        return 240 + sum([72 + (approx_bytes(v) if v.__class__ in _CONTAINERS else 24) for v in value.values()])
    if cls is list:
        return 56 + sum([8 + (approx_bytes(v) if v.__class__ in _CONTAINERS else 24) for v in value])
    if cls is str:
        return 49 + len(value)
    return 24


class EvenSample(list):
    """A list that keeps an even sample of what is appended to it once :meth:`thin` is called:
    every ``stride``-th item, and always the latest (held until the next arrives). ``seen``:
    how many were appended; ``size``: the estimated bytes of what it holds. Read as a list."""

    __slots__ = ("stride", "seen", "size", "_transient")

    def __init__(self, items: Any = ()) -> None:
        super().__init__()
        self.stride, self.seen, self.size, self._transient = 1, 0, 0, False
        for item in items:
            self.append(item)

    def append(self, item: Any) -> int:  # type: ignore[override]
        """Keep ``item``; return the change in :attr:`size`."""
        self.seen += 1
        cost = approx_bytes(item)
        if self._transient:  # the latest so far was kept only as the latest
            cost -= approx_bytes(self[-1])
            self[-1] = item
        else:
            super().append(item)
        self.size += cost
        self._transient = self.stride > 1 and self.seen % self.stride != 0
        return cost

    def thin(self) -> int:
        """Keep every other item (the first and the latest among them) and every second one
        from now on; return the bytes freed."""
        if len(self) < 4:
            return 0
        latest = self.pop()  # kept whatever its place: the latest step says how far a run is
        del self[1::2]
        super().append(latest)
        self.stride *= 2
        before, self.size = self.size, sum(approx_bytes(x) for x in self)
        return before - self.size

    def __reduce__(self):  # pickled as the plain list it reads as
        return list, (list(self),)
