"""How long a sweep will take: :meth:`tracetui.planning.plan.Planner.estimate`, ``--dry-run``'s
last line, and what the start line and the monitor may show as runs finish.

Each run left is ``seconds to start + optimizer steps x seconds a step``. Before any run has
finished both are rough priors (:data:`ROUGH_TOKENS_PER_S`, :data:`ROUGH_START_S`), said to be
rough. Once runs have finished, their own measurements replace them: a split measured already
takes its own median step; one not yet run, the median time per row of those measured times its
rows; the time to start is the median of each finished run's seconds from its start to its end
less its steps. A search's runs left are its guess (:mod:`tracetui.planning.ahead`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Protocol

from ..core.columns import fmt_duration
from ..core.trial import Trial


class TrialResult(Protocol):
    """What the estimate reads of a finished run (:class:`tracetui.planning.plan.TrialResult`)."""

    spec: object
    walls_ms: list[float]
    seconds: float | None

    @property
    def trial(self) -> Trial: ...

#: a rough prior of tokens trained per second (an optimizer step's rows x tokens per row) and of
#: seconds from a run's start to its first step, per device: not measured on this machine, and
#: off by several times for a model far from the built-in preset (CPU) or a mid-size LoRA (GPU);
#: the first finished run's measurements replace them
ROUGH_TOKENS_PER_S = {"cpu": 5_000.0, "cuda": 20_000.0}
ROUGH_START_S = {"cpu": 5.0, "cuda": 30.0}


@dataclass(frozen=True)
class Pace:
    """What a sweep's runs are, for the estimate: optimizer steps per run (None: a script's own),
    tokens per row and the device."""

    steps: int | None
    seq_len: int
    device: str

    def rough_step_s(self, trial: Trial) -> float:
        kind = "cpu" if self.device == "cpu" else "cuda"
        return trial.effective_batch * self.seq_len / ROUGH_TOKENS_PER_S[kind]

    def rough_start_s(self) -> float:
        return ROUGH_START_S["cpu" if self.device == "cpu" else "cuda"]

    def rough_said(self) -> str:
        kind = "cpu" if self.device == "cpu" else "cuda"
        return (f"rough: a prior of {ROUGH_TOKENS_PER_S[kind]:,.0f} tokens/s and {ROUGH_START_S[kind]:.0f} s to start "
                f"each run on the {kind.upper() if kind == 'cpu' else 'GPU'}, not measured here; runs that finish "
                "replace it")


@dataclass(frozen=True)
class Estimate:
    """Seconds the runs left will take (None: no basis yet), and how that was derived."""

    seconds: float | None
    how: str
    runs: int = 0

    def line(self) -> str:
        if self.seconds is None:
            return f"estimate: {self.how}"
        return f"estimate: about {fmt_duration(self.seconds)} for {self.runs} run(s) left ({self.how})"


#: a run left: its trial and its optimizer steps where not the sweep's (a memory probe's)
Pending = tuple[Trial, "int | None"]


def _steps_of(result: TrialResult, pace: Pace | None) -> int | None:
    return getattr(result.spec, "steps", None) or (pace.steps if pace is not None else None)


def _measured(result: TrialResult) -> bool:
    return result.seconds is not None and bool(result.walls_ms)


def estimate_left(pending: list[Pending], finished: list[TrialResult], pace: Pace | None, whose: str = "") -> Estimate:
    """How long ``pending`` will take, from ``finished``'s measurements, else from ``pace``'s
    rough priors; ``whose``: how the runs left were counted, said in the estimate."""
    count = f"; {whose}" if whose else ""
    done = [r for r in finished if _measured(r)]
    if not pending:
        return Estimate(0.0, "nothing left to run", 0)
    if done:
        return _from_measured(pending, done, pace, count)
    if pace is None or pace.steps is None:
        return Estimate(None, "none until a run finishes: a script's steps are its own", len(pending))
    seconds = sum(pace.rough_start_s() + (steps or pace.steps) * pace.rough_step_s(t) for t, steps in pending)
    return Estimate(seconds, pace.rough_said() + count, len(pending))


def _from_measured(pending: list[Pending], done: list[TrialResult], pace: Pace | None, count: str) -> Estimate:
    """:func:`estimate_left` once runs have finished: their step times, their starts."""
    own: dict[Trial, list[float]] = {}
    for r in done:
        own.setdefault(r.trial, []).extend(r.walls_ms)
    per_row = statistics.median(statistics.median(r.walls_ms) / r.trial.effective_batch for r in done) / 1000
    starts = [r.seconds - steps * statistics.median(r.walls_ms) / 1000
              for r in done if (steps := _steps_of(r, pace)) is not None]
    start = max(0.0, statistics.median(starts)) if starts else None
    whole = statistics.median(r.seconds for r in done)
    seconds = 0.0
    for t, steps in pending:
        step_s = statistics.median(own[t]) / 1000 if t in own else per_row * t.effective_batch
        steps = steps or (pace.steps if pace is not None else None)
        seconds += whole if steps is None or start is None else start + steps * step_s
    how = (f"from {len(done)} finished run(s): their step times (per row for splits not yet run), "
           + (f"{start:.0f} s to start a run" if start is not None else f"{whole:.0f} s a run (a script's own steps)"))
    return Estimate(seconds, how + count, len(pending))
