"""The monitor's panels, by screen area: the answer, the failures and the status line
(:mod:`.answer`), the run list (:mod:`.runlist`), the summary table (:mod:`.table`), the detail
pane (:mod:`.detail`), the timeline (:mod:`.timeline`) and the charts (:mod:`.charts`); how
trials and runs are named (:mod:`.names`) and what the panels are built on (:mod:`.base`).
Each takes the current :class:`~tracetui.analysis.Results` (and the summary rows) and redraws
itself; the app calls them at most a few times a second.

Rows and runs are read defensively (``row.get``): a row may carry a ``trial`` label (a split with
the values of varied settings) and ``varied`` settings; a run may report ``run_stage`` events
before its first step. Logs without them still show."""

from ...analysis import BOUNDS  # (what the detail pane and the help screen say of each bound label)
from .answer import NOTICE_STYLE, Failures, StatusLine, Verdict
from .base import MORE, Clipped, Pane, cell, clip_lines
from .charts import (GpuChart, GpuStatus, MemoryChart, MemoryPoints, PhaseChart, StepChart, ThroughputChart,
                     memory_points, phase_bars, phase_legend)
from .detail import DetailPane, start_words
from .names import RunLabel, fit_run_labels, multi_machine, row_label, row_name, row_of, run_name, short_machine
from .runlist import CLOCK, RunList, Stage, run_state
from .table import PRIORITY, SummaryTable, pick_columns
from .timeline import Lane, Timeline, draw_bar, median_step, step_segments

__all__ = [
    "BOUNDS", "MORE", "NOTICE_STYLE", "PRIORITY", "Clipped", "DetailPane", "Failures", "GpuChart", "GpuStatus", "Lane",
    "MemoryChart", "MemoryPoints", "Pane", "PhaseChart", "RunLabel", "RunList", "Stage", "StatusLine", "StepChart",
    "SummaryTable", "ThroughputChart", "Timeline", "Verdict", "cell", "clip_lines", "draw_bar", "fit_run_labels",
    "median_step", "memory_points", "multi_machine", "phase_bars", "phase_legend", "pick_columns", "row_label",
    "CLOCK", "row_name", "row_of", "run_name", "run_state", "short_machine", "start_words", "step_segments",
]
