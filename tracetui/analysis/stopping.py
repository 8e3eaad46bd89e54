"""The stopping rule of ``--until-confident``: when a split's measurements are enough, either
precise (its median known to within a percentage) or settled (clearly apart from the splits
measured before it). It runs inside the training process after every step (the probe applies
:class:`StopRule`), so it is cheap: order statistics, no resampling."""

from __future__ import annotations

from .pairing import StepKey, paired_log_ratios
from .stats import enough_for_interval, median, order_stat_ci


def confident(walls: list[float], pct: float) -> bool:
    """True once the median's 95% interval half-width is under ``pct`` % of the median."""
    if not enough_for_interval(len(walls)):
        return False
    lo, hi = order_stat_ci(walls)
    return (hi - lo) / 2 <= pct / 100.0 * median(walls)


#: z of the intervals the stopping rule compares: 97.5% rather than the verdict's 95%, to pay
#: for looking after every step (each look is another chance to tell two samples of one
#: distribution apart by luck; benchmarks/replay_until_confident.py replays recorded sweeps)
SETTLE_Z = 2.24


def settle_interval(walls: list[float]) -> tuple[float, float]:
    """The interval a finished (or running) split is compared by in :func:`settled`."""
    return order_stat_ci(walls, SETTLE_Z)


def settled(walls: list[float], references: list[tuple], steps: list[StepKey] | None = None) -> bool:
    """True once this split is clearly apart from every reference (other splits of the same
    effective batch, measured earlier in the sweep): more steps cannot change where it ranks.

    A reference is ``(lo, hi)``, the other split's interval (:func:`settle_interval`), or
    ``(lo, hi, its steps)``: where this split's ``steps`` pair with those
    (:func:`paired_log_ratios`), the interval of the median step-by-step log ratio must exclude 0;
    otherwise the two median intervals must be apart."""
    if not references:
        return False
    mine = None
    for ref in references:
        if steps and len(ref) > 2 and ref[2]:
            d, _why = paired_log_ratios(ref[2], steps)
            if d and enough_for_interval(len(d), SETTLE_Z):
                lo, hi = order_stat_ci(sorted(d), SETTLE_Z)
                if lo <= 0 <= hi:
                    return False
                continue
        if mine is None:
            if not enough_for_interval(len(walls), SETTLE_Z):
                return False
            mine = settle_interval(walls)
        if not (mine[1] < ref[0] or mine[0] > ref[1]):
            return False
    return True


def stop_reason(walls: list[float], pct: float, least: int, references: list[tuple],
                steps: list[StepKey] | None = None) -> str | None:
    """Whether a split's measurements meet ``--until-confident`` now (None: not yet).

    ``precise``: its median is known to within ``pct``%; ``settled``: it is clearly apart from
    every earlier split (step by step where their steps pair, :func:`settled`), so its rank is
    known."""
    if len(walls) < least:
        return None
    walls = sorted(walls)  # once: the sorts below then take linear time (on the training path)
    if confident(walls, pct):
        return "precise"
    if settled(walls, references, steps):
        return "settled"
    return None


class StopRule:
    """``--until-confident`` as the probe applies it after every step: stop once
    :func:`stop_reason` has held at ``streak`` consecutive steps. An order-statistic interval
    jumps as single steps arrive (its ends are single steps, which move by one rank with each new
    step); holding for a few steps keeps a lucky moment from ending the measurement.

    The probe hands it its measured steps (:data:`StepKey`) beside their walls, for the paired
    comparison with references that carry theirs."""

    #: the probe passes the measured steps too
    takes_steps = True

    def __init__(self, pct: float, least: int, references: list[tuple], streak: int = 3):
        self.pct, self.least, self.references, self.streak = pct, least, list(references), streak
        self._held: list[str] = []
        self._seen = 0

    def __call__(self, walls: list[float], steps: list[StepKey] | None = None) -> str | None:
        if len(walls) != self._seen:  # judged once per newly measured step
            self._seen = len(walls)
            why = stop_reason(walls, self.pct, self.least, self.references, steps)
            self._held = self._held + [why] if why else []
        if len(self._held) >= self.streak:
            return self._held[-1]
        return None
