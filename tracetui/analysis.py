"""From events to answers: per-split statistics, speedups with intervals, a diagnosis of what
bounds each split, and the verdict line.

Everything here works on the event dicts of :mod:`tracetui.events`, incrementally (the TUI
feeds events as they come) or from a log (``tracetui show``).
"""

from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable

from .bounded import MAX_MARKS, MAX_NOTICES, MAX_SWEEPS, MEMORY_BUDGET, NOTICE_CHARS, EvenSample, approx_bytes
from .events import (AGAIN_KINDS, FAIL_KINDS, GPU, RUN_FAILED_KINDS, NOTICE, RUN_FAILED, RUN_FINISHED, RUN_SETTINGS,
                     RUN_STAGE, RUN_STARTED, STEP, SWEEP)
from .columns import ROW_KEYS, SETTING_COLUMNS, fmt_duration
from .config import KNOB_DEFAULTS
from .flops import Profile, peak_tflops, profile_of_config, step_work
from .knobs import KNOBS, SHORT, fmt, result_changing
from .knobs import sft_args as knob_sft_args
from .phases import FIELDS
from .presets import PRESETS
from .trial import Trial
from .busy import gpu_picture, judge

BOOTSTRAP = 1000
#: two splits of one effective batch whose loss curves differ anywhere by more than this
#: (relative) are flagged, per precision the runs really trained in. Measured: fp32 on the CPU,
#: ragged rows, 12 steps: 1x4 and 4x1 agree to 1e-6 (0.0001%), LoRA dropout 0.05 included
#: 0.02%; bf16 on the H200, 30 steps: 0.02%. A gradient-accumulation normalisation bug moves
#: the loss by whole factors (equal rows) or several percent (ragged rows).
LOSS_TOLERANCE = {"fp32": 0.001, "bf16": 0.01, "fp16": 0.01}

#: how a search's memory probe (:mod:`tracetui.search`) begins its ``why``: a probe measures
#: memory at one micro-batch per step, outside the effective batches asked for, so it is no row
PROBE_WHY = "memory probe"
#: a planner's predicted peak memory, as its ``why`` says it (:func:`predicted_text`)
_PREDICTED = re.compile(r"predicted (\d+(?:\.\d+)?) GiB")


def predicted_text(gib: float) -> str:
    """A predicted peak as a planner writes it in a ``why`` (read back into ``predicted_mem_gib``)."""
    return f"predicted {gib:.2f} GiB"


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of a non-empty list."""
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: list[float]) -> float:
    return quantile(values, 0.5)


def bootstrap_medians(values: list[float], n: int = BOOTSTRAP, seed: int = 0) -> list[float]:
    """Medians of ``n`` resamples (fixed seed: the same data always gives the same interval)."""
    import numpy as np

    arr = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    # in slices of about a million draws (16 MB), the same draws as all at once: 1000 resamples
    # of 200 000 steps at once took 3 GB and over a minute
    rows = max(1, (1 << 20) // max(1, len(arr)))
    out: list[float] = []
    for start in range(0, n, rows):
        idx = rng.integers(0, len(arr), size=(min(rows, n - start), len(arr)))
        out += np.median(arr[idx], axis=1).tolist()
    return out


def order_stat_ci(values: list[float], z: float = 1.96) -> tuple[float, float]:
    """Distribution-free interval of the median from order statistics (ranks n/2 -+ z*sqrt(n)/2).

    Costs one sort, no resampling: cheap enough to evaluate after every training step."""
    xs = sorted(values)
    n = len(xs)
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half) - 1)
    return xs[lo], xs[hi]


#: the fewest steps a 95% median interval can be formed from (see :func:`enough_for_interval`)
MIN_INTERVAL_STEPS = 6


def enough_for_interval(n: int, z: float = 1.96) -> bool:
    """Whether ``n`` values can hold a median interval of the level ``z`` stands for: even the
    whole range of n values covers the median only with probability 1 - 2**(1-n) (6 values for
    95%, 7 for 97.5%); below that, any interval claims more than the data can say."""
    return n >= 2 and 1 - 2.0 ** (1 - n) >= math.erf(z / math.sqrt(2))


def confident(walls: list[float], pct: float) -> bool:
    """True once the median's 95% interval half-width is under ``pct`` % of the median."""
    if not enough_for_interval(len(walls)):
        return False
    lo, hi = order_stat_ci(walls)
    return (hi - lo) / 2 <= pct / 100.0 * median(walls)


#: z of the intervals the stopping rule compares: 97.5% rather than the verdict's 95%, to pay
#: for looking after every step (on recorded H200 steps, two samples of one distribution were
#: wrongly told apart in under 1% of simulated runs, looking at every step; at 95% in 2-4%)
SETTLE_Z = 2.24


def settle_interval(walls: list[float]) -> tuple[float, float]:
    """The interval a finished (or running) split is compared by in :func:`settled`."""
    return order_stat_ci(walls, SETTLE_Z)


#: one step of a split as pairing reads it: (optimizer step, the fingerprint of its rows or None, wall ms)
StepKey = tuple[int, "str | None", float]


def step_keys(steps: Iterable[dict]) -> list[StepKey]:
    """Measured step events as :data:`StepKey`: what :func:`paired_log_ratios` pairs."""
    return [(int(s["step"]), s.get("fingerprint"), float(s["wall_ms"])) for s in steps]


def _logs_by_step(steps: Iterable[StepKey]) -> tuple[dict[int, list[float]], dict[int, str], str]:
    """Log walls per step (several runs may measure one step), each step's fingerprint, or why not."""
    logs: dict[int, list[float]] = {}
    prints: dict[int, str] = {}
    for step, fp, wall in steps:
        if not fp:
            return {}, {}, "steps without row fingerprints"
        if prints.setdefault(step, fp) != fp:
            return {}, {}, f"its runs trained on different rows at step {step}"
        if wall > 0:
            logs.setdefault(step, []).append(math.log(wall))
    return logs, prints, ""


def paired_log_ratios(a: Iterable[StepKey], b: Iterable[StepKey],
                      least: int = MIN_INTERVAL_STEPS) -> tuple[list[float], str]:
    """``log(wall_b / wall_a)`` at each optimizer step both splits measured, in step order (each
    side the mean log over its runs), and ""; or ``[]`` and why the steps cannot be paired.

    With the same data, seed and effective batch, optimizer step k of every split trains on the same
    rows (the trainer's sampler draws one permutation whatever the split); the fingerprint each
    step records (:func:`tracetui.probe.callback.fingerprint`) says whether it did. Step times
    vary with the rows (their lengths above all), and a step-by-step ratio leaves that out, where
    two medians over steps carry it. Not paired: steps without fingerprints, a fingerprint that
    differs at any step both measured (other data or seed, ``group_by_length``, packing), fewer
    than ``least`` steps in common."""
    la, pa, why = _logs_by_step(a)
    if why:
        return [], why if why.startswith("steps") else f"one split: {why}"
    lb, pb, why = _logs_by_step(b)
    if why:
        return [], why if why.startswith("steps") else f"one split: {why}"
    common = sorted(set(la) & set(lb))
    differ = [k for k in common if pa[k] != pb[k]]
    if differ:
        more = f" and {len(differ) - 1} more" if len(differ) > 1 else ""
        return [], f"fingerprints differ at step {differ[0]}{more}: the two trained on different rows"
    if len(common) < least:
        return [], f"only {len(common)} steps in common ({least} needed)"
    return [sum(lb[k]) / len(lb[k]) - sum(la[k]) / len(la[k]) for k in common], ""


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
    jumps as single steps arrive (on the H200 one 4x1 run's half-width went 3.1%, 2.0%, 3.1% over
    three steps); holding for a few steps keeps a lucky moment from ending the measurement.

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


def median_ci(boots: list[float], level: float = 0.95) -> tuple[float, float]:
    """Percentile-bootstrap interval of the median, from :func:`bootstrap_medians`."""
    a = (1 - level) / 2
    return quantile(boots, a), quantile(boots, 1 - a)


def ratio_ci(slow_boots: list[float], fast_boots: list[float], level: float = 0.95) -> tuple[float, float]:
    """Bootstrap interval of median(slow) / median(fast): the two samples were resampled
    independently (different seeds), so pairing their bootstrap medians is a valid draw."""
    if len(slow_boots) != len(fast_boots) or len(slow_boots) < 2:
        raise ValueError("ratio_ci needs two bootstrap samples of the same size")
    ratios = [s / f for s, f in zip(slow_boots, fast_boots) if f > 0]
    if not ratios:
        raise ValueError("ratio_ci needs positive medians")
    a = (1 - level) / 2
    return quantile(ratios, a), quantile(ratios, 1 - a)


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-12:
            break
    return h


def _t_cdf(t: float, df: float) -> float:
    """Student's t distribution function (through the regularised incomplete beta)."""
    x = df / (df + t * t)
    a, b = df / 2.0, 0.5
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    ibeta = front * _betacf(a, b, x) / a if x < (a + 1) / (a + b + 2) else 1.0 - front * _betacf(b, a, 1 - x) / b
    tail = 0.5 * ibeta
    return 1.0 - tail if t >= 0 else tail


