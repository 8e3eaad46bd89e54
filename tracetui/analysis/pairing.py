"""Pairing two splits' steps by the rows they trained on: optimizer step k of every split of one
effective batch trains on the same rows (same data, seed and effective batch), so a
step-by-step ratio leaves the rows' lengths out of a comparison. Used by the stopping rule,
the search's planner and the summary's speedups."""

from __future__ import annotations

import math
from typing import Iterable

from .stats import MIN_INTERVAL_STEPS

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
    step records (:func:`tracetui.probe.batch.fingerprint`) says whether it did. Step times
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
