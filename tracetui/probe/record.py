"""A finished optimizer step's :class:`StepRecord`, from the marks the probe took at its phase edges.

The time up to an edge is charged to that edge's phase (:data:`PHASE_OF`), so phases tile the
step exactly and add up to its wall time.
"""

from __future__ import annotations

import math
from typing import Any

from ..core.phases import NAMES, PHASES
from ..events.schema import StepRecord
from .batch import trained_on
from .timing import Mark

#: phase (:mod:`tracetui.core.phases`) charged with the time *up to* an edge of this label
PHASE_OF = {
    "step_begin": "data", "fwd_start": "data", "fwd_end": "forward", "bwd_start": "other",
    "bwd_end": "backward", "sub_end": "other", "pre_opt": "optimizer", "opt_end": "optimizer",
    "end": "other",
}
assert set(PHASE_OF.values()) == set(NAMES), "every phase is charged by some edge, and no other"


def step_record(item: dict, clock: Any, *, rank: int, world: int, settings: dict,
                logged_loss: dict[int, float]) -> StepRecord:
    """The record of the pending step ``item`` (:meth:`tracetui.probe.callback.Probe.on_step_end`),
    once its marks have completed; releases the marks no later step needs. Whether it is warm-up
    was decided as it ended (``item["warmup"]``); the step that ended the warm-up says how many
    steps it took and why (``warmup_steps``, ``warmup_why``)."""
    marks: list[Mark] = item["marks"]
    phases = _phases(clock, marks)
    wall = clock.elapsed_ms(marks[0], marks[-1])
    host_ms = (marks[-1].host - marks[0].host) * 1000.0
    between: dict[str, list[float]] = {}
    for kind, a, b in item["between"]:
        between.setdefault(kind, []).append(max(0.0, clock.elapsed_ms(a, b)))
    # the last mark is the next step's start: kept (the step's end, or the last work after it)
    clock.release(marks[:-1] + [a for _, a, _ in item["between"]])
    extra: dict[str, Any] = {"t_end": item["t_end"]}
    if item.get("why"):
        extra["warmup_steps"] = item["step"] if item["warmup"] else item["step"] - 1
        extra["warmup_why"] = item["why"]
    if between:
        extra["between_ms"] = between
    if item["shapes"]:
        extra["micro_shapes"] = item["shapes"]
    loss, tokens, rows = trained_on(item, logged_loss)
    extra.update(rows)
    if loss is not None and not math.isfinite(loss):
        extra["loss_finite"] = False  # a log keeps it as null (JSON has no NaN): say so apart
    if world > 1 and not str((settings or {}).get("sharding_used", "")).startswith("fsdp"):
        extra.update(_sync_estimate(phases["backward"]))
    # ``other`` absorbs rounding so the phases add up to the wall time exactly.
    counted = sum(sum(v) if isinstance(v, list) else v for name, v in phases.items() if name != "other")
    phases["other"] = max(0.0, wall - counted)
    return StepRecord(
        step=item["step"], warmup=item["warmup"], wall_ms=wall, host_ms=host_ms,
        phases=phases, loss=loss, tokens=tokens,
        samples=item["samples"] or None, peak_mem_gib=item["peak"], rank=rank,
        extra=extra,
    )


def _phases(clock: Any, marks: list[Mark]) -> dict[str, Any]:
    """Each phase's time from consecutive marks: a list (one a micro-batch) or a sum."""
    phases: dict[str, Any] = {p.name: [] if p.per_micro else 0.0 for p in PHASES}
    for a, b in zip(marks, marks[1:]):
        ms = max(0.0, clock.elapsed_ms(a, b))
        phase = PHASE_OF.get(b.label, "other")
        if isinstance(phases[phase], list):
            phases[phase].append(ms)
        else:
            phases[phase] += ms
    return phases


def _sync_estimate(bwd: list[float]) -> dict[str, float]:
    """DDP: only the last micro-batch synchronises (the others run inside no_sync()): the
    difference to the others estimates the exposed all-reduce time. FSDP communicates in every
    micro-batch, so no micro-batch is free of it to compare against (not called there)."""
    if not bwd:
        return {}
    out = {"backward_sync_ms": bwd[-1], "backward_nosync_ms": sum(bwd[:-1])}
    if len(bwd) > 1:
        rest = sorted(bwd[:-1])
        out["comm_est_ms"] = max(0.0, bwd[-1] - rest[len(rest) // 2])
    return out