_T_CACHE: dict[tuple[float, int], float] = {}


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (p > 0.5), by bisection."""
    key = (p, df)
    if key not in _T_CACHE:
        lo, hi = 0.0, 1e4
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if _t_cdf(mid, df) < p else (lo, mid)
        _T_CACHE[key] = (lo + hi) / 2
    return _T_CACHE[key]


def simultaneous_t(df: int, splits: int) -> float:
    """t for 95% intervals that hold together over every pair of ``splits`` splits (Bonferroni).

    The verdict compares the fastest and the slowest split, picked after looking: with three
    equally fast splits a plain 95% interval would call one "faster" about one time in ten."""
    pairs = max(1, splits * (splits - 1) // 2)
    return t_quantile(1 - 0.025 / pairs, df)


def t975(df: int) -> float:
    """Student's t quantile for a 95% two-sided interval with ``df`` degrees of freedom."""
    return t_quantile(0.975, df)


def run_medians(runs: list[RunData]) -> list[float]:
    """The median step of each run that measured enough steps to have one worth the name."""
    out = []
    for r in runs:
        walls = [s["wall_ms"] for s in r.measured()]
        if enough_for_interval(len(walls)):
            out.append(median(walls))
    return out


#: pooled degrees of freedom from which intervals are run level (below: a single rerun)
MIN_RUN_DF = 2


def between_run_spread(medians: dict[tuple, list[float]]) -> dict[str, tuple[float, int]]:
    """Per machine: the variance of log run medians (``medians``: per split key, from
    :func:`run_medians`) about their split's mean, pooled over every split with two or more
    runs, and its degrees of freedom.

    Steps inside one process are close, fresh processes of one split are not (on an H200 host
    the same run's median was 288 ms in one process and 410 ms in the next). An interval from
    one run's steps says nothing about that; this spread does. Pooled across splits because two
    runs of one split alone cannot estimate it (a t interval on 1 degree of freedom is 13 times
    wider than its standard error), and runs of one sweep share the machine that causes it."""
    sums: dict[str, list[float]] = {}
    for (machine, *_), meds in medians.items():
        logs = [math.log(m) for m in meds if m > 0]
        if len(logs) > 1:
            mu = sum(logs) / len(logs)
            acc = sums.setdefault(machine, [0.0, 0])
            acc[0] += sum((x - mu) ** 2 for x in logs)
            acc[1] += len(logs) - 1
    # one rerun (1 degree of freedom, t = 12.7) is not yet a spread to judge by
    return {m: (ss / df, int(df)) for m, (ss, df) in sums.items() if df >= MIN_RUN_DF}


def _boots(results: "Results", key: tuple, per_run: list[list[float]]) -> list[float]:
    """Bootstrap medians of a group, cached until the group gains steps (live redraws)."""
    size = tuple(len(w) for w in per_run)
    cached = results.boot_cache.get(key)
    if cached is not None and cached[0] == size:
        return cached[1]
    seed = zlib.crc32(repr(key).encode())  # stable across processes: same data, same interval
    boots = bootstrap_medians([w for run in per_run for w in run], seed=seed)
    results.boot_cache[key] = (size, boots)
    return boots


