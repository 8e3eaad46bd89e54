"""Speedups with intervals: each split against the slowest of its effective batch, step by step
where their steps pair (:mod:`.pairing`), else at run level (the spread between fresh
processes) or from the bootstrap of two medians."""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Callable, Iterable

from ..events.schema import RUN_FAILED_KINDS
from .pairing import StepKey, paired_log_ratios
from .runs import Results, RunData
from .stats import (bootstrap_medians, enough_for_interval, median, quantile, ratio_ci, simultaneous_t, t975,
                    t_quantile)


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

    Steps inside one process are close, fresh processes of one split need not be (each process
    settles on its own level: where its memory lands, which kernels it picks, the clocks it gets).
    An interval from one run's steps says nothing about that; this spread does. Pooled across splits because two
    runs of one split alone cannot estimate it (a t interval on 1 degree of freedom is 13 times
    wider than its standard error), and runs of one sweep share the machine that causes it."""
    return _pooled((machine, [math.log(m) for m in meds if m > 0]) for (machine, *_), meds in medians.items())


def _pooled(levels: Iterable[tuple[str, list[float]]]) -> dict[str, tuple[float, int]]:
    """Per machine: the variance of each split's run levels (``(machine, levels)`` per split)
    about their mean, pooled over the splits with two or more, and its degrees of freedom."""
    sums: dict[str, list[float]] = {}
    for machine, xs in levels:
        if len(xs) > 1:
            mu = sum(xs) / len(xs)
            acc = sums.setdefault(machine, [0.0, 0])
            acc[0] += sum((x - mu) ** 2 for x in xs)
            acc[1] += len(xs) - 1
    # one rerun (1 degree of freedom, t = 12.7) is not yet a spread to judge by
    return {m: (ss / df, int(df)) for m, (ss, df) in sums.items() if df >= MIN_RUN_DF}


@dataclass
class RunLevel:
    """A split's level across its fresh processes: the mean log of its runs' median steps
    (``mu``, over ``k`` runs) and its machine's pooled spread between runs (``var``, on ``df``
    degrees of freedom: :func:`between_run_spread`). The run-level interval of its
    median step, and of its speedups (:func:`add_speedups`), come from it."""

    mu: float
    k: int
    var: float
    df: int

    def interval(self) -> tuple[float, float, float]:
        """The median step (ms) a typical fresh process takes, with its 95% t interval."""
        half = t975(self.df) * math.sqrt(self.var / self.k)
        return math.exp(self.mu), math.exp(self.mu - half), math.exp(self.mu + half)


def cached_boots(results: "Results", key: tuple, per_run: list[list[float]]) -> list[float]:
    """Bootstrap medians of a group, cached until the group gains steps (live redraws)."""
    size = tuple(len(w) for w in per_run)
    cached = results.boot_cache.get(key)
    if cached is not None and cached[0] == size:
        return cached[1]
    seed = zlib.crc32(repr(key).encode())  # stable across processes: same data, same interval
    boots = bootstrap_medians([w for run in per_run for w in run], seed=seed)
    results.boot_cache[key] = (size, boots)
    return boots


def add_speedups(rows: list[dict], boots_of: dict[tuple, list[float]], results: "Results | None" = None,
                 steps_of: dict[tuple, list[list[StepKey]]] | None = None,
                 spread: dict[str, tuple[float, int]] | None = None, levels: dict[tuple, RunLevel] | None = None) -> None:
    """Speedup of each split against the slowest of its group, with an interval. Where the two
    splits' steps trained on the same rows, step by step (:func:`paired_compare`); otherwise at run
    level a t interval of the log ratio, simultaneous over the group's pairs, or with one run per
    split a bootstrap of the two medians; ``comparison`` says which, and why not paired. Failed
    splits are left out of the ranking. ``boots_of``, ``steps_of``, ``levels``: each split's bootstrap
    medians, measured steps and run level (:class:`RunLevel`), by :func:`split_key`."""
    levels = levels or {}
    by_group: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("step_ms_median") and r["status"] not in RUN_FAILED_KINDS:
            by_group.setdefault((r["machine"], r["effective_batch"], r["world_size"]), []).append(r)
    steps_of = steps_of or {}
    paired_spread = paired_run_spread(steps_of)
    for group in by_group.values():
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
        slowest = slowest_of(group)
        sw = boots_of.get(split_key(slowest))
        for r in group:
            r["speedup_vs_slowest"] = slowest["step_ms_median"] / r["step_ms_median"]
            r["slowest"] = r is slowest
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
            mine = boots_of.get(split_key(r))
            level, slow_level = levels.get(split_key(r)), levels.get(split_key(slowest))
            if level is not None and slow_level is not None:  # run level: t interval of the log ratio
                half = simultaneous_t(level.df, len(group)) * math.sqrt(level.var * (1 / level.k + 1 / slow_level.k))
                log_ratio = slow_level.mu - level.mu
                r["speedup_ci_low"], r["speedup_ci_high"] = math.exp(log_ratio - half), math.exp(log_ratio + half)
            elif sw is not None and mine is not None:  # no interval from too few steps
                lo, hi = ratio_ci(sw, mine)
                r["speedup_ci_low"], r["speedup_ci_high"] = lo, hi
        fastest = min(group, key=faster_first(group))
        for r in group:
            r["fastest"] = r is fastest


def slowest_of(group: list[dict]) -> dict:
    """The split the group's speedups are measured against: one that no other split of the group
    is slower than by the estimate the table gives (the paired one, ``paired_vs``, where their
    steps pair, else the ratio of the medians), the slowest median among those. A paired estimate
    can rank two nearly tied splits the other way round from their medians (a split with the lower
    median slower on most of the steps both trained): measured against the slowest median, the
    table would call that split less than 1x "faster" than the slowest. Where the estimates go
    round in a circle (each within the other's noise), no split qualifies: the slowest median."""
    def ratio(r: dict, of: dict) -> float:  # how much faster r is than ``of``
        paired = r["paired_vs"].get(of["trial"])
        return paired[0] if paired else of["step_ms_median"] / r["step_ms_median"]

    by_median = sorted(group, key=lambda r: r["step_ms_median"], reverse=True)
    return next((s for s in by_median if all(ratio(r, s) >= 1.0 for r in group if r is not s)), by_median[0])


def faster_first(rows: list[dict]) -> Callable[[dict], tuple]:
    """The sort key that puts the faster of ``rows`` first: by the speedups' estimate (the
    greatest ``speedup_vs_slowest``, paired where the steps pair) where all were measured against
    one reference (one group of :func:`add_speedups`), then by the median step."""
    one_group = len({r.get("world_size") for r in rows}) == 1 and all(r.get("speedup_vs_slowest") for r in rows)
    return lambda r: (-r["speedup_vs_slowest"] if one_group else 0.0, r["step_ms_median"])


def ends_of(group: list[dict]) -> tuple[dict, dict]:
    """The fastest split of a group and the one its speedups were measured against, as
    :func:`add_speedups` marked them (``fastest``, ``slowest``: :func:`slowest_of`); in rows that
    never had speedups, the shortest and the longest median."""
    fastest = next((r for r in group if r.get("fastest")), None) or min(group, key=lambda r: r["step_ms_median"])
    slowest = next((r for r in group if r.get("slowest")), None) or max(group, key=lambda r: r["step_ms_median"])
    return fastest, slowest


def paired_run_spread(steps_of: dict[tuple, list[list[StepKey]]]) -> dict[str, tuple[float, int]]:
    """Per machine: how much fresh processes of one split differ once the rows are paired out, and
    its degrees of freedom (as :func:`between_run_spread`, pooled over every split with two or
    more runs whose steps carry fingerprints that agree). A run's level is the median, over the
    steps it shares with the split's other runs, of its log step time less their mean there."""
    found: list[tuple[str, list[float]]] = []
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
        found.append((machine, levels))
    return _pooled(found)


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
    fast_runs, slow_runs = steps_of.get(split_key(fast)), steps_of.get(split_key(slow))
    if not fast_runs or not slow_runs:
        return None, "no measured steps"
    d, why = paired_log_ratios([k for run in fast_runs for k in run], [k for run in slow_runs for k in run])
    if not d:
        return None, why
    alpha = 0.05 / pairs
    est = median(d)
    key = ("paired", split_key(fast), split_key(slow))
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


def split_key(row: dict) -> tuple:
    """A row's split, as :func:`tracetui.analysis.summary.summarise` keys its runs: machine and trial."""
    return (row["machine"], row["effective_batch"], row["micro_batch"], row["grad_accum"], row["world_size"],
            tuple(sorted(row.get("varied", {}).items())))
