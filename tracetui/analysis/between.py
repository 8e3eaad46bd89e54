"""The trainer's work between optimizer steps (evaluation, saving a checkpoint, logging:
:data:`tracetui.core.phases.BETWEEN`) in a summary row: how many each run did and what they took,
none of it in a step, and the part of a projected run they take where the real run does them;
and a run the trainer ended before its planned steps, with its reason."""

from __future__ import annotations

import math
from typing import Any

from ..core.phases import BETWEEN
from .runs import RunData


def occurrences(entry: dict | None, steps: int) -> int | None:
    """How many times a run of ``steps`` optimizer steps does one kind of work whose schedule
    is ``entry`` (:func:`tracetui.probe.schedule.between_schedule`: as the trainer's
    ``DefaultFlowCallback`` decides it), or None where the schedule says nothing."""
    if not isinstance(entry, dict) or not isinstance(entry.get("every"), int) or steps <= 0:
        return None
    every = entry["every"]
    if every <= 0:
        return 0
    if entry.get("epoch"):
        return math.ceil(steps / every)  # each epoch's end, the last one's too
    ratio = entry.get("ratio")
    if isinstance(ratio, (int, float)) and 0 < ratio < 1:
        every = max(1, math.ceil(steps * ratio))  # a share of the run's own steps
    delay = max(1, int(entry.get("delay") or 0))
    n = steps // every - (delay - 1) // every
    if entry.get("at_end") and steps % every:
        n += 1
    if entry.get("first") and every > 1:
        n += 1
    return max(0, n)


def _fmt_s(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"


def add_between(row: dict, runs: list[RunData], planned: int) -> None:
    """Fill ``row``'s columns of the work between steps: per run (the mean over the row's runs)
    how many of each kind and their seconds; where the run said when its trainer does them
    (``between_every`` of its read-back settings) and a projected length is known (``planned``
    steps), the seconds they add to that run (``projected_between_s``, counted in
    ``projected_s``) and what was counted (``projected_note``)."""
    seen = [r for r in runs if r.between]
    if not seen:
        return  # no run said (a log from before they were timed apart)
    pooled: dict[str, list[float]] = {}
    for b in BETWEEN:
        counts = [r.between.get(b.name, [0, 0.0]) for r in runs]
        row[b.count_field] = sum(c for c, _ in counts) / len(runs)
        row[b.seconds_field] = sum(ms for _, ms in counts) / len(runs) / 1000.0
        total = sum(c for c, _ in counts)
        if total:
            pooled[b.name] = [total, sum(ms for _, ms in counts)]
    schedule = next((r.settings.get("between_every") for r in runs if isinstance(r.settings.get("between_every"), dict)),
                    None)
    if not planned or schedule is None:
        return
    seconds, counted, missing = 0.0, [], []
    for b in BETWEEN:
        entry = schedule.get(b.name)
        n = occurrences(entry, planned)
        done = pooled.get(b.name)
        if n is None and done:
            # decided as it goes (save_strategy="best"): as often as the measured runs did it
            trained = [r.finished.get("steps") or (r.measured_count() + r.warmup_seen) for r in runs]
            n = round(done[0] / max(1, sum(trained)) * planned)
        if not n:
            continue
        if not done:
            missing.append(f"{n} {b.one if n == 1 else b.many}")
            continue
        each = done[1] / done[0] / 1000.0
        seconds += n * each
        counted.append(f"{n} {b.one if n == 1 else b.many} at {_fmt_s(each)} each")
    row["projected_between_s"] = seconds
    notes = []
    if counted:
        notes.append("with " + ", ".join(counted))
    if missing:
        notes.append("leaves out " + ", ".join(missing) + " (none ran in the measured steps)")
    row["projected_note"] = "; ".join(notes) or None


def between_words(row: dict) -> str:
    """The work between steps one run of ``row`` did, in words (``5 evaluations 2.61 s, 5 logs
    0.01 s``); "" where it did no evaluation and saved no checkpoint (logging alone is said in
    the columns only: every trainer logs)."""
    if not any(row.get(b.count_field) for b in BETWEEN if b.name != "log"):
        return ""
    parts = []
    for b in BETWEEN:
        n = row.get(b.count_field)
        if n:
            count = f"{n:g}" if float(n).is_integer() else f"{n:.1f}"
            parts.append(f"{count} {b.one if n == 1 else b.many} {_fmt_s(row.get(b.seconds_field) or 0.0)}")
    return ", ".join(parts)


def stop_words(row: dict) -> str:
    """Why the trainer ended ``row``'s runs before their planned steps ("" where it did not)."""
    return str(row.get("trainer_stop") or "")


def closing_notes(rows: list[dict]) -> list[str]:
    """The closing lines' notes of the work between steps and of runs the trainer stopped early:
    one per row that has either."""
    out = []
    for r in rows:
        stop = stop_words(r)
        if stop:
            out.append(f"{r['trial']}: {stop}")
        words = between_words(r)
        if words:
            out.append(f"{r['trial']}: between its steps, per run, {words}: timed apart, in no step")
    return out


def row_stop(runs: list[RunData]) -> Any:
    """The trainer's reason for ending the row's runs early (their ``trainer_stop``), or None."""
    reasons = list(dict.fromkeys(str(r.finished["trainer_stop"]) for r in runs if r.finished.get("trainer_stop")))
    return "; ".join(reasons) or None
