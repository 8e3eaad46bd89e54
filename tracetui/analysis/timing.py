"""The time account: where each sweep's time went, from the command's start to its exit (its
steps against what lay before, between and after them, and the outputs written after it)."""

from __future__ import annotations

import time
from typing import Any

from .runs import Results, RunData


def time_spent(results: Results) -> list[dict]:
    """Where each sweep's time went, from its own start (the command's process start) to its
    end: its steps (warm-up included; ``steps_s`` their sum, ``stepping_s`` the wall time they
    covered, the same where one run steps at a time) against what lay before its first step (of
    which the fork server's library imports, the checks, the first run's start), between its
    runs, between the steps of one run, and after its last step. Those parts and
    ``stepping_s`` add up to ``command_s``. Where the command that ran the sweep marked its end
    (:func:`mark_exit`), the account runs to it: headless, its exit (``outputs_s``: the summary,
    the config and the closing lines after the sweep's end); in the monitor, its quit
    (``monitor_open_s``: the monitor open after the sweep's end until ``q``, and the outputs
    written then). A log read later without either ends with the sweep. Steps after the sweep's end (a run the monitor's
    ``r`` made again) are not the sweep's. One dict per sweep that said when it ran (``sweep``
    events), in its order; seconds."""
    out = []
    for sid, marks in results.sweep_times.items():
        runs = [r for r in results.runs.values() if r.run_id.split("/", 1)[0] == sid]
        out.append(_time_spent(sid, marks, runs))
    return out


#: the mark that ends a command's account (:func:`mark_exit`) -> its part after the sweep's end
END_MARKS = {"exit": "outputs_s", "quit": "monitor_open_s"}


def mark_exit(results: Results, sweep_id: str | None, mark: str = "exit") -> None:
    """Sweep ``sweep_id``'s command ends now: its account runs to here (:func:`time_spent`). Said
    by the command that ran the sweep, in its own process, once its outputs are written;
    ``mark``: ``exit`` headless, ``quit`` in the monitor (:data:`END_MARKS`)."""
    if sweep_id in results.sweep_times:
        results.sweep_times[sweep_id][mark] = time.time()


def end_mark(results: Results, sweep_id: str | None) -> tuple[str, float] | None:
    """The mark that ended sweep ``sweep_id``'s account, and when; None if none did."""
    return _ending(results.sweep_times.get(sweep_id, {}))


def _ending(marks: dict) -> tuple[str, float] | None:
    return next(((k, marks[k]) for k in END_MARKS if k in marks), None)


def step_span(s: dict) -> tuple[float, float]:
    """When a step event's step began and ended (host clock, unix seconds)."""
    end = s.get("t_end", s["t"])
    return end - s["wall_ms"] / 1000.0, end


def _time_spent(sid: str, marks: dict, runs: list[RunData]) -> dict:
    end = marks.get("ended")
    last = ending[1] if (ending := _ending(marks)) else end
    spans = sorted((b, e, s["wall_ms"] / 1000.0, bool(s.get("warmup")), r.run_id) for r in runs for s in r.steps
                   if s.get("rank", 0) == 0 for b, e in (step_span(s),) if end is None or e <= end + 0.5)
    # (a sweep started from Python, not by the command: from the earliest of its marks)
    start = marks.get("command") or min((v for k, v in marks.items() if k != "ended"), default=None)

    def secs(a: str, b: str) -> float | None:
        return round(marks[b] - marks[a], 2) if a in marks and b in marks else None

    got: dict[str, Any] = {"sweep": sid, "command_s": round(last - start, 2) if start and last else None,
                           "steps_s": round(sum(w for *_, w, _, _ in spans), 2),
                           "warmup_steps_s": round(sum(w for *_, w, warm, _ in spans if warm), 2),
                           "libraries_s": secs("server", "libraries"), "checks_s": secs("libraries", "checked")}
    for mark, key in END_MARKS.items():  # (a log of an earlier release, or read from Python, has neither)
        if mark in marks:
            got[key] = secs("ended", mark)
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
                       ("after_last_step_s", "after the last step"), ("outputs_s", "outputs and exit"),
                       ("monitor_open_s", "the monitor open after the sweep, to quit")):
        if spent.get(key) is not None and (spent[key] >= 0.05 or key == "between_runs_s"):
            parts.append(f"{words} {spent[key]:.1f} s")
    return "; ".join(parts)
