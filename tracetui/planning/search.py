"""``--search``: find the fastest split without running every split.

The seed's advice, made a planner (:class:`SearchPlanner`, on :mod:`tracetui.planning.plan`'s seam):

1. **Learn memory first, cheaply.** Peak memory at a fixed sequence length is close to affine in
   the micro-batch. Two *memory probes*, the two smallest micro-batches at one micro-batch per
   optimizer step (``1x1``, ``2x1``: a profile run, as DeepSpeed's autotuner makes, but through
   the same trainer), give ``peak(m) = a + b*m``; every later run adds a point and the line is
   refitted, and each run's prediction made before it started is kept beside what it measured.
   Probes are not candidates (their effective batch is not the one asked for): the summary leaves
   them out (:data:`tracetui.analysis.PROBE_WHY`), the run list shows them with why they ran.
   Without a memory bound (the CPU with no ``--memory-limit``) there is nothing to predict
   against and no probe runs.
2. **Start where the answer usually is.** Per effective batch, run the largest micro-batch
   predicted to fit the card (or ``--memory-limit``) with 10% headroom (the recommendation's).
3. **Walk to the neighbours** among the divisors: the next larger (if predicted to fit) and the
   next smaller, and go on in a direction only while each step there was clearly faster.
   "Clearly" is :mod:`tracetui.analysis`'s ``--until-confident`` notion: where the two splits'
   steps trained on the same rows (their fingerprints agree step by step), the 97.5% interval of
   the median step-by-step ratio clear of 1; else the 97.5% median intervals
   (:func:`~tracetui.analysis.settle_interval`) apart; with too few steps for an
   interval, a difference above :data:`RESOLUTION` (the spread of fresh processes on an H200).
   A smaller micro-batch is never faster per row than a larger one unless the larger thrashes,
   which is what the walk down checks; so once the best's neighbours are measured, no untried
   split can beat it by more than the measurement resolves.
4. **Share what was learned.** Effective batches with the same other settings share one memory
   line and the time per micro-batch measured at each micro-batch (probes included): a
   neighbour whose step, predicted as accumulation x time per micro-batch and made faster by the
   predictions' margin of error (:mod:`tracetui.planning.margin`: the largest error of the
   sweep's own checks, a prior from held-out checks until it has enough), is still slower than
   the best is skipped with that reason and the margin, never run.
5. **OOM bounds the search**: a run out of memory (status ``oom``, its prediction and the limit
   in its row) caps the micro-batch below it; the next start is the largest below the cap.

Every trial of the grid ends in the table: run, or ``skipped`` with the reason (``predicted N GiB >
limit M GiB``, ``above micro-batch 8, which ran out of memory``, ``slower than ...``).
With ``--until-confident`` a run stops early once its interval is clear of the runs before it
(:meth:`tracetui.planning.plan.Measured.references`): the first run is the likely best, so later ones stop
as soon as they are clearly slower.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ..analysis import (MEMORY_SHARE, PROBE_WHY, SETTLE_Z, enough_for_interval, order_stat_ci, paired_log_ratios,
                        predicted_text, settle_interval)
from ..core.columns import fmt_gib
from ..core.nvml import NvmlUnavailable, memory_bytes
from ..core.knobs import SHORT
from .ahead import SearchAhead
from .estimate import Pace
from .margin import StepErrors
from .plan import WAIT, Decision, GridPlanner, Planner, TrialResult
from ..probe.gpu import physical_index
from ..core.text import say
from ..core.trial import Trial
from ..core.warmup import fixed as fixed_warmup

#: share of the memory bound a predicted peak may take (the recommendation's headroom)
HEADROOM = MEMORY_SHARE
#: relative difference of two medians taken as real when there are too few steps for intervals:
#: fresh processes of one split differ by several percent from one another (the README's
#: repeatability figures), so a smaller difference is not taken as the split's
RESOLUTION = 0.10
#: runs above which the default planner is the search rather than the grid
HANDFUL = 6
#: measured steps of a memory probe (after the sweep's warm-up), on rows of one length: its
#: peak comes with the first optimizer step, and the median of three gives the time per
#: micro-batch the skips use (:func:`probe_length`)
PROBE_MEASURED = 3


@dataclass
class MemoryModel:
    """Peak memory as ``a + b * micro_batch`` (GiB), least squares over every measured point."""

    points: dict[int, float] = field(default_factory=dict)

    def add(self, micro_batch: int, peak: float) -> None:
        self.points[micro_batch] = max(peak, self.points.get(micro_batch, 0.0))

    @property
    def ready(self) -> bool:
        return len(self.points) >= 2

    def line(self) -> tuple[float, float] | None:
        if not self.ready:
            return None
        xs, ys = list(self.points), list(self.points.values())
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        b = max(0.0, sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx)
        return my - b * mx, b

    def predict(self, micro_batch: int) -> float | None:
        line = self.line()
        return None if line is None else line[0] + line[1] * micro_batch


@dataclass
class Family:
    """Trials that share memory and speed per micro-batch: same world size and other settings."""

    world_size: int
    settings: tuple
    memory: MemoryModel = field(default_factory=MemoryModel)
    #: micro-batch -> time per micro-batch (ms) of each ok run: step median / accumulation
    per_micro: dict[int, list[tuple[float, str]]] = field(default_factory=dict)
    #: smallest micro-batch that ran out of memory
    oom_at: int | None = None
    probes: list[Trial] = field(default_factory=list)
    probed: set = field(default_factory=set)


def fam_key(fam: Family) -> tuple:
    return (fam.world_size, fam.settings)


class SearchPlanner(SearchAhead, Planner):
    """Decides as it goes (see the module's docstring)."""

    name = "search"

    def __init__(self, trials: list[Trial], repeats: int = 1, limit_gib: float | None = None,
                 limit_what: str = "", headroom: float = HEADROOM, run_unfit: bool = False,
                 probe_steps: int | None = None):
        """``run_unfit`` (``--run-unfit``): trials predicted not to fit are run too, not skipped;
        only an out-of-memory bounds the search. ``probe_steps``: a memory probe's optimizer
        steps (default: as many as every run)."""
        self.run_unfit = run_unfit
        self.probe_steps = probe_steps
        self.trials = list(trials)
        self.repeats = max(1, repeats)
        self.limit, self.limit_what, self.headroom = limit_gib, limit_what, headroom
        self.families: dict[tuple, Family] = {}
        #: (family key, effective batch) -> candidate trials, smallest micro-batch first
        self.groups: dict[tuple, list[Trial]] = {}
        for t in self.trials:
            fk = (t.world_size, t.settings)
            self.families.setdefault(fk, Family(t.world_size, t.settings))
            self.groups.setdefault((fk, t.effective_batch), []).append(t)
        for g in self.groups.values():
            g.sort(key=lambda t: t.micro_batch)
        self._queue: list[Decision] = []
        self._inflight = 0
        #: trial -> how its runs ended (status, median ms or None, walls)
        self.outcome: dict[Trial, list[TrialResult]] = {}
        self.predicted: dict[Trial, float] = {}
        self.done: set[Trial] = set()
        self._skipped: set[Trial] = set()
        #: (family key, effective batch) -> the first trial the search ran there
        self._start: dict[tuple, Trial] = {}
        #: each run split's step predicted before it ran, beside what it measured: the skips' margin
        self.errors = StepErrors()
        if self.limit is not None:
            for fk, fam in self.families.items():
                sizes = sorted({t.micro_batch for (k, _eb), g in self.groups.items() if k == fk for t in g})
                fam.probes = [Trial(m, 1, fam.world_size, fam.settings) for m in sizes[:2]]

    # ---- the seam ----------------------------------------------------------------------------
    def preview(self) -> None:
        return None

    def next(self) -> Decision | str | None:
        if not self._queue:
            self._plan()
        if self._queue:
            d = self._queue.pop(0)
            if d.skip is None:
                self._inflight += 1
            else:
                self._skipped.add(d.trial)
                self.done.add(d.trial)
            return d
        return WAIT if self._inflight else None

    def record(self, result: TrialResult) -> None:
        t = result.trial
        if result.status == "skipped" and t in self._skipped:
            self.outcome.setdefault(t, []).append(result)
            return
        self._inflight = max(0, self._inflight - 1)
        self.outcome.setdefault(t, []).append(result)
        fam = self.families.get((t.world_size, t.settings))
        if fam is None:
            return
        if result.peak_mem_gib is not None and result.status in ("ok", "interrupted", "stalled"):
            fam.memory.add(t.micro_batch, result.peak_mem_gib)
        if result.status == "oom":
            fam.oom_at = t.micro_batch if fam.oom_at is None else min(fam.oom_at, t.micro_batch)
        if result.status == "ok" and result.median_ms:
            fam.per_micro.setdefault(t.micro_batch, []).append((result.median_ms / t.grad_accum, t.label(SHORT)))
            self.errors.measure(t, self._median(t))
        if len([r for r in self.outcome[t] if r.status != "skipped"]) >= self._runs_of(t):
            self.done.add(t)

    # ---- deciding ----------------------------------------------------------------------------
    def _runs_of(self, t: Trial) -> int:
        return 1 if self._is_probe(t) else self.repeats

    def _is_probe(self, t: Trial) -> bool:
        fam = self.families[(t.world_size, t.settings)]
        return t in fam.probes and t not in self.trials

    def _run(self, t: Trial, why: str) -> None:
        steps = self.probe_steps if self._is_probe(t) else None
        for r in range(self._runs_of(t)):
            self._queue.append(Decision(t, r, why=why + (f" (run {r + 1} of {self._runs_of(t)})" if r else ""),
                                        steps=steps))
        self.done.discard(t)

    def _skip(self, t: Trial, why: str) -> None:
        self._queue.append(Decision(t, 0, why=why, skip="skipped"))

    def _bound(self) -> float | None:
        return None if self.limit is None else self.headroom * self.limit

    def _predicted_fit(self, fam: Family, m: int) -> tuple[bool, float | None]:
        """Whether micro-batch ``m`` is predicted to fit with headroom, and the prediction."""
        if fam.oom_at is not None and m >= fam.oom_at:
            return False, fam.memory.predict(m)
        pred = fam.memory.predict(m)
        if pred is None or self.limit is None:
            return True, pred
        return pred <= self._bound(), pred

    def _fits(self, fam: Family, m: int) -> tuple[bool, float | None]:
        """Whether micro-batch ``m`` may run: predicted to fit, or (``--run-unfit``) not yet
        out of memory; and the prediction."""
        fits, pred = self._predicted_fit(fam, m)
        if not fits and self.run_unfit and (fam.oom_at is None or m < fam.oom_at):
            return True, pred
        return fits, pred

    def _plan(self) -> None:
        """Put the next decisions on the queue (none while what comes next depends on runs in
        flight)."""
        if self._inflight:
            return
        for fk, fam in self.families.items():
            probes = [p for p in fam.probes if p not in fam.probed]
            if probes and not fam.memory.ready and fam.oom_at is None:
                for p in probes:
                    fam.probed.add(p)
                    steps = f", {self.probe_steps} steps" if self.probe_steps else ""
                    self._run(p, f"{PROBE_WHY}: one micro-batch of {p.micro_batch} per step{steps}, to learn "
                                 f"peak memory against the micro-batch ({self.limit_what} {fmt_gib(self.limit)} GiB)")
                return
            for (gk, eb), group in self.groups.items():
                if gk != fk:
                    continue
                if all(t in self.done for t in group):
                    continue
                self._step_group(fam, eb, group)
                if self._queue:
                    return

    def _median(self, t: Trial) -> float | None:
        return statistics.median(walls) if (walls := self._walls(t)) else None

    def _walls(self, t: Trial) -> list[float]:
        return [w for r in self.outcome.get(t, []) if r.status == "ok" for w in r.walls_ms]

    def _steps(self, t: Trial) -> list[tuple]:
        return [k for r in self.outcome.get(t, []) if r.status == "ok" for k in r.steps]

    def clearly_faster(self, fast: Trial, slow: Trial) -> bool:
        """Whether ``fast``'s step is shorter than ``slow``'s by more than the measurement resolves:
        step by step where their steps trained on the same rows (the 97.5% interval of the median
        log ratio above 0, :func:`~tracetui.analysis.paired_log_ratios`), else by their intervals."""
        a, b = self._walls(fast), self._walls(slow)
        if not a or not b:
            return False
        d, _why = paired_log_ratios(self._steps(fast), self._steps(slow))
        if d and enough_for_interval(len(d), SETTLE_Z):
            return order_stat_ci(sorted(d), SETTLE_Z)[0] > 0
        if enough_for_interval(len(a), SETTLE_Z) and enough_for_interval(len(b), SETTLE_Z):
            return settle_interval(a)[1] < settle_interval(b)[0]
        return statistics.median(a) * (1 + RESOLUTION) < statistics.median(b)

    def _step_group(self, fam: Family, eb: int, group: list[Trial]) -> None:
        ok = [t for t in group if self._median(t) is not None]
        tried = {t for t in group if t in self.outcome and any(r.status != "skipped" for r in self.outcome[t])}
        if not ok:
            fitting = [t for t in group if t not in tried and self._fits(fam, t.micro_batch)[0]]
            if fitting:
                t = fitting[-1]
                self._start[(fam_key(fam), eb)] = t
                self._decided(t, self._start_why(fam, t))
                return
            self._finish(fam, group, None)
            return
        best = min(ok, key=self._median)
        start = self._start.get((fam_key(fam), eb))
        i = group.index(best)
        for step in (+1, -1):
            j = i + step
            if not 0 <= j < len(group) or group[j] in tried or group[j] in self.done:
                continue
            n = group[j]
            # a direction is walked from the start, and on only after a clear gain that way
            back = group[i - step] if 0 <= i - step < len(group) else None
            if best != start and not (back is not None and back in tried and self.clearly_faster(best, back)):
                continue
            fits, pred = self._fits(fam, n.micro_batch)
            if not fits or self._hopeless(fam, n, best):
                continue  # skipped with its reason when the group ends
            where = "above" if step > 0 else "below"
            self._decided(n, f"neighbour {where} the best so far ({best.label(SHORT)}, "
                             f"{self._median(best):.0f} ms/step)" + self._mem_why(pred))
            return
        self._finish(fam, group, best)

    def _step_guess(self, fam: Family, n: Trial) -> tuple[float, str] | None:
        """``n``'s step (ms) predicted from the time per micro-batch measured at its micro-batch
        elsewhere (a probe, another effective batch), and where; None where none was."""
        seen = fam.per_micro.get(n.micro_batch)
        if not seen:
            return None
        per, where = min(seen)
        return per * n.grad_accum, where

    def _hopeless(self, fam: Family, n: Trial, best: Trial) -> str | None:
        """Why ``n`` cannot beat ``best``: its predicted step, made faster by the predictions'
        margin of error, still slower than ``best``'s measured median; or None."""
        guess = self._step_guess(fam, n)
        if guess is None:
            return None
        ms, where = guess
        best_ms = self._median(best)
        if self.errors.improved(ms) <= best_ms:
            return None
        return (f"predicted {ms / 1000:.3g} s/step from {where}'s time per micro-batch, "
                f"{ms / best_ms:.2f}x the best ({best.label(SHORT)}); {self.errors.improved(ms) / best_ms:.2f}x "
                f"even if {self.errors.margin():.1%} faster ({self.errors.said()})")

    def _mem_why(self, pred: float | None) -> str:
        if pred is None or self.limit is None:
            return ""
        return f"; {predicted_text(pred)} of {fmt_gib(self.limit)} GiB"

    def _start_why(self, fam: Family, t: Trial) -> str:
        if self.limit is None:
            return "largest micro-batch (no memory bound to predict against)"
        fits, pred = self._predicted_fit(fam, t.micro_batch)
        if pred is None:
            return "largest micro-batch below the one that ran out of memory"
        cap = f" (below micro-batch {fam.oom_at}, which ran out of memory)" if fam.oom_at else ""
        if not fits:
            return (f"largest micro-batch not yet out of memory{cap}, run although {predicted_text(pred)} > "
                    f"{fmt_gib(self._bound())} GiB (--run-unfit)")
        return (f"largest micro-batch predicted to fit{cap}: {predicted_text(pred)} <= {fmt_gib(self._bound())} GiB "
                f"({round(100 * self.headroom)}% of {self.limit_what} {fmt_gib(self.limit)} GiB)")

    def _decided(self, t: Trial, why: str) -> None:
        fam = self.families[(t.world_size, t.settings)]
        pred = fam.memory.predict(t.micro_batch)
        if pred is not None:
            self.predicted[t] = pred
        guess = self._step_guess(fam, t)
        if guess is not None:
            self.errors.expect(t, *guess)
        self._run(t, why)

    def _finish(self, fam: Family, group: list[Trial], best: Trial | None) -> None:
        """Skip every untried trial of the group, each with its reason."""
        for t in group:
            if t in self.done or (t in self.outcome and any(r.status != "skipped" for r in self.outcome[t])):
                continue
            fits, pred = self._fits(fam, t.micro_batch)
            if fam.oom_at is not None and t.micro_batch >= fam.oom_at:
                why = f"skipped: micro-batch {t.micro_batch} >= {fam.oom_at}, which ran out of memory"
            elif not fits and pred is not None:
                over = (f"limit {fmt_gib(self.limit)} GiB" if pred > self.limit else
                        f"{round(100 * self.headroom)}% of the limit {fmt_gib(self.limit)} GiB (headroom)")
                why = f"skipped: {predicted_text(pred)} > {over}"
                self.predicted[t] = pred
            elif best is not None:
                why = "skipped: " + (self._hopeless(fam, t, best) or
                                     f"cannot beat {best.label(SHORT)} by more than the measurement resolves "
                                     "(its neighbours were measured)")
            else:
                why = "skipped: nothing of this effective batch could run"
            self._skip(t, why)

    #: why the search has no memory bound where a card was expected (NVML could not read it)
    unbounded_why = ""

    # ---- what it concluded -------------------------------------------------------------------
    def notes(self) -> list[str]:
        out = [f"search: {self.unbounded_why}"] if self.unbounded_why else []
        for fam in self.families.values():
            line = fam.memory.line()
            tag = " (" + " ".join(f"{k}={v}" for k, v in fam.settings) + ")" if fam.settings else ""
            if line is not None:
                a, b = line
                pts = ", ".join(f"{m}: {p:.2f}" for m, p in sorted(fam.memory.points.items()))
                out.append(f"search{tag}: peak memory ~ {a:.2f} + {b:.3f} x micro-batch GiB "
                           f"(measured {pts}); limit {self.limit_what} {fmt_gib(self.limit)} GiB")
            if fam.oom_at is not None:
                out.append(f"search{tag}: micro-batch {fam.oom_at} ran out of memory; nothing at or above it was tried")
        checks = []
        for t, pred in self.predicted.items():
            peaks = [r.peak_mem_gib for r in self.outcome.get(t, []) if r.peak_mem_gib is not None]
            if peaks:
                checks.append(f"{t.label(SHORT)} {pred:.2f}/{max(peaks):.2f}")
        if checks:
            out.append("search: predicted/measured peak GiB: " + ", ".join(checks))
        ran = sum(1 for t in self.trials if any(r.status != "skipped" for r in self.outcome.get(t, [])))
        probes = sum(1 for f in self.families.values() for p in f.probes if p not in self.trials and p in self.outcome)
        out.append(f"search: ran {ran} of {len(self.trials)} trials" + (f" and {probes} memory probe(s)" if probes else ""))
        skips = ("search: a split is skipped only where its step, predicted from the time per micro-batch measured "
                 f"elsewhere and made faster by the predictions' margin, is still slower than the best measured; "
                 f"{self.errors.said()}")
        if self.outcome:
            return out + [skips]
        first = ("the largest micro-batch (no memory bound: no probes)" if self.limit is None else
                 "memory probes, then the largest micro-batch not yet out of memory (--run-unfit)" if self.run_unfit
                 else "memory probes, then the largest micro-batch predicted to fit")
        return out[:1 if self.unbounded_why else 0] + [f"search: decided as it goes: {first}, then its neighbours "
                                                        "among the divisors", skips]


def probe_length(cfg) -> int | None:
    """A memory probe's optimizer steps: the warm-up and :data:`PROBE_MEASURED` more (or
    ``--steps``, if fewer), on rows of one fixed length, where every step peaks alike and takes
    alike; None (as many as every run) on rows of varied lengths (``synthetic-ragged``, text),
    where the peak waits for the longest micro-batch."""
    if cfg.dataset != "synthetic":
        return None
    return min(cfg.steps, fixed_warmup(cfg.warmup) + PROBE_MEASURED)


def card_gib(cfg, free: bool = False) -> float | None:
    """The first GPU's memory (GiB) where runs train, from NVML (no CUDA in this process); ``free``:
    what is free of it now. None on the CPU, or where NVML cannot say (:func:`card_memory` says why)."""
    return card_memory(cfg, free)[0]


def card_memory(cfg, free: bool = False) -> tuple[float | None, str]:
    """:func:`card_gib`, and why it is None ("" on the CPU, where no card was asked for)."""
    if cfg.device == "cpu":
        return None, ""
    try:
        total, available = memory_bytes(physical_index((cfg.gpu_list() or [cfg.gpu_index()])[0]))
    except NvmlUnavailable as exc:
        return None, str(exc)
    return (available if free else total) / 2**30, ""


def make_search(cfg, trials: list[Trial], short_runs: bool = True) -> SearchPlanner:
    """The search for ``cfg``: bounded by ``--memory-limit``, else the card. Where the card's
    memory cannot be read, the search runs without a bound, and says so (on stderr, and in its
    notes: the dry run's lines)."""
    probe_steps = probe_length(cfg) if short_runs else None
    if cfg.memory_limit is not None:
        return SearchPlanner(trials, cfg.repeats, cfg.memory_limit, "--memory-limit", run_unfit=cfg.run_unfit,
                             probe_steps=probe_steps)
    card, why = card_memory(cfg)
    planner = SearchPlanner(trials, cfg.repeats, card, "the card" if card else "", run_unfit=cfg.run_unfit,
                            probe_steps=probe_steps)
    if why:
        planner.unbounded_why = (f"no memory bound: {why}; the largest micro-batch is tried first "
                                 "(--memory-limit GIB gives a bound)")
        say(f"tracetui: search: {planner.unbounded_why}")
    return planner


def wants_search(cfg, trials: list[Trial]) -> tuple[bool, str]:
    """Whether the sweep searches, and the line that says why when it was not asked for."""
    if getattr(cfg, "grid", False):
        return False, ""
    if getattr(cfg, "search", False):
        return True, ""
    runs = len(trials) * cfg.repeats
    if runs > HANDFUL and cfg.splits == "auto" and cfg.world_size == 1 and not cfg.vary:
        return True, (f"searching rather than running all {runs} runs (the grid): memory probes, then the largest "
                      "micro-batch predicted to fit and its neighbours; --grid runs every split")
    return False, ""


def make_planner(cfg, trials: list[Trial], short_runs: bool = True) -> Planner:
    """The planner ``cfg`` asks for: ``--search`` (:mod:`tracetui.planning.search`), also the default
    above a handful of runs (saying so once, on stderr), or the grid (``--grid``).
    ``short_runs``: whether the sweep can run a trial for fewer steps than ``--steps`` (not a
    user's script, whose steps are its own)."""
    search, line = wants_search(cfg, trials)
    if line:
        say(f"tracetui: {line}")
    planner = make_search(cfg, trials, short_runs) if search else GridPlanner(trials, cfg.repeats, cfg.until_confident is not None)
    # the estimate's priors: a script's steps are its own; "auto" is the GPU where NVML finds one
    device = cfg.device if cfg.device != "auto" else "cuda" if card_gib(cfg) else "cpu"
    planner.pace = Pace(cfg.steps if short_runs else None, cfg.seq_len, device)
    return planner
