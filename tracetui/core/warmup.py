"""Warm-up steps: a fixed count (``--warmup N``), or ``auto``: the warm-up ends once the steps settle.

``auto`` decides as each step ends (a step is flagged warm-up or measured as it is recorded):
step k is the run's first measured step when

- k > :data:`FLOOR` (at least one warm-up step: the first optimizer step, with its one-time costs
  -- the optimizer's state, the first kernels, a compilation -- is always warm-up);
- step k did not raise the peak memory above the steps before it (by more than
  :data:`PEAK_TOLERANCE`): the allocator's growth, paid once, is over;
- the last :data:`WINDOW` step times (step k among them) lie within :data:`TOLERANCE` of their
  median: the times have settled.

Otherwise step k is warm-up, and once :func:`ceiling` steps are warm-up the next is measured
anyway. The ceiling leaves at least :data:`LEAST_MEASURED` measured steps of ``--steps``, so two
splits' runs pair on that many steps (:func:`tracetui.analysis.pairing.paired_log_ratios`).
The constants come from replaying recorded runs (tests/test_warmup.py replays
docs/results/h200_*/ event logs: where the rule ends the warm-up, and that its medians match
the fixed three-step warm-up's).
"""

from __future__ import annotations

from typing import Any

AUTO = "auto"
#: the fewest warm-up steps: the first optimizer step always is one
FLOOR = 1
#: how many consecutive step times must agree (the step that ends the warm-up among them)
WINDOW = 2
#: how far (a share of their median) each of those times may be from the median
TOLERANCE = 0.10
#: how much a step's peak memory may exceed the earlier steps' before it counts as growth
PEAK_TOLERANCE = 0.01
#: the most warm-up steps ``auto`` takes, whatever the times do
MOST = 10
#: warm-up steps where no probe times the steps to decide (``--no-probe`` runs)
WITHOUT_PROBE = 3
#: the measured steps the ceiling leaves a run (the verdict's pairing needs this many in common)
LEAST_MEASURED = 6


def parse(value: Any) -> int | str:
    """A ``--warmup`` value: ``auto`` or a whole number (ValueError otherwise)."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(value)
    return int(value) if isinstance(value, (int, float)) else int(str(value).strip())


def ceiling(steps: int) -> int:
    """The most warm-up steps ``auto`` takes in a run of ``steps``: :data:`MOST`, fewer where the
    run would keep under :data:`LEAST_MEASURED` measured steps (never under :data:`FLOOR`)."""
    return max(FLOOR, min(MOST, steps - LEAST_MEASURED))


def most(warmup: int | str, steps: int) -> int:
    """The most warm-up steps a run of ``steps`` takes under ``warmup`` (a count, or ``auto``)."""
    return ceiling(steps) if warmup == AUTO else int(warmup)


def settled(walls: list[float], peaks: list[float | None]) -> str | None:
    """Why the last step (``walls[-1]``, step ``len(walls)``) is the first measured one, or None
    while the warm-up goes on (the rule above, less its ceiling)."""
    k = len(walls)
    if k <= FLOOR or k < WINDOW:
        return None
    peak, before = peaks[-1], [p for p in peaks[:-1] if p is not None]
    if peak is not None and before and peak > max(before) * (1 + PEAK_TOLERANCE):
        return None
    last = sorted(walls[-WINDOW:])
    mid = (last[(WINDOW - 1) // 2] + last[WINDOW // 2]) / 2
    if mid <= 0 or any(abs(w - mid) > TOLERANCE * mid for w in last):
        return None
    return (f"settled: steps {k - WINDOW + 1}-{k} within {TOLERANCE:.0%} of their median, "
            "peak memory no longer growing")


class Rule:
    """One run's warm-up, decided as each step ends (:meth:`step`). ``warmup``: a count or
    ``auto``; ``steps``: the run's planned steps (the ceiling's share)."""

    def __init__(self, warmup: int | str, steps: int | None = None):
        self.auto = warmup == AUTO
        self.limit = ceiling(steps or MOST + LEAST_MEASURED) if self.auto else int(warmup)
        self.walls: list[float] = []
        self.peaks: list[float | None] = []
        #: warm-up steps, once the warm-up has ended (None before)
        self.count: int | None = None if self.limit else 0
        #: why it ended where it did, in words
        self.why = "" if self.limit else "--warmup 0"

    def step(self, wall_ms: float, peak: float | None = None, hold: bool = False) -> bool:
        """Step ``len(walls) + 1`` has ended, taking ``wall_ms`` at peak ``peak``: whether it is a
        warm-up step. ``hold``: a step that settles stays warm-up, the last one (head starts: the
        run gives its turn back after its last warm-up step, which it must know as that step ends)."""
        self.walls.append(wall_ms)
        self.peaks.append(peak)
        k = len(self.walls)
        if self.count is not None:
            return False
        if not self.auto:
            if k >= self.limit:
                self.count, self.why = self.limit, f"--warmup {self.limit}"
            return True
        why = settled(self.walls, self.peaks)
        if why:
            self.count, self.why = (k, why) if hold else (k - 1, why)
            return hold
        if k >= self.limit:
            self.count, self.why = k, f"ceiling: {k} steps without settling"
        return True

    def ended_at(self, step: int) -> bool:
        """Whether ``step`` is the run's last warm-up step."""
        return self.count is not None and self.count == step and step > 0


def words(warmup: int | str) -> str:
    """``warmup`` said in a line: ``3 steps``, or ``until the step times settle``."""
    return "until the step times settle" if warmup == AUTO else f"{warmup} steps"


def shorter(warmup: int | str, steps: int) -> int | str:
    """``warmup`` for a run cut to ``steps`` (the planner's shorter runs): a count leaves one
    measured step at least; ``auto`` takes its ceiling from the run's own steps."""
    return warmup if warmup == AUTO else min(int(warmup), steps - 1)


def fixed(warmup: int | str) -> int:
    """The count where no probe times the steps to decide (``--no-probe`` runs, memory probes)."""
    return WITHOUT_PROBE if warmup == AUTO else int(warmup)


def fewest(warmup: int | str) -> int:
    """The fewest warm-up steps a run takes under head starts, where the step that settles stays
    warm-up (:meth:`Rule.step` with ``hold``)."""
    return max(WINDOW, FLOOR + 1) if warmup == AUTO else int(warmup)
