"""The run list: every run, its trial and its status folded with its progress; its cursor picks
what the detail pane and the timeline show."""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.text import Text
from textual.widgets import DataTable

from ...analysis import Results, RunData
from ...core.columns import STATUS_STYLE
from ...events.schema import FAIL_KINDS
from ...core.text import clean, plain
from ...core.trial import Trial
from .base import cell, cut_words
from .names import RunLabel, fit_run_labels, multi_machine, run_label


def fmt_secs(s: float) -> str:
    return f"{s:.0f}s" if s < 120 else f"{s / 60:.0f}m"


#: the run list's one clock, said in the help: every time in a status cell counts up from the
#: run's start (its process asked for), before its first step and after
CLOCK = "the time in a run's status counts up from its start (steps done/all, then the run's age)"


def run_progress(run: RunData, total_steps: int | None) -> str:
    """``n/N``: the steps done of all."""
    done = max((s["step"] for s in run.steps if s.get("rank", 0) == 0), default=0)
    total = total_steps or (run.started.get("config") or {}).get("steps") or run.started.get("max_steps")
    return f"{done}/{total}" if total else str(done)


def run_age(run: RunData, live: bool) -> float:
    """Seconds since the run's start (the sweep asking for its process, else its start event):
    now while it runs live, else at its last step."""
    start = run.asked_at or run.started.get("t") or 0.0
    end = time.time() if live else max((s.get("t") or 0.0 for s in run.steps), default=0.0)
    return max(0.0, end - start) if start else 0.0


@dataclass
class Stage:
    """What a run said it was doing before its first step (a ``run_stage`` event)."""

    stage: str
    elapsed_s: float
    #: when it arrived (monotonic), so a live view can count on
    seen: float


def run_state(run: RunData | None, stage: Stage | None, live: bool, now: float) -> Text:
    """What the run list says of a run, in its status's colour: its progress while it steps
    (``5/20 1m``: steps done of all, the run's age), what it is doing before its first step
    (``building the model 41s``), why it failed (``oom: out of memory ...``), else its status
    (``queued``, ``ok 20/20``)."""
    status = run.status if run is not None else "queued"
    style = STATUS_STYLE.get(status, "")
    if run is not None and status in FAIL_KINDS:
        return Text(f"{status}: {run.message or 'no reason given'}", style="red")
    if run is not None and run.steps:
        done = run_progress(run, None)
        return Text(f"ok {done}" if status == "ok" else f"{done} {fmt_secs(run_age(run, live))}", style=style)
    if stage is not None and status in ("queued", "warming up"):
        secs = stage.elapsed_s + (now - stage.seen if live else 0.0)
        return Text(f"{stage.stage} {fmt_secs(secs)}", style="yellow")
    if run is not None and status == "warming up" and live:
        return Text(f"to step 1 {fmt_secs(run_age(run, live))}",
                    style=style)
    return Text(status, style=style)


#: the run list's status column is never narrower than this (``5/20 1m``)
MIN_STATUS = 7


class RunList(DataTable):
    """Every run: its trial, and its status folded with its progress (:func:`run_state`); two
    columns, so that at 80 columns the trial keeps the room that tells trials apart. The cursor
    picks the trial the detail pane and the timeline show."""

    #: set once the user moves the cursor; until then the panes follow the running split
    user_moved = False
    #: per run shown: (run id, its label, its status cell)
    entries: list[tuple[str, RunLabel, Text]] = []

    # every way a user moves the cursor says so: the keys' actions (:data:`USER_MOVES`), a click
    def on_click(self) -> None:
        self.user_moved = True

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = False
        self.add_column("trial", key="split", width=10)
        self.add_column("status", key="status", width=14)

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        """The cells for the width the list has: the trial column as wide as its labels
        (shortened as :func:`fit_run_labels` does where they would leave the status less than
        :data:`MIN_STATUS`), the status the rest."""
        inner = (self.size.width or 30) - 4 - self.styles.scrollbar_size_vertical  # cell padding
        room = max(5, inner - MIN_STATUS)
        header, names = fit_run_labels([label for _, label, _ in self.entries], room)
        label = min(room, max([len(header)] + [len(n) for n in names]))
        widths = {"split": label, "status": max(MIN_STATUS, inner - label)}
        for key, w in widths.items():
            col = self.columns.get(key)  # type: ignore[arg-type]
            if col is not None and (col.width != w or col.auto_width):
                col.width, col.auto_width = w, False
                self._require_update_dimensions = True
        trial_col = self.columns.get("split")  # type: ignore[arg-type]
        if trial_col is not None and trial_col.label.plain != clean(header):
            trial_col.label = plain(header)
            self._require_update_dimensions = True
        for (rid, _, state), name in zip(self.entries, names):
            if rid in self.rows:
                self.update_cell(rid, "split", cell(name))
                self.update_cell(rid, "status", cell(cut_words(state, widths["status"])))
            else:
                self.add_row(cell(name), cell(cut_words(state, widths["status"])), key=rid)
        self.refresh()

    def update_from(self, results: Results, planned: list[tuple[str, Trial]],
                    stages: dict[str, Stage] | None = None, live: bool = False) -> None:
        """``planned``: (run_id, trial) of runs not started yet, shown as queued."""
        stages = stages or {}
        multi = multi_machine(results)
        rows = [(rid, run) for rid, run in results.runs.items()
                if run.started or run.status != "queued" or rid in stages]
        known = {rid for rid, _ in rows}
        plan = dict(planned)
        rows += [(rid, None) for rid, _ in planned if rid not in known]
        now = time.monotonic()
        self.entries = [(rid, run_label(rid, run, multi, plan.get(rid)), run_state(run, stages.get(rid), live, now))
                        for rid, run in rows]
        self._draw()


#: the run list's key actions that move its cursor: each also marks the move as the user's
USER_MOVES = ("cursor_up", "cursor_down", "page_up", "page_down", "scroll_top", "scroll_bottom")


def _users_move(name: str):
    def action(self: RunList) -> None:
        self.user_moved = True
        getattr(DataTable, f"action_{name}")(self)

    action.__name__ = f"action_{name}"
    return action


for _name in USER_MOVES:
    setattr(RunList, f"action_{_name}", _users_move(_name))