@dataclass
class RunData:
    """Everything one run (one process, one split) reported."""

    run_id: str
    started: dict = field(default_factory=dict)
    #: an even sample of the run's steps and GPU samples once the memory budget thinned them
    #: (:mod:`tracetui.bounded`); the counts below are of every step reported
    steps: list[dict] = field(default_factory=EvenSample)
    gpu: list[dict] = field(default_factory=EvenSample)
    notices: list[str] = field(default_factory=list)
    measured_seen: int = 0
    warmup_seen: int = 0
    status: str = "queued"
    message: str = ""
    finished: dict = field(default_factory=dict)
    #: what the trainer really ran with (rank 0's read-back)
    settings: dict = field(default_factory=dict)
    #: sweep id -> the machine its started runs reported (shared by the runs of one Results)
    sweep_machines: dict = field(default_factory=dict, repr=False, compare=False)
    #: when each stage before the first step began, seconds after the process started
    stages: dict = field(default_factory=dict)
    #: when the sweep asked for the run's process (unix seconds, from its first stage)
    asked_at: float | None = None

    @property
    def label(self) -> str:
        return self.started.get("label", self.run_id.rsplit("/", 1)[-1])

    @property
    def trial(self) -> Trial:
        """The trial this run measured (from its start event's fields, never its label)."""
        return Trial.from_fields(self.started)

    @property
    def machine(self) -> str:
        env = self.started.get("env")
        if not env:  # a trial the sweep never started: where the sweep's other runs ran
            return self.sweep_machines.get(self.run_id.split("/", 1)[0], "CPU")
        return env.get("gpu_name") or "CPU"

    def measured(self) -> list[dict]:
        if self.status in AGAIN_KINDS:
            return []  # an attempt run again (out of memory beside a head start, or lost): no steps of the split
        return [s for s in self.steps if not s.get("warmup") and s.get("rank", 0) == 0 and s["wall_ms"] > 0]

    def measured_count(self) -> int:
        """How many measured steps the run reported (:meth:`measured` may hold a sample)."""
        return 0 if self.status in AGAIN_KINDS else self.measured_seen

    def head_bytes(self) -> int:
        """What the run holds besides its steps and GPU samples (estimated bytes)."""
        return (approx_bytes(self.started) + approx_bytes(self.settings) + approx_bytes(self.stages)
                + approx_bytes(self.finished) + approx_bytes(self.notices) + len(self.message))

    def add(self, event: dict) -> int:
        """Fold in one event; the bytes its steps or GPU samples grew by (:mod:`tracetui.bounded`)."""
        etype = event["type"]
        if etype == RUN_STARTED:
            self.started = event
            self.status = "warming up"
        elif etype == STEP:
            if event.get("warmup"):
                self.warmup_seen += 1
            elif event.get("rank", 0) == 0 and event["wall_ms"] > 0:
                self.measured_seen += 1
            if self.status in ("queued", "warming up") and not event.get("warmup"):
                self.status = "running"
            return self.steps.append(event) or 0  # (a plain list, with no budget: None)
        elif etype == GPU:
            return self.gpu.append(event) or 0
        elif etype == NOTICE:
            self.notices.append(str(event.get("message", ""))[:NOTICE_CHARS])
            if len(self.notices) > MAX_NOTICES:  # the first ones and the latest
                del self.notices[MAX_NOTICES // 2]
        elif etype == RUN_STAGE:
            if event.get("rank", 0) == 0 and isinstance(event.get("stages"), dict):
                self.stages = event["stages"]
                # the earliest reading: a swept script's callback sends its stages at once,
                # at its first step, each with its own time since the process started
                asked = event["t"] - float(event["elapsed_s"])
                self.asked_at = asked if self.asked_at is None else min(self.asked_at, asked)
        elif etype == RUN_SETTINGS:
            if event.get("rank", 0) == 0 or not self.settings:
                self.settings = event.get("settings") or {}
        elif etype == RUN_FINISHED:
            # under data parallel every rank finishes; rank 0's record stands, and a rank that
            # failed is not overruled by one that finished after it
            if event.get("rank", 0) == 0 and self.status not in RUN_FAILED_KINDS:
                self.status = "ok"
                self.finished = event
        elif etype == RUN_FAILED:
            self.status = event.get("kind", "error")
            self.message = event.get("message", "")
        return 0


class Results:
    """All runs seen so far, in arrival order, within ``budget`` bytes (estimated,
    :mod:`tracetui.bounded`): past it the longest runs' steps are thinned to an even sample, and
    once that cannot free enough, runs that start later are left out (``left_out`` counts their
    events). ``budget=None``: everything kept (``tracetui show --export``: a log read whole)."""

    def __init__(self, budget: int | None = MEMORY_BUDGET) -> None:
        self.runs: dict[str, RunData] = {}
        self.sweep_machines: dict[str, str] = {}
        self.boot_cache: dict[tuple, tuple[int, list[float]]] = {}
        #: sweep id -> when its own parts happened (``sweep`` events: :mod:`tracetui.clock`)
        self.sweep_times: dict[str, dict[str, float]] = {}
        self.budget = budget
        #: estimated bytes held, and per run what besides its samples
        self.held = 0
        self._heads: dict[str, int] = {}
        #: events of runs left out of the summary for want of memory (every one is in the log)
        self.left_out = 0

    def add(self, event: dict) -> RunData | None:
        """Fold in one event; the run it is of (None for a sweep's own event, or a run left out)."""
        if event["type"] == SWEEP:
            if event["run_id"] in self.sweep_times or len(self.sweep_times) < MAX_SWEEPS:
                times = self.sweep_times.setdefault(event["run_id"], {})
                for mark, at in (event.get("times") or {}).items():
                    if mark in times or len(times) < MAX_MARKS:
                        times[mark] = at
            return None
        run = self.runs.get(event["run_id"])
        if run is None:
            if self.budget is not None and self.held > self.budget and not self._thin():
                self.left_out += 1
                return None
            run = self.runs[event["run_id"]] = RunData(event["run_id"], sweep_machines=self.sweep_machines)
            if self.budget is None:
                run.steps, run.gpu = [], []
        grown = run.add(event)
        if self.budget is not None:
            if event["type"] in (STEP, GPU):
                self.held += grown
            else:
                head = run.head_bytes()
                self.held += head - self._heads.get(run.run_id, 0)
                self._heads[run.run_id] = head
            if self.held > self.budget:
                self._thin()
        if event["type"] == RUN_STARTED and event.get("env"):
            self.sweep_machines.setdefault(event["run_id"].split("/", 1)[0], run.machine)
        return run

    def _thin(self) -> bool:
        """Thin the largest samples until within the budget; whether that got there."""
        while self.held > self.budget:
            samples = [x for r in self.runs.values() for x in (r.steps, r.gpu) if len(x) >= 4]
            if not samples:
                return False
            self.held -= max(samples, key=lambda x: x.size).thin()
        return True

    def thinned(self) -> list[RunData]:
        """The runs whose steps or GPU samples are held as an even sample."""
        return [r for r in self.runs.values() if getattr(r.steps, "stride", 1) > 1 or getattr(r.gpu, "stride", 1) > 1]

    def extend(self, events: Iterable[dict]) -> "Results":
        for e in events:
            self.add(e)
        return self



def _window_gpu(run: RunData, measured: list[dict]) -> list[dict]:
    """GPU samples taken while the measured steps ran."""
    if not measured or not run.gpu:
        return []
    t0 = min(s.get("t_end", s["t"]) - s.get("host_ms", s["wall_ms"]) / 1000.0 for s in measured)
    t1 = max(s.get("t_end", s["t"]) for s in measured)
    return [g for g in run.gpu if t0 <= g["t"] <= t1]


def _phase(step: dict, name: str) -> float:
    v = step.get(name, 0.0)
    return float(sum(v)) if isinstance(v, list) else float(v or 0.0)


def repeat_mark(run_id: str) -> str:
    """Which run of its trial a run id names (``2`` of ``.../4x1#2``); "" for a trial's one run
    (:meth:`tracetui.runner.sweep.SweepBase` writes them)."""
    tail = run_id.rsplit("/", 1)[-1]
    return tail.rsplit("#", 1)[-1] if "#" in tail else ""


class Row(dict):
    """A summary row: a dict whose keys are the ones :mod:`tracetui.columns` declares. Reading
    or writing any other key raises ``KeyError`` naming it: a misspelt read
    (``row.get("peak_mem_gb")``) fails the tests that reach it instead of giving None."""

    __slots__ = ()

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for key in self:
            _declared(key)

    def __getitem__(self, key: str) -> Any:
        return super().__getitem__(_declared(key))

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(_declared(key), default)

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(_declared(key), value)

    def setdefault(self, key: str, default: Any = None) -> Any:
        return super().setdefault(_declared(key), default)

    def update(self, *args, **kwargs) -> None:
        for key in dict(*args, **kwargs):
            _declared(key)
        super().update(*args, **kwargs)


def _declared(key: str) -> str:
    if key not in ROW_KEYS:
        raise KeyError(f"{key!r} is not a summary column: tracetui.columns declares them")
    return key


def summarise(results: Results, project_steps: int | None = None,
              peak_tflops: float | None = None) -> list[dict[str, Any]]:
    """One row per split (runs of the same split on the same machine pooled). ``peak_tflops``:
    the device's peak to measure MFU against (``--peak-tflops``), in place of :mod:`tracetui.flops`'s
    table."""
    groups: dict[tuple, list[RunData]] = {}
    for run in results.runs.values():
        if not run.started or str(run.started.get("why") or "").startswith(PROBE_WHY):
            continue
        groups.setdefault((run.machine, *run.trial.key()), []).append(run)
    crowded: dict[tuple, list[str]] = {}
    failed_of: dict[tuple, list[RunData]] = {}
    for key, runs in list(groups.items()):
        # an attempt run again alone (out of memory beside a head start, or lost with its fork
        # server before its first step) is no run of the split (its steps neither), only its
        # message stays; on its own it stays, unranked
        kept = [r for r in runs if r.status not in AGAIN_KINDS]
        if kept and len(kept) < len(runs):
            crowded[key] = [r.message for r in runs if r.status in AGAIN_KINDS and r.message]
            groups[key] = kept
        # a run that failed beside runs of its split that did not (killed mid-run, its repeat
        # finished): its partial steps are not pooled with theirs; the row says it failed
        counted = [r for r in kept if r.status not in FAIL_KINDS]
        if counted and len(counted) < len(kept):
            failed_of[key] = [r for r in kept if r.status in FAIL_KINDS]
            groups[key] = counted
    rows: list[dict[str, Any]] = []
    boots_of: dict[tuple, list[float]] = {}
    medians = {key: run_medians(runs) for key, runs in groups.items()}
    spread = between_run_spread(medians)
    steps_of = {key: [step_keys(r.measured()) for r in runs if r.measured()] for key, runs in groups.items()}
    for key, runs in groups.items():
        machine, eb, mb, ga, ws, varied = key
        trial = runs[0].trial
        measured = [s for r in runs for s in r.measured()]
        walls = [s["wall_ms"] for s in measured]
        statuses = [r.status for r in runs]
        live = [st for st in statuses if st in ("queued", "warming up", "running")]
        # still measuring while any run is (running before warming up before queued: a head start
        # built beside a measuring run does not make its split look as if it were warming up);
        # ok once one run is; else the failure
        status = (next(st for st in ("running", "warming up", "queued") if st in live) if live
                  else "ok" if "ok" in statuses else statuses[-1])
        failed = [st for st in statuses if st in FAIL_KINDS] + [r.status for r in failed_of.get(key, [])]
        row: dict[str, Any] = Row(
            machine=machine, effective_batch=eb, micro_batch=mb, grad_accum=ga, world_size=ws,
            split=trial.split, trial=trial.label(SHORT), varied=dict(varied), **dict(varied),
            status=status, runs=sum(1 for r in runs if r.status not in AGAIN_KINDS),
            steps_measured=sum(r.measured_count() for r in runs), warmup_steps=sum(r.warmup_seen for r in runs),
            message="; ".join([*crowded.get(key, []), *(r.message for r in runs if r.message)]),
            runs_failed=len(failed) or None, failed_kinds=failed,
        )
        if failed and status != failed[-1]:
            gone = failed_of.get(key, [])
            what = (f"{failed[0]} in {len(failed)} of {len(runs) + len(gone)} runs"
                    + (f" ({', '.join(r.trial.label(SHORT, repeat_mark(r.run_id)) + ': ' + (r.message or r.status) for r in gone)}"
                       "; its steps are not pooled)" if gone else ""))
            row["message"] = "; ".join(x for x in (what, row["message"]) if x)
        if walls:
            row["step_ms_median"] = median(walls)
            row["step_ms_p10"] = quantile(walls, 0.1)
            row["step_ms_p90"] = quantile(walls, 0.9)
            per_run = [[s["wall_ms"] for s in r.measured()] for r in runs if r.measured()]
            meds = medians[key]
            if machine in spread:
                # Run level: the median step of a typical fresh process, with an interval from
                # the spread between processes (t on the pooled degrees of freedom).
                # A split with no run of enough steps gets no interval at all, not a step one.
                var, df = spread[machine]
                if meds:
                    logs = [math.log(m) for m in meds]
                    mu = sum(logs) / len(logs)
                    half = t975(df) * math.sqrt(var / len(logs))
                    row.update(ci_scope="runs", step_ms_median=math.exp(mu), step_ms_ci_low=math.exp(mu - half),
                               step_ms_ci_high=math.exp(mu + half), _mu=mu, _k=len(logs), _var=var, _df=df)
                else:
                    row.update(ci_scope="runs", too_few_steps=True)
            elif enough_for_interval(len(walls)):
                row["ci_scope"] = "steps"
                boots_of[key] = _boots(results, key, per_run)
                lo, hi = median_ci(boots_of[key])
                row["step_ms_ci_low"], row["step_ms_ci_high"] = lo, hi
            else:
                row["too_few_steps"] = True
            row.update(apportion(measured, row["step_ms_median"]))
            fwd_per_mb = [_phase(s, "forward_ms") / max(1, len(s.get("forward_ms") or [1])) for s in measured]
            row["forward_ms_per_micro"] = median(fwd_per_mb)
            secs = row["step_ms_median"] / 1000.0
            toks = [s["tokens"] for s in measured if s.get("tokens")]
            samples = [s["samples"] for s in measured if s.get("samples")]
            row["tokens_per_s"] = median(toks) * ws / secs if toks else None
            row["samples_per_s"] = median(samples) * ws / secs if samples else None
            if len(meds) > 1:
                row["repeat_spread_pct"] = 100.0 * (max(meds) - min(meds)) / median(meds)
        gpus = sorted({r.started.get("gpu") for r in runs if r.started.get("gpu") is not None})
        row["gpus"] = ",".join(str(g) for g in gpus) or None
        gpu = [g for r in runs for g in _window_gpu(r, r.measured())]
        row["gpu_util_mean"] = sum(g["util"] for g in gpu) / len(gpu) if gpu else None
        peaks = [s["peak_mem_gib"] for s in measured if s.get("peak_mem_gib") is not None]
        row["peak_mem_gib"] = max(peaks) if peaks else None
        if ws > 1:
            _add_ranks(row, runs)
        whys = [r.started.get("why") or "" for r in runs]
        row["why"] = whys[0] or None
        predicted = [float(m.group(1)) for m in map(_PREDICTED.search, whys) if m]
        row["predicted_mem_gib"] = predicted[0] if predicted else None
        env = runs[0].started.get("env") or {}
        row["mem_total_gib"] = env.get("gpu_total_gib")
        cfg = runs[0].started.get("config") or {}
        row["memory_limit_gib"] = cfg.get("memory_limit")
        row["knob_values"] = {k: cfg[k] for k in KNOB_DEFAULTS if k in cfg}
        firsts = [s["wall_ms"] for r in runs for s in r.steps[:1] if s.get("rank", 0) == 0 and s.get("warmup")]
        row["first_step_ms"] = median(firsts) if firsts else None
        if row["first_step_ms"] and row.get("step_ms_median") and (varied_on(row, "torch_compile") or cfg.get("torch_compile")):
            # the first step compiles: what it took beyond an ordinary step is compile time
            row["compile_s"] = max(0.0, (row["first_step_ms"] - row["step_ms_median"]) / 1000.0)
        row["energy_j_per_step"] = _energy_per_step(runs, row.get("step_ms_median"))
        with_loss = [r for r in runs if _loss_curve(r)]
        source = ([r for r in with_loss if r.status == "ok"] or with_loss or [None])[-1]
        curve = _loss_curve(source) if source is not None else {}
        row["final_loss"] = curve[max(curve)] if curve else None
        row["loss_curve"] = curve
        bad_steps = [k for r in with_loss for k, v in _loss_curve(r).items() if not math.isfinite(v)]
        row["loss_finite"] = not bad_steps
        if bad_steps:
            bad = min(bad_steps)
            row["message"] = "; ".join(x for x in (row["message"], f"loss went non-finite at step {bad}") if x)
        row["precision_used"] = _precision_of(runs[0])
        _add_start(row, runs)
        _add_settings(row, runs)
        _add_work(row, runs, measured, peak_tflops)
        _add_quiet(row, runs)
        row["stopped_early"] = any(r.finished.get("stopped_early") for r in runs)
        reasons = sorted({r.finished["stop_reason"] for r in runs if r.finished.get("stop_reason")})
        row["stop_reason"] = "/".join(reasons) or None
        rt = [r.finished.get("train_runtime_s") for r in runs if r.finished.get("train_runtime_s") is not None]
        row["train_runtime_s"] = sum(rt) / len(rt) if rt else None
        # Attach mode knows the run's own length (its max_steps) when none is asked for.
        planned = project_steps or max((r.started.get("max_steps") or 0 for r in runs), default=0)
        if planned and row.get("step_ms_median"):
            row["projected_s"] = planned * row["step_ms_median"] / 1000.0 + (row.get("compile_s") or 0.0)
        rows.append(row)
    _add_speedups(rows, boots_of, results, steps_of, spread)
    _add_loss_check(rows)
    _add_environment_changes(rows, groups)
    for row in rows:
        row["bound"], row["evidence"] = diagnose(row, rows)
    _add_result_changes(rows)
    rows.sort(key=lambda r: (r["machine"], r["effective_batch"], r["micro_batch"], sorted(r["varied"].items(), key=str)))
    for row in rows:
        for k in ("loss_curve", "_mu", "_k", "_var", "_df"):
            row.pop(k, None)
    return rows


#: a run's start, split into its parts: column -> (the stage it starts at, the stage it ends at);
#: tracetui's own runs have the first four, a swept script the interpreter, the script and the
#: trainer (it builds its model and data in its own code)
START_PARTS = {
    "start_imports_s": (None, "building the model"),
    "start_model_s": ("building the model", "preparing data"),
    "start_data_s": ("preparing data", "building the trainer"),
    "start_interpreter_s": (None, "running the script"),
    "start_script_s": ("running the script", "building the trainer"),
    "start_trainer_s": ("building the trainer", "first step"),
    "start_s": (None, "first step"),
}


def _add_start(row: dict, runs: list[RunData]) -> None:
    """Where each run's start went, process start to its first step (medians over the runs):
    the interpreter and imports, building the model, preparing data, building the trainer."""
    for col, (a, b) in START_PARTS.items():
        spans = [r.stages[b] - (r.stages[a] if a else 0.0) for r in runs
                 if b in r.stages and (a is None or a in r.stages)]
        row[col] = median(spans) if spans else None


def time_spent(results: Results) -> list[dict]:
    """Where each sweep's time went, from its own start (the command's process start) to its
    end: its steps (warm-up included; ``steps_s`` their sum, ``stepping_s`` the wall time they
    covered, the same where one run steps at a time) against what lay before its first step (of
    which the fork server's library imports, the checks, the first run's start), between its
    runs, between the steps of one run, and after its last step. Those parts and
    ``stepping_s`` add up to ``command_s``. Steps after the sweep's end (a run the monitor's
    ``r`` made again) are not the sweep's. One dict per sweep that said when it ran (``sweep``
    events), in its order; seconds."""
    out = []
    for sid, marks in results.sweep_times.items():
        runs = [r for r in results.runs.values() if r.run_id.split("/", 1)[0] == sid]
        out.append(_time_spent(sid, marks, runs))
    return out


def step_span(s: dict) -> tuple[float, float]:
    """When a step event's step began and ended (host clock, unix seconds)."""
    end = s.get("t_end", s["t"])
    return end - s["wall_ms"] / 1000.0, end


def _time_spent(sid: str, marks: dict, runs: list[RunData]) -> dict:
    end = marks.get("ended")
    spans = sorted((b, e, s["wall_ms"] / 1000.0, bool(s.get("warmup")), r.run_id) for r in runs for s in r.steps
                   if s.get("rank", 0) == 0 for b, e in (step_span(s),) if end is None or e <= end + 0.5)
    # (a sweep started from Python, not by the command: from the earliest of its marks)
    start = marks.get("command") or min((v for k, v in marks.items() if k != "ended"), default=None)

    def secs(a: str, b: str) -> float | None:
        return round(marks[b] - marks[a], 2) if a in marks and b in marks else None

    got: dict[str, Any] = {"sweep": sid, "command_s": round(end - start, 2) if start and end else None,
                           "steps_s": round(sum(w for *_, w, _, _ in spans), 2),
                           "warmup_steps_s": round(sum(w for *_, w, warm, _ in spans if warm), 2),
                           "libraries_s": secs("server", "libraries"), "checks_s": secs("libraries", "checked")}
    if not spans:
        return got
    got["before_first_step_s"] = round(spans[0][0] - start, 2) if start else None
    first = min((r for r in runs if r.asked_at is not None and r.steps), key=lambda r: r.asked_at, default=None)
    if first is not None:
        begin = next(b for b, *_, rid in spans if rid == first.run_id)
        got["first_run_start_s"] = round(begin - first.asked_at, 2)
    between = within = 0.0
    covered = spans[0][1] - spans[0][0]
    reach, owner = spans[0][1], spans[0][4]
    for b, e, _, _, rid in spans[1:]:
        if b > reach:  # a gap no step covers
            if rid == owner:
                within += b - reach
            else:
                between += b - reach
        covered += max(0.0, e - max(b, reach))
        if e > reach:
            reach, owner = e, rid
    got["stepping_s"] = round(covered, 2)
    got["between_runs_s"] = round(between, 2)
    got["within_runs_s"] = round(within, 2)
    got["after_last_step_s"] = round(end - reach, 2) if end else None
    if got["command_s"]:
        got["steps_share"] = round(covered / got["command_s"], 3)
    return got


def time_line(spent: dict) -> str:
    """One line of :func:`time_spent`'s account of a sweep, for the terminal (parts under 0.05 s
    left out, but for the time between runs)."""
    total = spent.get("command_s")
    if not total:
        return ""
    covered = spent.get("stepping_s", spent["steps_s"])
    parts = [f"{total:.1f} s, {100 * covered / total:.0f}% in steps ({spent['steps_s']:.1f} s, "
             f"warm-up {spent['warmup_steps_s']:.1f})"]
    before = spent.get("before_first_step_s")
    if before is not None:
        of = [f"{words} {spent[key]:.1f}" for key, words in (
            ("libraries_s", "library imports"), ("checks_s", "checks"), ("first_run_start_s", "first run's start"))
            if spent.get(key) is not None and spent[key] >= 0.05]
        parts.append(f"before the first step {before:.1f} s" + (f" ({', '.join(of)})" if of else ""))
    for key, words in (("between_runs_s", "between runs"), ("within_runs_s", "between a run's steps"),
                       ("after_last_step_s", "after the last step")):
        if spent.get(key) is not None and (spent[key] >= 0.05 or key == "between_runs_s"):
            parts.append(f"{words} {spent[key]:.1f} s")
    return "; ".join(parts)


def varied_on(row: dict, name: str) -> bool:
    return bool((row.get("varied") or {}).get(name))


def _loss_curve(run: RunData) -> dict[int, float]:
    """Rank 0's loss per step; a loss that went NaN or infinite is null in a log (JSON has no
    NaN) and flagged apart, and comes back here as NaN."""
    return {s["step"]: (s["loss"] if s.get("loss") is not None else math.nan) for s in run.steps
            if (s.get("loss") is not None or s.get("loss_finite") is False) and s.get("rank", 0) == 0}


def _add_ranks(row: dict, runs: list[RunData]) -> None:
    """Data-parallel columns: each rank's peak memory, the communication (DDP: the exposed
    all-reduce time, estimated from the synchronising micro-batch; FSDP: none, see below), and
    how far the slowest rank's compute lags the fastest."""
    steps = [s for r in runs for s in r.steps if not s.get("warmup")]
    peaks: dict[int, float] = {}
    for s in steps:
        if s.get("peak_mem_gib") is not None:
            rank = s.get("rank", 0)
            peaks[rank] = max(peaks.get(rank, 0.0), s["peak_mem_gib"])
    if peaks:
        # what each GPU must hold is the largest rank's peak, not rank 0's
        row["peak_mem_gib_ranks"] = " / ".join(f"{peaks[r]:.2f}" for r in sorted(peaks))
        row["peak_mem_gib"] = max(peaks.values())
    comm = [s["comm_est_ms"] for s in steps if s.get("rank", 0) == 0 and s.get("comm_est_ms") is not None]
    row["comm_ms"] = median(comm) if comm else None
    sync = [s["backward_sync_ms"] for s in steps if s.get("rank", 0) == 0 and s.get("backward_sync_ms") is not None]
    row["backward_sync_ms"] = median(sync) if sync else None
    sharding = next((r.settings.get("sharding_used") for r in runs if r.settings.get("sharding_used")), None)
    if sharding and sharding.startswith("fsdp"):
        row["comm_note"] = ("FSDP communicates in every micro-batch (all-gathers in forward and backward, "
                            "reduce-scatters in backward): no micro-batch runs without it to compare against, "
                            "so its exposed time is not estimated; see comm_gib_per_step")
    per_rank: dict[int, list[float]] = {}
    for s in steps:
        # compute outside the synchronising micro-batch (DDP); FSDP has none: all of it
        bwd = s.get("backward_nosync_ms") if s.get("backward_sync_ms") is not None else sum(s.get("backward_ms") or [])
        work = sum(s.get("forward_ms") or []) + (bwd or 0.0)
        per_rank.setdefault(s.get("rank", 0), []).append(work)
    meds = {r: median(v) for r, v in per_rank.items() if v}
    row["ranks"] = len(meds)
    if len(meds) > 1 and min(meds.values()) > 0:
        slow = max(meds, key=meds.get)
        row["slowest_rank"] = slow
        row["rank_spread_pct"] = 100.0 * (meds[slow] - min(meds.values())) / min(meds.values())


def _energy_per_step(runs: list[RunData], step_ms: float | None) -> float | None:
    if not step_ms:
        return None
    powers = []
    for r in runs:
        g = [x for x in _window_gpu(r, r.measured()) if x.get("energy_j") is not None]
        if len(g) >= 2 and g[-1]["t"] > g[0]["t"]:
            powers.append((g[-1]["energy_j"] - g[0]["energy_j"]) / (g[-1]["t"] - g[0]["t"]))
    if not powers:
        return None
    return sum(powers) / len(powers) * step_ms / 1000.0


def _add_speedups(rows: list[dict], boots_of: dict[tuple, list[float]], results: "Results | None" = None,
                  steps_of: dict[tuple, list[list[StepKey]]] | None = None,
                  spread: dict[str, tuple[float, int]] | None = None) -> None:
    """Speedup of each split against the slowest of its group, with an interval. Where the two
    splits' steps trained on the same rows, step by step (:func:`paired_compare`); otherwise at run
    level a t interval of the log ratio, simultaneous over the group's pairs, or with one run per
    split a bootstrap of the two medians; ``comparison`` says which, and why not paired. Failed
    splits are left out of the ranking."""
    by_group: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("step_ms_median") and r["status"] not in RUN_FAILED_KINDS:
            by_group.setdefault((r["machine"], r["effective_batch"], r["world_size"]), []).append(r)
    steps_of = steps_of or {}
    paired_spread = paired_run_spread(steps_of)
    for group in by_group.values():
        slowest = max(group, key=lambda r: r["step_ms_median"])
        fastest = min(group, key=lambda r: r["step_ms_median"])
        sw = boots_of.get(_key(slowest))
        pairs = max(1, len(group) * (len(group) - 1) // 2)
        # every pair, each way: the ratio of the other's step to this one's (the recommendation's ties)
        for r in group:
            r["paired_vs"] = {}
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                got, _why = paired_compare(a, b, steps_of, results, pairs, paired_spread, spread)
                if got is not None:
                    est, lo, hi, _n, _scope = got
                    a["paired_vs"][b["trial"]] = (math.exp(est), math.exp(lo), math.exp(hi))
                    b["paired_vs"][a["trial"]] = (math.exp(-est), math.exp(-hi), math.exp(-lo))
        for r in group:
            r["speedup_vs_slowest"] = slowest["step_ms_median"] / r["step_ms_median"]
            r["fastest"] = r is fastest
            if r is not slowest:  # (the slowest keeps the interval of its own ratio, 1)
                got, why = paired_compare(r, slowest, steps_of, results, pairs, paired_spread, spread)
                if got is not None:
                    est, lo, hi, n, scope = got
                    r["speedup_vs_slowest"] = math.exp(est)
                    r["speedup_ci_low"], r["speedup_ci_high"] = math.exp(lo), math.exp(hi)
                    r["comparison"] = f"paired over {n} steps" + scope
                    r["paired_steps"] = n
                    continue
                r["comparison"] = f"unpaired: {why}"
            mine = boots_of.get(_key(r))
            if "_mu" in r and "_mu" in slowest:  # run level: t interval of the log ratio
                half = simultaneous_t(r["_df"], len(group)) * math.sqrt(r["_var"] * (1 / r["_k"] + 1 / slowest["_k"]))
                log_ratio = slowest["_mu"] - r["_mu"]
                r["speedup_ci_low"], r["speedup_ci_high"] = math.exp(log_ratio - half), math.exp(log_ratio + half)
            elif sw is not None and mine is not None:  # no interval from too few steps
                lo, hi = ratio_ci(sw, mine)
                r["speedup_ci_low"], r["speedup_ci_high"] = lo, hi


def paired_run_spread(steps_of: dict[tuple, list[list[StepKey]]]) -> dict[str, tuple[float, int]]:
    """Per machine: how much fresh processes of one split differ once the rows are paired out, and
    its degrees of freedom (as :func:`between_run_spread`, pooled over every split with two or
    more runs whose steps carry fingerprints that agree). A run's level is the median, over the
    steps it shares with the split's other runs, of its log step time less their mean there."""
    sums: dict[str, list[float]] = {}
    for (machine, *_), runs in steps_of.items():
        if len(runs) < 2:
            continue
        logs: dict[int, list[float]] = {}
        prints: dict[int, str] = {}
        usable = True
        for run in runs:
            for step, fp, wall in run:
                if not fp or wall <= 0 or prints.setdefault(step, fp) != fp:
                    usable = False
                    break
                logs.setdefault(step, []).append(math.log(wall))
        if not usable:
            continue
        centre = {k: sum(v) / len(v) for k, v in logs.items() if len(v) > 1}
        levels = []
        for run in runs:
            res = [math.log(w) - centre[k] for k, _, w in run if k in centre]
            if enough_for_interval(len(res)):
                levels.append(median(res))
        if len(levels) > 1:
            mu = sum(levels) / len(levels)
            acc = sums.setdefault(machine, [0.0, 0])
            acc[0] += sum((x - mu) ** 2 for x in levels)
            acc[1] += len(levels) - 1
    return {m: (ss / df, int(df)) for m, (ss, df) in sums.items() if df >= MIN_RUN_DF}


def paired_compare(fast: dict, slow: dict, steps_of: dict[tuple, list[list[StepKey]]], results: "Results | None",
                   pairs: int = 1, paired_spread: dict | None = None, spread: dict | None = None):
    """``slow``'s step time over ``fast``'s, step by step (:func:`paired_log_ratios`), as
    ``((log ratio, low, high, paired steps, scope words), "")``, or ``(None, why not paired)``.

    The ratio is the median of the per-step log ratios; its interval a bootstrap over the paired
    steps, at the level that holds over the group's ``pairs`` together (Bonferroni). Where both
    splits ran in several fresh processes (``ci_scope`` runs), the spread between processes is
    added in quadrature: a t interval on the runs' levels once the rows are paired out
    (:func:`paired_run_spread`; that of the run medians where no split has it), as the host drifts
    between processes whatever rows they train on."""
    fast_runs, slow_runs = steps_of.get(_key(fast)), steps_of.get(_key(slow))
    if not fast_runs or not slow_runs:
        return None, "no measured steps"
    d, why = paired_log_ratios([k for run in fast_runs for k in run], [k for run in slow_runs for k in run])
    if not d:
        return None, why
    alpha = 0.05 / pairs
    est = median(d)
    key = ("paired", _key(fast), _key(slow))
    cached = results.boot_cache.get(key) if results is not None else None
    if cached is not None and cached[0] == len(d):
        boots = cached[1]
    else:
        boots = bootstrap_medians(d, seed=zlib.crc32(repr(key).encode()))
        if results is not None:
            results.boot_cache[key] = (len(d), boots)
    lo, hi = quantile(boots, alpha / 2), quantile(boots, 1 - alpha / 2)
    scope = ""
    if fast.get("ci_scope") == "runs" and slow.get("ci_scope") == "runs":
        var_df = (paired_spread or {}).get(fast["machine"]) or (spread or {}).get(fast["machine"])
        if var_df is not None:
            var, df = var_df
            half = t_quantile(1 - alpha / 2, df) * math.sqrt(var * (1 / len(fast_runs) + 1 / len(slow_runs)))
            lo, hi = est - math.hypot(est - lo, half), est + math.hypot(hi - est, half)
            scope = f" and {len(fast_runs)}+{len(slow_runs)} runs"
    return (est, lo, hi, len(d), scope), ""


def _key(row: dict) -> tuple:
    return (row["machine"], row["effective_batch"], row["micro_batch"], row["grad_accum"], row["world_size"],
            tuple(sorted(row.get("varied", {}).items())))


def _add_result_changes(rows: list[dict]) -> None:
    """``changes_result``: why a trial does not compute what the others do (a setting that
    changes the numerics by design, or a loss curve that departs beyond rounding), or None."""
    for r in rows:
        varied = r.get("varied") or {}
        why = [f"{s} changes the numerics" for s in result_changing(varied)]
        # A loss that departs is put on the trial that moved a setting away from its default;
        # trials at the defaults differing only in the split keep a "check" note instead.
        moved = [f"{k}={fmt(v)}" for k, v in varied.items() if v != KNOB_DEFAULTS.get(k)]
        if r.get("loss_ok") is False and r.get("loss_note") and moved:
            why.append(f"with {', '.join(moved)}, {r['loss_note']}")
        r["changes_result"] = "; ".join(why) or None


def sft_arguments(row: dict) -> dict[str, Any]:
    """The ``SFTConfig`` arguments that run ``row``'s trial as tracetui measured it: the split,
    and each speed setting at the value it ran with (defaults included, as TRL's differ)."""
    values = dict(row.get("knob_values") or {})
    values.update(row.get("varied") or {})
    out: dict[str, Any] = {"per_device_train_batch_size": row["micro_batch"],
                           "gradient_accumulation_steps": row["grad_accum"]}
    out.update(knob_sft_args(values))
    return out


def _curve_gap(a: dict, b: dict) -> tuple[float, int | None]:
    """Largest relative difference of two loss curves over the steps both measured, and where."""
    worst, at = 0.0, None
    for step in sorted(set(a) & set(b)):
        x, y = a[step], b[step]
        if not (math.isfinite(x) and math.isfinite(y)):
            d = 0.0 if (x == y or (math.isnan(x) and math.isnan(y))) else math.inf
        else:
            d = abs(x - y) / max(abs(x), abs(y), 1e-8)
        if at is None or d > worst:
            worst, at = d, step
    return worst, at


def _add_loss_check(rows: list[dict]) -> None:
    """Same seed and data order: every trial of one effective batch should follow the same loss
    curve, compared over every step both measured (not one step, and not against a median,
    which two trials that disagree would both sit next to).

    Splits at the same settings are compared with each other: a split is flagged when it
    disagrees with more than half of the others (with two splits, a disagreement flags both).
    A trial that moves a setting from its default (``--vary``) is compared with the trials at
    the defaults (its own split's first): if it departs from them, the setting changed what
    training computes."""
    by_group: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("loss_curve"):
            by_group.setdefault((r["machine"], r["effective_batch"], r["world_size"]), []).append(r)
    for group in by_group.values():
        tol = max(LOSS_TOLERANCE.get(_mode(x.get("precision_used")), 0.01) for x in group)
        same: dict[tuple, list[dict]] = {}
        for r in group:
            same.setdefault(tuple(sorted((r.get("varied") or {}).items(), key=str)), []).append(r)
        for peers in same.values():
            _majority_check(peers, tol)
        reference = [r for r in group if _at_defaults(r)]
        for r in group:
            if _at_defaults(r) or not reference:
                continue
            own = [x for x in reference if x["split"] == r["split"]] or reference
            ref = min(own, key=lambda x: _curve_gap(r["loss_curve"], x["loss_curve"])[0])
            worst, at = _curve_gap(r["loss_curve"], ref["loss_curve"])
            if at is None:
                continue
            r["loss_drift_pct"] = 100.0 * worst if math.isfinite(worst) else None
            if worst > tol:
                r["loss_ok"] = False
                r["loss_note"] = (f"loss differs from {ref['trial']}'s by "
                                  + (f"{100 * worst:.2f}%" if math.isfinite(worst) else "a non-finite value")
                                  + f" at step {at} (rounding allows {100 * tol:g}%)")
            else:
                r.setdefault("loss_ok", True)


def _at_defaults(row: dict) -> bool:
    return all(v == KNOB_DEFAULTS.get(k) for k, v in (row.get("varied") or {}).items())


def _majority_check(group: list[dict], tol: float) -> None:
    """Flag the trials (of one setting) whose loss curve disagrees with most of the others'."""
    if len(group) < 2:
        return
    gaps = {(i, j): _curve_gap(a["loss_curve"], b["loss_curve"])
            for i, a in enumerate(group) for j, b in enumerate(group) if i != j}
    gaps = {k: v for k, v in gaps.items() if v[1] is not None}  # pairs with common steps
    outlier = {}
    for i in range(len(group)):
        mine = [(j, g) for (a, j), g in gaps.items() if a == i]
        if mine:
            outlier[i] = sum(1 for _j, (d, _at) in mine if d > tol) * 2 > len(mine)
    for i, r in enumerate(group):
        if i not in outlier:
            continue
        refs = [(j, g) for (a, j), g in gaps.items() if a == i and not outlier.get(j)] or \
               [(j, g) for (a, j), g in gaps.items() if a == i]
        j, (worst, at) = max(refs, key=lambda x: x[1][0])
        r["loss_drift_pct"] = 100.0 * worst if math.isfinite(worst) else None
        r["loss_ok"] = not outlier[i]
        if outlier[i]:
            r["loss_note"] = (f"loss differs from {group[j]['trial']}'s by "
                              + (f"{100 * worst:.2f}%" if math.isfinite(worst) else "a non-finite value")
                              + f" at step {at} (rounding allows {100 * tol:g}%)")


#: what a run's result depends on besides its settings: a change between runs of one sweep
#: makes their times incomparable
_ENV_KEYS = ("host", "gpu_name", "driver", "cuda", "python", "torch", "transformers", "trl", "peft", "accelerate",
             "cpu_count")


def _add_environment_changes(rows: list[dict], groups: dict[tuple, list[RunData]]) -> None:
    """Flag every row of an effective batch whose runs did not all see the same machine and
    libraries (a different host, GPU model, driver or library version)."""
    by_eb: dict[tuple, list[RunData]] = {}
    for (machine, eb, *_), runs in groups.items():
        by_eb.setdefault((machine, eb), []).extend(runs)
    for (machine, eb), runs in by_eb.items():
        seen: dict[str, set] = {}
        for r in runs:
            env = r.started.get("env") or {}
            for k in _ENV_KEYS:
                if k in env:
                    seen.setdefault(k, set()).add(str(env[k]))
        changed = [f"{k} ({', '.join(sorted(v))})" for k, v in seen.items() if len(v) > 1]
        if changed:
            for row in rows:
                if row["machine"] == machine and row["effective_batch"] == eb:
                    row["env_changed"] = "the machine changed between runs: " + "; ".join(changed)


def _mode(precision: Any) -> str:
    """``bf16 (weights float32)`` -> ``bf16``; half precision if either the mixed-precision mode
    or the weights are (bf16 weights under ``bf16=False`` still compute in bf16)."""
    text = precision if isinstance(precision, str) else "bf16"
    if "bfloat16" in text:
        return "bf16"
    if "float16" in text:
        return "fp16"
    return text.split(" ")[0]


def _precision_of(run: RunData) -> str | None:
    return run.settings.get("precision_used") or run.started.get("precision")


def apportion(measured: list[dict], step_ms: float) -> dict[str, float]:
    """Each phase's share of the measured time, applied to the median step: the phase columns
    then add up to the step column exactly, whatever the distribution (medians of phases do not
    add: on a loaded machine they were 7-12% off the median step)."""
    total = sum(s["wall_ms"] for s in measured)
    if total <= 0:
        return {ph: 0.0 for ph in FIELDS}
    return {ph: step_ms * sum(_phase(s, ph) for s in measured) / total for ph in FIELDS}


def _add_settings(row: dict, runs: list[RunData]) -> None:
    """The read-back settings as columns; runs of one split that ran with different settings
    are said to differ (they are not repeats of one thing)."""
    have = [r.settings for r in runs if r.settings]
    first = have[0] if have else {}
    for name in SETTING_COLUMNS:
        row[name] = first.get(name, row.get(name))  # a log without read-back keeps what it had
    row["settings"] = first
    differ = sorted({k for s in have[1:] for k in SETTING_COLUMNS if s.get(k) != first.get(k)})
    if differ:
        row["message"] = "; ".join(x for x in (row.get("message"), "runs differ in " + ", ".join(differ)) if x)


def _add_work(row: dict, runs: list[RunData], measured: list[dict], peak_override: float | None = None) -> None:
    """The work each optimizer step did (:mod:`tracetui.flops`: model FLOPs from the model's linear
    layers and the tokens it really processed, padding included; hardware FLOPs with
    checkpointing's recomputation), the FLOP/s achieved at the median step, and MFU against the
    device's dense peak for the precision that ran (``peak_override``, ``--peak-tflops``, first)."""
    if not measured or not row.get("step_ms_median"):
        return
    cfg = runs[0].started.get("config") or {}
    profile = next((p for p in (Profile.from_dict(r.settings.get("model_work")) for r in runs) if p), None)
    if profile is None and cfg.get("model") in PRESETS:
        # a log from before the layers were read back: a preset's configuration says the same
        profile = profile_of_config(PRESETS[cfg["model"]][0], cfg.get("lora_r"), cfg.get("lora_targets"))
    if profile is None:
        row["mfu_note"] = "no FLOPs: the model's layers were not recorded (a model tracetui cannot read)"
        return
    ckpt = row.get("activation_checkpointing")
    ckpt = bool(cfg.get("activation_checkpointing") if ckpt is None else ckpt)
    works, padded, real = [], 0, 0
    for s in measured:
        shapes = s.get("micro_shapes") or _full_rows(s, row, cfg)
        if not shapes:
            continue
        w = step_work(profile, [tuple(x) for x in shapes], checkpointing=ckpt, head_tokens=s.get("scored_tokens"),
                      pairs=s.get("token_pairs"))
        works.append(w)
        padded += w.tokens
        real += s.get("tokens") or w.tokens
    if not works:
        row["mfu_note"] = "no FLOPs: the steps did not record the shapes of their micro-batches"
        return
    row["tflop_per_step"] = median([w.model for w in works]) / 1e12
    row["hw_tflop_per_step"] = median([w.hardware for w in works]) / 1e12
    row["padding_pct"] = max(0.0, 100.0 * (1 - real / padded)) if padded else None
    row["tflops"] = row["tflop_per_step"] / (row["step_ms_median"] / 1000.0)
    env = runs[0].started.get("env") or {}
    mode = _mode(row.get("precision_used"))
    if mode == "fp32" and (row.get("settings") or {}).get("tf32"):
        mode = "tf32"
    override = peak_override or cfg.get("peak_tflops")
    if override:
        peak, which = float(override), "--peak-tflops"
    else:
        peak, which = peak_tflops(env.get("gpu_name") if env.get("device", "cuda") != "cpu" else None, mode)
    row["peak_tflops"] = peak
    row["mfu_pct"] = 100.0 * row["tflops"] / peak if peak else None
    pad = row["padding_pct"]
    row["mfu_note"] = ((f"against the {which} peak, {peak:g} TFLOP/s" if peak else which)
                       + (f"; {pad:.0f}% of the positions processed were padding (counted as work)"
                          if pad is not None and pad >= 0.5 else ""))


def _full_rows(step: dict, row: dict, cfg: dict) -> list[list[int]] | None:
    """A step's micro-batch shapes where a log from before they were recorded implies them: every
    row full (``--seq-len`` tokens each, as the built-in ``synthetic`` data has them)."""
    seq, mb, ga = cfg.get("seq_len"), row["micro_batch"], row["grad_accum"]
    if seq and step.get("samples") == mb * ga and step.get("tokens") == mb * ga * seq:
        return [[mb, seq]] * ga
    return None


def _add_quiet(row: dict, runs: list[RunData]) -> None:
    """How quiet the machine was for each run of this split, and why a run counts as busy."""
    busy, others = [], []
    for r in runs:
        given = r.finished.get("quiet")
        picture = dict(given) if isinstance(given, dict) else {}
        picture.update(gpu_picture(_window_gpu(r, r.measured())))
        why = judge(picture)
        if why:
            busy.append(f"{r.trial.label(SHORT, repeat_mark(r.run_id))}: {why}")
        if isinstance(picture.get("other_cpu_cores"), (int, float)):
            others.append(picture["other_cpu_cores"])
    row["other_cpu_cores"] = max(others) if others else None
    row["busy"] = "; ".join(busy) or None


def diagnose(row: dict, rows: list[dict]) -> tuple[str, str]:
    """Label what bounds a trial, from measurements, with the evidence for it.

    Every trial with a measured step gets a label (the monitor's help and the README say what
    each means). The labels have a clear margin between them, so that neighbouring splits whose
    readings differ by noise do not flip between opposites: GPU busy under 45% is host-bound,
    over 85% GPU-bound, in between mixed; on the CPU, how forward time per micro-batch grows with
    the micro-batch (the exponent of a fit over the trial and its neighbours in micro-batch, the
    smallest one included) is overhead-bound under 0.4, compute-bound over 0.7, mixed between."""
    if not row.get("step_ms_median"):
        return "", ""
    step = row["step_ms_median"]
    data_share = (row.get("data_ms") or 0.0) / step if step else 0.0
    util = row.get("gpu_util_mean")
    cap = row.get("memory_limit_gib") or row.get("mem_total_gib")
    peak = row.get("peak_mem_gib")
    # How forward time per micro-batch grows with the micro-batch: fitted in log-log over this
    # trial and its neighbours (same machine and varied settings), so one noisy reading moves
    # the exponent of three trials a little rather than one label across a threshold.
    varied = row.get("varied") or {}
    peers = sorted((r for r in rows if r["machine"] == row["machine"] and (r.get("varied") or {}) == varied
                    and (r.get("forward_ms_per_micro") or 0) > 0), key=lambda r: r["micro_batch"])
    sizes = sorted({r["micro_batch"] for r in peers})
    scaling = None
    if len(sizes) > 1 and row["micro_batch"] in sizes:
        i = sizes.index(row["micro_batch"])
        near = set(sizes[max(0, i - 1): i + 2])
        pts = [(math.log(r["micro_batch"]), math.log(r["forward_ms_per_micro"])) for r in peers
               if r["micro_batch"] in near]
        mx = sum(x for x, _ in pts) / len(pts)
        my = sum(y for _, y in pts) / len(pts)
        sxx = sum((x - mx) ** 2 for x, _ in pts)
        if sxx > 0:
            slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
            small = peers[0]
            growth = row["forward_ms_per_micro"] / small["forward_ms_per_micro"]
            scaling = (slope, growth, row["micro_batch"] / small["micro_batch"], small["micro_batch"])
    if peak is not None and cap and peak / cap > 0.9:
        return "memory-limited", f"peak {peak:.1f} of {_gib(cap)} GiB"
    if data_share > 0.3:
        return "input-bound", f"data fetch {100 * data_share:.0f}% of the step"

    def rows_ev() -> str:
        slope, growth, ratio, small = scaling
        if ratio > 1:
            return f"forward x{growth:.1f} for x{ratio:.0f} rows vs micro-batch {small} (exponent {slope:.2f})"
        return f"forward time per micro-batch grows as rows^{slope:.2f} from here"

    if util is not None:
        ev = f"GPU busy {util:.0f}%"
        if scaling is not None and scaling[2] > 1:
            ev += f"; forward x{scaling[1]:.1f} for x{scaling[2]:.0f} rows"
        if util < 45:
            return "host-bound", ev
        if util > 85:
            return "GPU-bound", ev
        return "mixed", ev
    if scaling is not None:
        if scaling[0] < 0.4:
            return "overhead-bound", rows_ev()
        if scaling[0] > 0.7:
            return "compute-bound", rows_ev()
        return "mixed", rows_ev()
    return "undetermined", "no GPU samples and one micro-batch size: nothing to compare"


def _gib(x: float) -> str:
    """A memory size as people write it: 140, 80, 24, 4.25."""
    return f"{x:.0f}" if x >= 20 or float(x).is_integer() else f"{x:.3g}"


def held_back(group: list[dict], allow_busy: bool = False) -> str | None:
    """Why no ranking may be claimed for a group of splits (one effective batch), or None.
    ``allow_busy``: a busy machine holds nothing back (:func:`busy_mark` says so instead)."""
    few = [r for r in group if r.get("too_few_steps")]
    if few:
        r = few[0]
        return (f"too few steps for a verdict ({r['trial']}: {r['steps_measured']} measured, "
                f"{MIN_INTERVAL_STEPS} needed for an interval)")
    busy = [r for r in group if r.get("busy")]
    if busy and not allow_busy:
        return f"held back: the machine was busy ({busy[0]['busy']}); measure again on a quiet machine"
    changed = [r for r in group if r.get("env_changed")]
    if changed:
        return f"held back: {changed[0]['env_changed']}"
    return None


def busy_mark(group: list[dict]) -> str:
    """The words every answer given under ``--allow-busy`` carries for a group measured on a
    busy machine ("" when it was quiet)."""
    busy = [r for r in group if r.get("busy")]
    return f" [measured on a busy machine: {busy[0]['busy']}]" if busy else ""


def scope_note(rows: list[dict]) -> str:
    """What the intervals cover: with one run per split, only step-to-step noise."""
    timed = [r for r in rows if r.get("step_ms_median")]
    if timed and all(r.get("ci_scope") == "steps" for r in timed):
        if any((r.get("runs") or 1) > 1 for r in timed):
            return ("intervals cover step noise only: the runs were too short to measure how fresh processes "
                    "differ (more --steps)")
        return "one run per split: intervals cover step noise only, not how fresh processes differ (--repeats 2+)"
    return ""


@dataclass(frozen=True)
class Policy:
    """What the user allowed the answer to be (``--allow-result-changes``, ``--allow-busy``):
    one value, so that the verdict, the recommendation and every output that carries them agree."""

    allow_result_changes: bool = False
    allow_busy: bool = False

    @classmethod
    def of(cls, obj) -> "Policy":
        """From a config or parsed flags (whichever attributes they have)."""
        return cls(bool(getattr(obj, "allow_result_changes", False)), bool(getattr(obj, "allow_busy", False)))


def verdict(rows: list[dict], policy: Policy = Policy()) -> str:
    """The one-line answer, per effective batch: which split is fastest and by how much."""
    lines = []
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("step_ms_median") and r["status"] not in RUN_FAILED_KINDS:  # a failed split is not ranked
            groups.setdefault((r["machine"], r["effective_batch"], r["world_size"]), []).append(r)
    multi_machine = len({k[0] for k in groups}) > 1
    for (machine, eb, _ws), group in groups.items():
        where = f" on {machine}" if multi_machine else ""
        fastest = min(group, key=lambda r: r["step_ms_median"])
        slowest = max(group, key=lambda r: r["step_ms_median"])
        mem = ""
        if fastest.get("peak_mem_gib") is not None:
            cap = fastest.get("memory_limit_gib") or fastest.get("mem_total_gib")
            mem = f"; peak memory {fastest['peak_mem_gib']:.1f}" + (f" of {_gib(cap)} GiB" if cap else " GiB")
        busy = busy_mark(group) if policy.allow_busy else ""
        if len(group) == 1:
            lines.append(f"{fastest['trial']}: {fastest['step_ms_median']:.1f} ms/step at effective batch {eb}{where}{mem}{busy}")
            continue
        why = held_back(group, policy.allow_busy)
        if why:
            lines.append(f"effective batch {eb}{where}: {why}")
            continue
        lo, hi = fastest.get("speedup_ci_low"), fastest.get("speedup_ci_high")
        how = fastest.get("comparison") or "unpaired"
        paired = how.startswith("paired")
        # "Faster" only when the speedup's interval excludes 1 (paired step by step, or at run
        # level), or, unpaired with one run per split, when the two median intervals are apart.
        if paired or (fastest.get("ci_scope") == "runs" and slowest.get("ci_scope") == "runs"):
            clear = lo is not None and lo > 1.0  # the speedup's interval excludes 1
        else:
            clear = (fastest.get("step_ms_ci_high") is not None and slowest.get("step_ms_ci_low") is not None
                     and fastest["step_ms_ci_high"] < slowest["step_ms_ci_low"])
        if clear:
            ci = f" (95% CI {lo:.2f}-{hi:.2f}x, {how})" if lo is not None else f" ({how})"
            lines.append(f"{fastest['trial']} is {fastest['speedup_vs_slowest']:.2f}x faster than {slowest['trial']}"
                         f"{ci} at effective batch {eb}{where}{mem}{busy}")
        else:
            why = ("the speedup's interval includes 1" if paired or fastest.get("ci_scope") == "runs"
                   else "intervals overlap")
            lines.append(f"no clear difference between {fastest['trial']} and {slowest['trial']} "
                         f"at effective batch {eb}{where} ({why}; {how}){busy}")
    return " | ".join(lines)


def recommendation(rows: list[dict], policy: Policy = Policy()) -> str:
    """The fastest trial that fits with at least 10% memory headroom and computes what the
    others do (unless ``allow_result_changes``), per effective batch, with the ``SFTConfig``
    arguments that run it."""
    return " | ".join(text for _best, text in _recommend(rows, policy))


def recommended_rows(rows: list[dict], policy: Policy = Policy()) -> list[dict]:
    """The rows :func:`recommendation` recommends (one per machine and effective batch)."""
    return [best for best, _text in _recommend(rows, policy) if best is not None]


def _overlap(a: dict, b: dict) -> bool:
    """Whether two trials are as fast within the intervals: compared step by step where their
    steps pair (the interval of the ratio holds 1), else their step-time intervals overlap (no
    interval: no claim either way)."""
    paired = (a.get("paired_vs") or {}).get(b["trial"])
    if paired is not None:
        return paired[1] <= 1.0 <= paired[2]
    lo_a, hi_a, lo_b, hi_b = (x.get(k) for x in (a, b) for k in ("step_ms_ci_low", "step_ms_ci_high"))
    if None in (lo_a, hi_a, lo_b, hi_b):
        return False
    return lo_b <= hi_a and lo_a <= hi_b


def limit_words(row: dict) -> str:
    """How far a trial is from the device's limit, for the recommendation: its MFU against the
    peak, or why there is none ("" on the CPU, which has no peak to speak of)."""
    mfu = row.get("mfu_pct")
    note = (row.get("mfu_note") or "").split(";")[0]
    if mfu is not None:
        share = f"{mfu:.1f}%" if mfu < 10 else f"{mfu:.0f}%"
        return f"; it runs at {share} MFU ({row['tflops']:.1f} TFLOP/s {note})"
    if row.get("tflops") is not None and note and not note.startswith("no GPU"):
        return f"; it runs at {row['tflops']:.1f} TFLOP/s ({note})"
    return ""


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _recommend(rows: list[dict], policy: Policy):
    """``(row or None, text)`` per machine and effective batch."""
    groups: dict[tuple, list[dict]] = {}
    unfinished = {(r["machine"], r["effective_batch"]) for r in rows
                  if r["status"] in ("queued", "warming up", "running")}
    for r in rows:
        if r.get("step_ms_median") and r["status"] == "ok":
            groups.setdefault((r["machine"], r["effective_batch"]), []).append(r)
    for (_m, eb), group in groups.items():
        if (_m, eb) in unfinished:
            continue  # no advice while splits of this effective batch are still running
        group = [r for r in group if r.get("loss_finite", True)]  # a run whose loss went NaN diverged
        if not group:
            yield None, f"effective batch {eb}: no recommendation (every split's loss went NaN or infinite)"
            continue
        why = held_back(group, policy.allow_busy)
        if why:
            yield None, f"effective batch {eb}: no recommendation ({why})"
            continue
        def fits(r):
            cap = r.get("memory_limit_gib") or r.get("mem_total_gib")
            return r.get("peak_mem_gib") is None or not cap or r["peak_mem_gib"] <= 0.9 * cap
        ok = [r for r in group if fits(r)]
        if not ok:
            yield None, f"effective batch {eb}: no split leaves 10% memory headroom"
            continue
        same = ok if policy.allow_result_changes else [r for r in ok if not r.get("changes_result")]
        if not same:
            yield None, (f"effective batch {eb}: every trial that fits changes the result "
                         "(--allow-result-changes to recommend one anyway)")
            continue
        best = min(same, key=lambda r: r["step_ms_median"])
        text = f"use {best['trial']} for effective batch {eb}"
        if best.get("changes_result"):
            text += f" (it changes the result: {best['changes_result']})"
        ties = [r["trial"] for r in same if r is not best and _overlap(best, r)]
        if ties:
            text += f" ({_and(ties)} {'is' if len(ties) == 1 else 'are'} as fast within the intervals)"
        faster = [r for r in ok if r["step_ms_median"] < best["step_ms_median"] and r.get("changes_result")]
        drift = [r for r in group if r.get("loss_ok") is False and not r.get("changes_result")]
        if drift:
            text += f" (but check: {drift[0]['trial']}'s {drift[0]['loss_note']})"
        if faster:
            f = min(faster, key=lambda r: r["step_ms_median"])
            text += (f" ({f['trial']} is faster but changes the result: {f['changes_result']}; "
                     "--allow-result-changes to recommend it)")
        if best.get("varied"):
            args = sft_arguments(best)
            keep = {"per_device_train_batch_size", "gradient_accumulation_steps", "gradient_checkpointing"}
            keep |= {k for name, v in best["varied"].items() for k in KNOBS[name].sft(v)}
            text += "; in SFTConfig: " + ", ".join(f"{k}={v!r}" for k, v in args.items() if k in keep)
            model = {k: v for name, v in best["varied"].items() for k, v in KNOBS[name].model(v).items()}
            if model:
                text += "; loading the model: " + ", ".join(f"{k}={v!r}" for k, v in model.items())
        proj = [r for r in sorted(group, key=lambda r: r["step_ms_median"]) if r.get("projected_s")]
        if proj:
            text += " (" + "; ".join(f"{r['trial']}: {fmt_duration(r['projected_s'])}" for r in proj) + ")"
        text += limit_words(best)
        if policy.allow_busy:
            text += busy_mark(group)
        yield best, text
