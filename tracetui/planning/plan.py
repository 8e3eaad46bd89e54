"""What runs next: planners.

A sweep asks its planner for the next run (:meth:`Planner.next`) and tells it how each run
ended (:meth:`Planner.record`, a typed :class:`TrialResult`: status, step times, peak memory).
The grid planner runs a fixed list (every trial, ``--repeats`` times, interleaved); a search
planner (:mod:`tracetui.planning.search`) decides as it goes. ``--until-confident`` is a stopping policy
inside each run (:class:`tracetui.analysis.StopRule`), fed with what the planner's earlier runs
measured (:meth:`Measured.references`).

``--dry-run`` and the monitor's planned list ask :meth:`Planner.preview`, which is None when the
planner cannot know ahead ("decided as it goes").
"""

from __future__ import annotations

import abc
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from ..analysis import SETTLE_Z, enough_for_interval, settle_interval
from ..events.schema import RUN_STAGE, STEP
from ..core.knobs import SHORT
from ..core.text import clean
from ..core.trial import Trial
from .estimate import Estimate, Pace, Pending, estimate_left


@dataclass
class RunSpec:
    """One run the planner asked for."""

    run_id: str
    trial: Trial
    repeat: int
    gpu: int | None = None
    #: why the planner chose it (shown live)
    why: str = ""
    #: optimizer steps, where the planner needs fewer than the sweep's (memory probes)
    steps: int | None = None

    @property
    def label(self) -> str:
        return self.trial.label(SHORT)


@dataclass
class TrialResult:
    """How one run ended, as a planner sees it."""

    spec: RunSpec
    status: str
    walls_ms: list[float] = field(default_factory=list)
    peak_mem_gib: float | None = None
    message: str = ""
    #: the measured steps as pairing reads them (:data:`tracetui.analysis.StepKey`), beside ``walls_ms``
    steps: list[tuple] = field(default_factory=list)
    #: seconds from the run's start to its end, where known (the estimate's measure of a run)
    seconds: float | None = None

    @property
    def trial(self) -> Trial:
        return self.spec.trial

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.walls_ms) if self.walls_ms else None


@dataclass
class Decision:
    """The planner's answer: run ``trial`` (repeat ``repeat``) because ``why``; or ``skip`` it
    (never started) with ``kind`` (``skipped``, ``unavailable``) and ``why``."""

    trial: Trial
    repeat: int = 0
    why: str = ""
    skip: str | None = None
    #: fewer optimizer steps than the sweep's, where the planner needs only those
    steps: int | None = None


#: a planner's answer when it must see a running trial end before it can decide
WAIT = "wait"


class Planner(abc.ABC):
    """One interface for deciding what runs next. Subclasses: :class:`GridPlanner`, and the
    search of :mod:`tracetui.planning.search`."""

    name = "planner"

    def preview(self) -> list[Decision] | None:
        """Every run, in order, when known ahead; None when decided as it goes."""
        return None

    @abc.abstractmethod
    def next(self) -> Decision | str | None:
        """The next run (or skip), :data:`WAIT` while runs in flight must end first, or None
        when the sweep is done."""

    def record(self, result: TrialResult) -> None:
        """How a run (or a skip) ended."""

    def notes(self) -> list[str]:
        """What the planner concluded, for the summary (one line each)."""
        return []

    #: what the sweep's runs are, for :meth:`estimate` (:func:`tracetui.planning.search.make_planner`
    #: sets it); None: the estimate waits for a finished run
    pace: Pace | None = None
    #: how :meth:`pending` counts the runs left, said in the estimate ("" where it knows them)
    pending_how = ""

    def pending(self, finished: list[TrialResult]) -> list[Pending]:
        """The runs left after ``finished`` (runs in flight included): here the preview's."""
        ended = Counter((r.trial, r.spec.repeat) for r in finished)
        out = []
        for d in self.preview() or []:
            if d.skip is not None:
                continue
            if ended[(d.trial, d.repeat)]:
                ended[(d.trial, d.repeat)] -= 1
                continue
            out.append((d.trial, d.steps))
        return out

    def estimate(self, finished: list[TrialResult] = ()) -> Estimate:
        """How long the runs left after ``finished`` will take, and how that was derived: from
        rough priors before any run finished, then from what the finished runs measured
        (:mod:`tracetui.planning.estimate`)."""
        finished = [r for r in finished if r.status != "skipped"]
        return estimate_left(self.pending(finished), finished, self.pace, self.pending_how)


def interleave(trials: list[Trial], repeats: int) -> list[tuple[Trial, int]]:
    """Order runs so no trial is favoured by position: A B C, then C B A, then A B C, ..."""
    order: list[tuple[Trial, int]] = []
    for r in range(repeats):
        seq = trials if r % 2 == 0 else list(reversed(trials))
        order.extend((t, r) for t in seq)
    return order


