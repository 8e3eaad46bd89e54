"""Whether the trials compute the same thing: their loss curves compared (same seed and data
order, one effective batch), and ``changes_result`` for a trial that does not."""

from __future__ import annotations

import math
from typing import Any, Callable

from ..core.config import KNOB_DEFAULTS
from ..core.knobs import fmt, result_changing
from .compare import split_key
from .runs import RunData

#: two splits of one effective batch whose loss curves differ anywhere by more than this
#: (relative) are flagged, per precision the runs really trained in: above what a split's
#: rounding moves the loss in that precision (docs/architecture.md gives the agreement seen),
#: below what a gradient-accumulation normalisation bug moves it (whole factors with equal rows,
#: several percent with ragged rows).
LOSS_TOLERANCE = {"fp32": 0.001, "bf16": 0.01, "fp16": 0.01}


def loss_curve(run: RunData) -> dict[int, float]:
    """Rank 0's loss per step; a loss that went NaN or infinite is null in a log (JSON has no
    NaN) and flagged apart, and comes back here as NaN."""
    return {s["step"]: (s["loss"] if s.get("loss") is not None else math.nan) for s in run.steps
            if (s.get("loss") is not None or s.get("loss_finite") is False) and s.get("rank", 0) == 0}


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


def add_loss_check(rows: list[dict], curves: dict[tuple, dict[int, float]]) -> None:
    """Same seed and data order: every trial of one effective batch should follow the same loss
    curve, compared over every step both measured (not one step, and not against a median,
    which two trials that disagree would both sit next to).

    Splits at the same settings are compared with each other: a split is flagged when it
    disagrees with more than half of the others (with two splits, a disagreement flags both).
    A trial that moves a setting from its default (``--vary``) is compared with the trials at
    the defaults (its own split's first): if it departs from them, the setting changed what
    training computes. ``curves``: each split's loss curve, by :func:`~.compare.split_key`."""
    def curve(row: dict) -> dict[int, float]:
        return curves.get(split_key(row)) or {}

    by_group: dict[tuple, list[dict]] = {}
    for r in rows:
        if curve(r):
            by_group.setdefault((r["machine"], r["effective_batch"], r["world_size"]), []).append(r)
    for group in by_group.values():
        tol = max(LOSS_TOLERANCE.get(precision_mode(x.get("precision_used")), 0.01) for x in group)
        same: dict[tuple, list[dict]] = {}
        for r in group:
            same.setdefault(tuple(sorted((r.get("varied") or {}).items(), key=str)), []).append(r)
        for peers in same.values():
            _majority_check(peers, tol, curve)
        reference = [r for r in group if _at_defaults(r)]
        for r in group:
            if _at_defaults(r) or not reference:
                continue
            own = [x for x in reference if x["split"] == r["split"]] or reference
            ref = min(own, key=lambda x: _curve_gap(curve(r), curve(x))[0])
            worst, at = _curve_gap(curve(r), curve(ref))
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


def _majority_check(group: list[dict], tol: float, curve: Callable[[dict], dict[int, float]]) -> None:
    """Flag the trials (of one setting) whose loss curve disagrees with most of the others'."""
    if len(group) < 2:
        return
    gaps = {(i, j): _curve_gap(curve(a), curve(b))
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


def precision_mode(precision: Any) -> str:
    """``bf16 (weights float32)`` -> ``bf16``; half precision if either the mixed-precision mode
    or the weights are (bf16 weights under ``bf16=False`` still compute in bf16)."""
    text = precision if isinstance(precision, str) else "bf16"
    if "bfloat16" in text:
        return "bf16"
    if "float16" in text:
        return "fp16"
    return text.split(" ")[0]


def add_result_changes(rows: list[dict]) -> None:
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