def grid_order(trials: list[Trial], repeats: int, until_confident: bool) -> list[tuple[Trial, int]]:
    """The order of a grid's runs. With ``--until-confident`` the trial with the fewest
    accumulation steps of each effective batch goes first: its steps are usually the cheapest,
    so it is the one measured to full precision, and each later trial may stop as soon as its
    interval is clear of the earlier ones (:func:`tracetui.analysis.stop_reason`)."""
    if until_confident:
        group = {eb: i for i, eb in enumerate(dict.fromkeys(t.effective_batch for t in trials))}
        trials = sorted(trials, key=lambda t: (group[t.effective_batch], t.grad_accum))
    return interleave(trials, repeats)


class GridPlanner(Planner):
    """Every trial, ``repeats`` times, in a fixed interleaved order."""

    name = "grid"

    def __init__(self, trials: list[Trial], repeats: int, until_confident: bool = False):
        self.order = [Decision(t, r, why=f"grid: run {i + 1} of {len(trials) * repeats}")
                      for i, (t, r) in enumerate(grid_order(trials, repeats, until_confident))]
        self._next = 0

    def preview(self) -> list[Decision]:
        return list(self.order)

    def next(self) -> Decision | None:
        if self._next >= len(self.order):
            return None
        self._next += 1
        return self.order[self._next - 1]


class Measured:
    """What each run of a sweep measured so far (rank 0), from its events: step walls per trial
    (for ``--until-confident``'s references), and per run the typed result a planner is told."""

    def __init__(self) -> None:
        self._spec: dict[str, RunSpec] = {}
        self._walls: dict[Trial, list[float]] = {}
        self._run_walls: dict[str, list[float]] = {}
        #: (step, fingerprint, wall ms) of each trial's measured steps, and of each run's
        self._steps: dict[Trial, list[tuple]] = {}
        self._run_steps: dict[str, list[tuple]] = {}
        self._peak: dict[str, float] = {}
        #: when each run was started (its spec added), for the seconds it took
        self._added: dict[str, float] = {}
        self.stages: dict[str, dict[str, float]] = {}

    def add(self, spec: RunSpec) -> None:
        self._spec[spec.run_id] = spec
        self._added[spec.run_id] = time.time()

    def observe(self, event: dict) -> None:
        rid = event.get("run_id")
        spec = self._spec.get(rid)
        if spec is None:
            return
        if event.get("type") == RUN_STAGE and event.get("rank", 0) == 0:
            self.stages.setdefault(rid, {})[event["stage"]] = float(event["elapsed_s"])
        if event.get("type") != STEP or event.get("rank") not in (0, None):
            return
        if event.get("peak_mem_gib") is not None:
            self._peak[rid] = max(self._peak.get(rid, 0.0), float(event["peak_mem_gib"]))
        if event.get("warmup") or event.get("wall_ms") is None:
            return
        self._walls.setdefault(spec.trial, []).append(float(event["wall_ms"]))
        self._run_walls.setdefault(rid, []).append(float(event["wall_ms"]))
        key = (int(event["step"]), event.get("fingerprint"), float(event["wall_ms"]))
        self._steps.setdefault(spec.trial, []).append(key)
        self._run_steps.setdefault(rid, []).append(key)

    def result(self, spec: RunSpec, status: str, message: str = "") -> TrialResult:
        added = self._added.get(spec.run_id)
        return TrialResult(spec, status, list(self._run_walls.get(spec.run_id, [])),
                           self._peak.get(spec.run_id), message, list(self._run_steps.get(spec.run_id, [])),
                           None if added is None else time.time() - added)

    def references(self, trial: Trial, least: int) -> list[tuple]:
        """Intervals of the other trials of ``trial``'s effective batch with ``least`` steps; each
        with those steps too where they carry row fingerprints (the stopping rule then compares
        step by step: :func:`tracetui.analysis.settled`)."""
        out = []
        for t, w in self._walls.items():
            if t != trial and t.effective_batch == trial.effective_batch and len(w) >= least \
                    and enough_for_interval(len(w), SETTLE_Z):
                steps = self._steps.get(t, [])
                paired = steps and all(fp for _, fp, _ in steps)
                out.append((*settle_interval(w), [list(k) for k in steps]) if paired else settle_interval(w))
        return out


def dry_run_lines(planner: Planner, cfg, what: Callable[[Decision], str] | None = None) -> list[str]:
    """The plan as ``--dry-run`` prints it: one line per run, or how the planner decides.
    ``what``: the end of a run's line (default: its steps and model; a script sweep's: its
    command)."""
    preview = planner.preview()
    # the estimate where the runs' steps are the sweep's (a script's are its own: no prior)
    estimate = [planner.estimate().line()] if planner.pace is not None and planner.pace.steps is not None else []
    if preview is None:
        return [clean(line) for line in [f"{planner.name}: runs are decided as it goes"] + planner.notes() + estimate]
    if what is None:
        steps = f"{'at most ' if cfg.until_confident is not None else ''}{cfg.steps} steps"
        what = lambda _d: f", {steps}, {cfg.model}"  # noqa: E731
    # (they quote the model, the varied values and the script's command: one printable line each)
    return [clean(f"run {n}: {d.trial.label(SHORT)} (effective batch {d.trial.effective_batch}"
            + (f", repeat {d.repeat + 1}" if cfg.repeats > 1 else "") + ")" + what(d))
            for n, d in enumerate(preview, 1)] + estimate

