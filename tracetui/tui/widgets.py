"""The monitor's panels. Each takes the current :class:`~tracetui.analysis.Results` (and the
summary rows) and redraws itself; the app calls them at most a few times a second.

Rows and runs are read defensively (``row.get``): a row may carry a ``trial`` label (a split with
the values of varied settings) and ``varied`` settings; a run may report ``run_stage`` events
before its first step. Logs without them still show."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from rich.cells import cell_len
from rich.text import Text
from textual.widget import Widget
from textual.widgets import DataTable, Static
from textual_plotext import PlotextPlot

from ..analysis import (PROBE_WHY, Policy, Results, RunData, median, recommendation, repeat_mark, scope_note, step_span,
                        verdict)
from ..columns import Cell, MONITOR, STATUS_STYLE, fmt, table_context
from ..knobs import SHORT
from ..phases import PHASES
from ..text import clean, plain, safe_text
from ..trial import Trial, format_value

FAILED = ("oom", "error", "crashed", "interrupted", "stalled", "unavailable", "skipped")
LIVE = ("queued", "warming up", "running")

#: what each bound label means, in words: the help screen, the detail pane and the README say
#: the same (the README's table is checked against this in the tests)
BOUNDS: dict[str, str] = {
    "host-bound": "GPU busy under 45% of the step: the GPU waits for the host (Python, kernel launches), "
                  "so a larger micro-batch costs little more and fewer, larger micro-batches win",
    "GPU-bound": "GPU busy over 85% of the step: more rows cost proportionally more time, "
                 "so a larger micro-batch gains little per row (the measured steps say how little)",
    "mixed": "between the two (GPU busy 45-85%, or on the CPU forward time growing neither flat nor in "
             "proportion with the rows): no single limit; the measured step times decide",
    "input-bound": "data fetch over 30% of the step: the data loader is the limit (more workers, "
                   "pinned memory, pre-tokenised data)",
    "memory-limited": "peak memory over 90% of the card (or --memory-limit): little headroom, "
                      "a larger micro-batch may not fit",
    "overhead-bound": "CPU: forward time per micro-batch grows far less than its rows "
                      "(exponent under 0.4): fixed per-call costs dominate, fewer larger micro-batches win",
    "compute-bound": "CPU: forward time grows nearly in proportion with the rows (exponent over 0.7): "
                     "arithmetic dominates, a larger micro-batch gains little per row (the measured "
                     "steps say how little)",
    "undetermined": "one micro-batch size measured and no GPU samples: nothing to compare against",
}


def phase_legend() -> Text:
    text = Text()
    for phase in PHASES:
        r, g, b = phase.rgb
        text.append("█", style=f"rgb({r},{g},{b})")
        text.append(f"{phase.short} ")
    text.append("(ms of the median step)", style="dim")
    return text

#: the step and GPU charts show this many of the latest points (plotting is per point)
STEP_WINDOW = 300
GPU_WINDOW = 600


# ---- labels -------------------------------------------------------------------------------------
def short_machine(name: str | None) -> str:
    """``NVIDIA H200`` -> ``H200``: enough to tell machines apart in a narrow column."""
    name = name or "CPU"
    for prefix in ("NVIDIA ", "GeForce ", "Tesla ", "AMD ", "Radeon "):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name.replace(" PCIe", "").replace(" SXM", "")[:14]


def row_name(row: dict) -> str:
    """A summary row's label: its trial (the split with varied settings), else its split."""
    return row.get("trial") or row["split"]


def row_label(row: dict, multi_machine: bool) -> str:
    name = row_name(row)
    return f"{short_machine(row['machine'])} {name}" if multi_machine else name


def run_varied(run: RunData) -> dict:
    s = run.started
    return s.get("varied") or s.get("settings") or {}


def row_of(run: RunData | None, rows: list[dict]) -> dict | None:
    """The summary row (trial) that ``run`` is one run of."""
    if run is None or not run.started:
        return None
    s = run.started
    ws = s.get("world_size", 1)
    eb = s.get("effective_batch") or s.get("micro_batch", 0) * s.get("grad_accum", 0) * ws
    found = [r for r in rows if r["machine"] == run.machine and r["micro_batch"] == s.get("micro_batch")
             and r["grad_accum"] == s.get("grad_accum") and r.get("world_size", 1) == ws
             and r["effective_batch"] == eb]
    varied = run_varied(run)
    exact = [r for r in found if all(varied.get(k) == v for k, v in (r.get("varied") or {}).items())]
    return (exact or found or [None])[0]


def group_of(row: dict, rows: list[dict]) -> list[dict]:
    """The trials ``row`` is compared with: same machine and effective batch."""
    return [r for r in rows if r["machine"] == row["machine"] and r["effective_batch"] == row["effective_batch"]]


def multi_machine(results: Results) -> bool:
    return len({r.machine for r in results.runs.values() if r.started}) > 1


def failures(results: Results) -> list[tuple[str, RunData]]:
    """Every run that failed, with its label: the failures panel and the headline."""
    multi = multi_machine(results)
    return [(run_name(rid, run, multi), run) for rid, run in results.runs.items() if run.status in FAILED]


def run_trial(run: RunData | None) -> Trial | None:
    """The trial a run measured, from its start event's fields (None before it started)."""
    return run.trial if run is not None and "micro_batch" in run.started else None


@dataclass(frozen=True)
class RunLabel:
    """How the monitor names a run: its trial as the table writes it, with the run's own marks
    beside the split (``H200 16x1#2@1 ckpt=off liger=on``: machine, repeat, GPU)."""

    #: the machine (replays of several), the split, which repeat, which GPU
    head: str
    trial: Trial | None = None

    def text(self) -> str:
        settings = self.trial.settings_label(SHORT) if self.trial else ""
        return f"{self.head} {settings}" if settings else self.head


def run_label(rid: str, run: RunData | None, multi: bool, planned: Trial | None = None) -> RunLabel:
    """A run's label (``planned``: the trial of a run not started yet)."""
    trial = run_trial(run) or planned
    if trial is not None:
        head = trial.split
    else:  # nothing says which split yet (never the run id's host-pid-time)
        head = run.label if run is not None and run.started else "starting"
    if repeat_mark(rid):  # a repeat: which one
        head += f"#{repeat_mark(rid)}"
    gpu = run.started.get("gpu") if run is not None else None
    if gpu is not None:
        head += f"@{gpu}"
    if multi and run is not None and run.started:
        head = f"{short_machine(run.machine)} {head}"
    return RunLabel(head, trial)


def run_name(rid: str, run: RunData | None, multi: bool, planned: Trial | None = None) -> str:
    """A run's label wherever the monitor names one: the detail pane, the timeline, the
    failures, the charts' titles."""
    return run_label(rid, run, multi, planned).text()


#: a setting a trial was not run with (a replay of sweeps that varied different settings)
_NOT_SET = object()


def fit_run_labels(labels: list[RunLabel], width: int) -> tuple[str, list[str]]:
    """The run list's trial column in ``width`` cells: its header and each run's label. Whole
    labels where they all fit; else each varied setting's value in a column of its own under
    its name (``16x1#2 off  on`` under ``trial  ckpt liger``): as short as the values, and no
    two trials alike (cutting whole labels made ``16x1 +c`` of two different trials)."""
    whole = [label.text() for label in labels]
    keys = sorted({k for label in labels if label.trial for k, _ in label.trial.settings})
    if not keys or max(map(len, whole), default=0) <= width:
        return "trial", whole
    columns = [("trial", [label.head for label in labels])]
    for key in keys:
        values = [label.trial.setting(key, _NOT_SET) if label.trial else _NOT_SET for label in labels]
        columns.append((SHORT.get(key, key), ["-" if v is _NOT_SET else format_value(v) for v in values]))
    widths = [max(len(head), *map(len, values)) for head, values in columns]
    header = " ".join(head.ljust(w) for (head, _), w in zip(columns, widths)).rstrip()
    rows = [" ".join(values[i].ljust(w) for (_, values), w in zip(columns, widths)).rstrip()
            for i in range(len(labels))]
    return header, rows


def fmt_secs(s: float) -> str:
    return f"{s:.0f}s" if s < 120 else f"{s / 60:.0f}m"


#: how the detail pane names a stage that is named for what comes next
_STAGE_WORDS = {"first step": "starting to train", "built, waiting for its turn": "waiting for its turn"}


def start_words(run: RunData) -> str:
    """Where a run's start went, from its process being asked for to its first step: each stage
    it reported (``run_stage``) and how long it took, the last one to the first step's begin
    (for a run built early, its wait for the turn)."""
    stages = sorted(run.stages.items(), key=lambda kv: kv[1])
    steps = [s for s in run.steps if s.get("rank", 0) == 0]
    if not stages or not steps or run.asked_at is None:
        return ""
    first = min(step_span(s)[0] for s in steps) - run.asked_at
    ends = [t for _, t in stages[1:]] + [first]
    parts = [f"{_STAGE_WORDS.get(name, name)} {max(0.0, end - t):.1f}" for (name, t), end in zip(stages, ends)
             if end - t >= 0.05]
    return f"{first:.1f} s from its start to its first step" + (f": {' · '.join(parts)}" if parts else "")


def run_progress(run: RunData, total_steps: int | None) -> tuple[str, str]:
    """``step n/N`` and the time left, from the median step so far."""
    done = max((s["step"] for s in run.steps if s.get("rank", 0) == 0), default=0)
    total = total_steps or (run.started.get("config") or {}).get("steps") or run.started.get("max_steps")
    prog = f"{done}/{total}" if total else str(done)
    left = "-"
    if run.status in ("running", "warming up") and total and run.steps:
        ms = median([s["wall_ms"] for s in run.steps[-10:]])
        left = fmt_secs((total - done) * ms / 1000.0)
    elif run.status == "ok":
        left = "done"
    return prog, left


@dataclass
class Stage:
    """What a run said it was doing before its first step (a ``run_stage`` event)."""

    stage: str
    elapsed_s: float
    #: when it arrived (monotonic), so a live view can count on
    seen: float


#: how a panel cut to its lines says where to read the rest
MORE = " … (? shows it whole)"


def clip_lines(text: Text, console, width: int, limit: int, more: str = MORE) -> Text:
    """``text`` wrapped to ``width`` cells in at most ``limit`` lines; when it needs more, the
    last line kept ends with ``more``."""
    lines = text.wrap(console, max(1, width))
    if len(lines) <= limit:
        return Text("\n").join(lines)
    kept = lines[:max(1, limit)]
    last = kept[-1]
    last.rstrip()
    last.truncate(max(0, width - cell_len(more)))
    last.append(more, style="dim")
    return Text("\n").join(kept)


class Clipped(Widget):
    """Text shown whole when it fits the lines the stylesheet gives the panel (its
    ``max-height``, else its ``height``), else as many lines as fit, the last saying where the
    rest is (:data:`MORE`): the answer, the failures and the notices are never cut silently.
    :attr:`full` is the whole text, for the help screen."""

    DEFAULT_CSS = "Clipped { height: auto; }"

    def __init__(self, text: str | Text = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.full = safe_text(text)

    def show(self, text: Text) -> None:
        self.full = safe_text(text)  # (it quotes events, settings and messages from outside)
        self.refresh(layout=True)

    def line_limit(self) -> int:
        for scalar in (self.styles.max_height, self.styles.height):
            if scalar is not None and scalar.is_cells:
                return max(1, int(scalar.value) - self.styles.gutter.height)
        return 1_000

    def fitted(self, width: int) -> Text:
        return clip_lines(self.full, self.app.console, width, self.line_limit())

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(self.fitted(width).split())

    def render(self) -> Text:
        return self.fitted(self.size.width)


class Verdict(Clipped):
    """The answer, always on screen: the verdict, the recommendation, or why there is none."""

    def update_from(self, rows: list[dict], fallback: str, results: Results | None = None,
                    live: bool = True, ended: bool = True, policy: Policy = Policy()) -> None:
        """``ended``: the sweep has no more runs to make; until then what the intervals cover is
        not said (a split's second run may be queued still). ``policy``: what the user allowed
        (the same as every other output's)."""
        line = verdict(rows, policy)
        rec = recommendation(rows, policy)
        note = scope_note(rows) if ended else ""
        text = Text()
        failed = failures(results) if results is not None else []
        running = results is not None and any(r.status in LIVE for r in results.runs.values())
        if line:
            text.append(line, style="bold")
            if rec:
                text.append("\n" + rec)
            if note:
                text.append("\n" + note, style="dim")
        elif failed and not running and not any(r.get("step_ms_median") for r in rows):
            kinds: dict[str, int] = {}
            for _, run in failed:
                kinds[run.status] = kinds.get(run.status, 0) + 1
            total = len([r for r in results.runs.values()])
            text.append(f"nothing could be measured: {len(failed)} of {total} runs failed "
                        f"({', '.join(f'{n} {k}' for k, n in kinds.items())})", style="bold red")
            label, run = failed[0]
            text.append(f"\n{label}: {run.status}: {run.message or 'no reason given'}")
        else:
            text.append(fallback, style="dim")
            if failed:
                text.append(f"\n{len(failed)} run(s) failed so far: see the failures panel", style="red")
        self.show(text)


def run_state(run: RunData | None, stage: Stage | None, live: bool, now: float) -> Text:
    """What the run list says of a run, in its status's colour: its progress while it steps
    (``5/20 1m``: steps done of all, time left), what it is doing before its first step
    (``building the model 41s``), why it failed (``oom: out of memory ...``), else its status
    (``queued``, ``ok 20/20``)."""
    status = run.status if run is not None else "queued"
    style = STATUS_STYLE.get(status, "")
    if run is not None and status in FAILED:
        return Text(f"{status}: {run.message or 'no reason given'}", style="red")
    if run is not None and run.steps:
        done, left = run_progress(run, None)
        return Text(f"ok {done}" if status == "ok" else f"{done} {left}", style=style)
    if stage is not None and status in ("queued", "warming up"):
        secs = stage.elapsed_s + (now - stage.seen if live else 0.0)
        return Text(f"{stage.stage} {fmt_secs(secs)}", style="yellow")
    if run is not None and status == "warming up" and live:
        return Text(f"to step 1 {fmt_secs(max(0.0, time.time() - run.started.get('t', time.time())))}",
                    style=style)
    return Text(status, style=style)


def cell(value) -> Text:
    """A table cell as a Rich ``Text``: a ``str`` given to a ``DataTable`` is read as markup (a
    ``[/]`` in a GPU name or a varied value crashed the monitor), and what it quotes from outside
    is cleaned (:mod:`tracetui.text`)."""
    return safe_text(value) if isinstance(value, Text) else plain(value)


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

    def action_cursor_up(self) -> None:
        self.user_moved = True
        super().action_cursor_up()

    def action_cursor_down(self) -> None:
        self.user_moved = True
        super().action_cursor_down()

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
                self.update_cell(rid, "status", cell(state))
            else:
                self.add_row(cell(name), cell(state), key=rid)
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


class Chart(PlotextPlot):
    """A plotext chart redrawn from scratch on each update."""

    def start(self, has_data: bool, empty_title: str):
        """Clear the figure; with no data, show ``empty_title`` and return None, else the plot."""
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        if not has_data:
            plt.title(clean(empty_title))
            self.refresh()
            return None
        return plt


def phase_bars(rows: list[dict]) -> tuple[list[str], list[list[float]]]:
    """The phase chart's labels and stacked values: each row's phase columns, which the analysis
    apportions so that they add up to its median step exactly (the bar ends at the step median)."""
    rows = [r for r in rows if r.get("step_ms_median")]
    multi = len({r["machine"] for r in rows}) > 1
    labels = [row_label(r, multi) for r in rows]
    data = [[r.get(p.field) or 0.0 for r in rows] for p in PHASES]
    return labels, data


class PhaseChart(Chart):
    """Stacked bars: the median optimizer step of each split, divided among its phases (ms)."""

    def update_from(self, rows: list[dict]) -> None:
        labels, data = phase_bars(rows)
        plt = self.start(bool(labels), "waiting for measured steps")
        if plt is None:
            return
        # Horizontal: the terminal's width gives the bars far finer steps than its height.
        plt.stacked_bar([clean(label) for label in labels], data, color=[p.rgb for p in PHASES], width=0.4, orientation="horizontal")
        self.refresh()


class StepChart(Chart):
    """Step time over steps of one run (the selected one), warm-up steps marked apart."""

    def update_from(self, run: RunData | None, name: str = "") -> None:
        steps = [s for s in (run.steps[-STEP_WINDOW:] if run else []) if s.get("rank", 0) == 0]
        plt = self.start(bool(steps), "step time (ms): no steps yet")
        if plt is None:
            return
        warm = [s for s in steps if s.get("warmup")]
        meas = [s for s in steps if not s.get("warmup")]
        if warm:
            plt.scatter([s["step"] for s in warm], [s["wall_ms"] for s in warm], label="warm-up", color="yellow", marker="x")
        if meas:
            plt.plot([s["step"] for s in meas], [s["wall_ms"] for s in meas], label="measured", color="cyan", marker="braille")
        plt.title(clean(f"step time (ms): {name or run.label}"))
        plt.xlabel("optimizer step")
        self.refresh()


class ThroughputChart(Chart):
    """Tokens per second per split."""

    def update_from(self, rows: list[dict]) -> None:
        rows = [r for r in rows if r.get("tokens_per_s")]
        plt = self.start(bool(rows), "throughput (tokens/s): waiting for measured steps")
        if plt is None:
            return
        multi = len({r["machine"] for r in rows}) > 1
        plt.bar([clean(row_label(r, multi)) for r in rows], [r["tokens_per_s"] for r in rows], color="green", width=0.4,
                orientation="horizontal")
        plt.title("throughput (tokens/s)")
        self.refresh()


@dataclass
class MemoryPoints:
    """The search's memory model against what ran, per micro-batch (GiB)."""

    measured: list[tuple[int, float]] = field(default_factory=list)
    predicted: list[tuple[int, float]] = field(default_factory=list)
    limit: float | None = None
    limit_what: str = ""


def memory_points(rows: list[dict], results: Results) -> MemoryPoints:
    """Each trial's and each memory probe's measured peak, each trial's predicted peak (the
    line the search fitted from its probes), and the memory bound, for the first machine's first
    effective batch with a prediction (else with a peak)."""
    with_pred = [r for r in rows if r.get("predicted_mem_gib") is not None]
    pick = (with_pred or [r for r in rows if r.get("peak_mem_gib") is not None] or [None])[0]
    out = MemoryPoints()
    if pick is None:
        return out
    same = [r for r in rows if (r["machine"], r["effective_batch"]) == (pick["machine"], pick["effective_batch"])]
    out.measured = [(r["micro_batch"], r["peak_mem_gib"]) for r in same if r.get("peak_mem_gib") is not None]
    for run in results.runs.values():  # the probes are runs, not rows
        if run.machine == pick["machine"] and str(run.started.get("why") or "").startswith(PROBE_WHY):
            peaks = [st["peak_mem_gib"] for st in run.steps if st.get("peak_mem_gib") is not None]
            if peaks:
                out.measured.append((run.trial.micro_batch, max(peaks)))
    out.predicted = sorted((r["micro_batch"], r["predicted_mem_gib"]) for r in same
                           if r.get("predicted_mem_gib") is not None)
    limits = [r["memory_limit_gib"] for r in same if r.get("memory_limit_gib")]
    cards = [r["mem_total_gib"] for r in same if r.get("mem_total_gib")]
    if limits:
        out.limit, out.limit_what = limits[0], "--memory-limit"
    elif cards:
        out.limit, out.limit_what = cards[0], "the card"
    return out


class MemoryChart(Chart):
    """Peak memory against the micro-batch: what each trial and probe measured, the search's
    predicted line, and the bound it searched under (at 90%: the headroom it keeps)."""

    points: MemoryPoints | None = None

    def update_from(self, rows: list[dict], results: Results) -> None:
        pts = self.points = memory_points(rows, results)
        plt = self.start(bool(pts.measured or pts.predicted), "peak memory (GiB): no peaks yet")
        if plt is None:
            return
        xs = [m for m, _ in pts.measured + pts.predicted]
        if pts.predicted:
            plt.plot([m for m, _ in pts.predicted], [g for _, g in pts.predicted], label="predicted",
                     color="magenta", marker="braille")
        if pts.measured:
            plt.scatter([m for m, _ in pts.measured], [g for _, g in pts.measured], label="measured",
                        color="cyan", marker="o")
        if pts.limit:
            span = [min(xs), max(xs)]
            plt.plot(span, [0.9 * pts.limit] * 2, label=f"90% of {pts.limit_what}", color="red", marker="braille")
        plt.xlabel("micro-batch")
        plt.title("peak memory (GiB) per micro-batch")
        self.refresh()


class GpuChart(Chart):
    """GPU utilisation % and memory used over time, from the NVML samples of one run."""

    def update_from(self, run: RunData | None, name: str = "") -> None:
        samples = run.gpu[-GPU_WINDOW:] if run else []
        plt = self.start(bool(samples), f"{name + ': ' if name else ''}no GPU samples")
        if plt is None:
            return
        t0 = samples[0]["t"]
        xs = [s["t"] - t0 for s in samples]
        plt.plot(xs, [s["util"] for s in samples], label="util %", color="cyan", marker="braille")
        total = samples[-1].get("mem_total_gib") or 1.0
        plt.plot(xs, [100.0 * s["mem_used_gib"] / total for s in samples], label="memory %", color="magenta",
                 marker="braille")
        plt.ylim(0, 100)
        plt.xlabel("seconds")
        plt.title(clean(f"{run.machine} {name or run.label}"))
        self.refresh()


class GpuStatus(Static):
    """One line per machine: the latest GPU reading of its selected (or latest) run, or why there
    is none. A CPU run's notice never speaks for a GPU machine."""

    def update_from(self, run: RunData | None, results: Results) -> None:
        machines: dict[str, list[RunData]] = {}
        for r in results.runs.values():
            if r.started:
                machines.setdefault(r.machine, []).append(r)
        if not machines:
            self.update(Text("No GPU samples yet", style="dim"))
            return
        multi = len(machines) > 1
        order = sorted(machines, key=lambda m: (run is None or m != run.machine, m))
        text = Text()
        for m in order[:3]:
            runs = machines[m]
            pick = run if run is not None and run.machine == m else None
            if pick is None or not pick.gpu:
                pick = next((r for r in reversed(runs) if r.gpu), pick or runs[-1])
            if text:
                text.append("\n")
            head = f"{short_machine(m)}: " if multi else ""
            if pick.gpu:
                g = pick.gpu[-1]
                power = f" · {g['power_w']:.0f} W" if g.get("power_w") is not None else ""
                name = "" if multi else f"{m} · "
                text.append(f"{head}{name}util {g['util']:.0f}% · memory {g['mem_used_gib']:.1f}/"
                            f"{g['mem_total_gib']:.0f} GiB{power}")
                stopped = [n for n in pick.notices if "NVML" in n]
                if stopped:
                    text.append(f" ({stopped[-1]})", style="yellow")
                continue
            if m == "CPU":  # one line, so that the run list keeps its rows at 80x24
                text.append(f"{head}host clock, no GPU" if multi else "CPU run: host clock, no GPU", style="dim")
                continue
            why = next((n for r in reversed(runs) for n in r.notices if "GPU" in n or "NVML" in n or "CPU" in n), "")
            text.append(f"{head}no GPU samples" + (f": {why}" if why else " yet"), style="dim")
        self.update(safe_text(text))


# ---- the summary table, its columns chosen by the width ----------------------------------------
def _trial_cell(row: dict, ctx: dict) -> Text:
    name = row_name(row)
    if ctx.get("multi_eb"):
        name = f"{name} (eb {row['effective_batch']})"
    if ctx.get("multi_machine"):
        name = f"{short_machine(row['machine'])} {name}"
    return Text(name, style="bold green" if row.get("fastest") else "")


def _status_cell(row: dict, ctx: dict) -> Text:
    status = row["status"]
    width = ctx.get("status_width", 60)
    if status != "ok" and row.get("message"):
        status = f"{status}: {row['message']}"
    elif row.get("busy"):
        status = f"{status} (busy)"
    if len(status) > width:
        status = status[: width - 1] + "…"
    return Text(status, style=STATUS_STYLE.get(row["status"], ""))


def _bound_cell(row: dict, ctx: dict) -> str:
    if not ctx.get("bound_evidence"):
        return row.get("bound") or "-"
    return f"{row.get('bound') or '-'}" + (f": {row['evidence']}" if row.get("evidence") and row.get("bound") else "")


#: the monitor's columns, most wanted first: the first six always come when they fit
PRIORITY = ("split", "status", "step_ms_median", "speedup", "bound", "peak_mem_gib", "tokens_per_s",
            "gpu_util_mean", "mfu_pct", "comparison", "spread", "data_ms", "forward_ms", "backward_ms",
            "optimizer_ms", "other_ms", "final_loss", "steps_measured", "runs", "energy_j_per_step", "projected_s", "activation_checkpointing",
            "gpus", "comm_ms", "ranks")


def pick_columns(rows: list[dict], width: int) -> tuple[list, dict]:
    """The columns that fit in ``width`` cells, chosen in :data:`PRIORITY` order and shown in the
    declared order, and the cell context. Rows failed with a long reason get a short status here
    (the failures panel and the detail pane have it whole)."""
    ctx = table_context(rows)
    by_key = {c.key: c for c in MONITOR}
    order = [k for k in PRIORITY if k in by_key] + [c.key for c in MONITOR if c.key not in PRIORITY]
    ctx["status_width"] = 24 if width < 110 else 32 if width < 160 else 60
    ctx["bound_evidence"] = width >= 150
    cell = {"split": _trial_cell, "status": _status_cell, "bound": _bound_cell}

    def show(col, row):
        f = cell.get(col.key)
        c = f(row, ctx) if f else col.show(row, ctx)
        return Text(c.text, style=c.style) if isinstance(c, Cell) else c

    def need(col) -> int:
        cells = [show(col, r) for r in rows]
        return max([len(col.header or "")] + [Text(str(c)).cell_len if not isinstance(c, Text) else c.cell_len
                                               for c in cells]) + 2

    chosen, used = [], 2  # the table's border
    first = set(PRIORITY[:6])
    for key in order:
        col = by_key[key]
        # a column with nothing in it at all (no GPU, no ranks) is left out
        if key not in ("split", "status") and rows and all(str(show(col, r)) in ("-", "", "--") for r in rows):
            continue
        w = need(col)
        if used + w <= width:
            chosen.append(col)
            used += w
        elif key not in first:
            break  # past the first six, in order only: no later column jumps a wider one
    chosen.sort(key=lambda c: MONITOR.index(c))
    return [(c, (lambda col: (lambda r: show(col, r)))(c)) for c in chosen], ctx


class SummaryTable(DataTable):
    """The side-by-side table of every trial; the fastest of each effective batch in bold. Its
    columns are chosen by priority for the width it has (split, status, step, speedup, bound,
    peak memory first)."""

    rows_shown: list[dict] = []
    keys_shown: tuple = ()

    def on_mount(self) -> None:
        self.cursor_type = "row"

    def on_resize(self) -> None:
        self.update_from(self.rows_shown)

    def update_from(self, rows: list[dict]) -> None:
        self.rows_shown = rows
        width = self.size.width or (self.app.size.width if self.app else 80)
        cols, _ctx = pick_columns(rows, width)
        keys = tuple(c.key for c, _ in cols)
        cursor = self.cursor_row
        if keys != self.keys_shown:
            self.clear(columns=True)
            for col, _ in cols:
                self.add_column(plain(col.header), key=col.key)
            self.keys_shown = keys
        else:
            self.clear()
        for i, r in enumerate(rows):
            self.add_row(*(cell(show(r)) for _, show in cols), key=str(i))
        if rows and 0 <= cursor < len(rows):
            self.move_cursor(row=cursor, animate=False)


# ---- the failures panel, the status line ---------------------------------------------------------
class Failures(Clipped):
    """Every failed run and why, runs that failed the same way on one line (three trials
    unavailable for want of a GPU take one line, not three); hidden while nothing failed."""

    def update_from(self, results: Results) -> None:
        failed = failures(results)
        self.display = bool(failed)
        if not failed:
            return
        same: dict[tuple[str, str], list[str]] = {}
        for label, run in failed:
            same.setdefault((run.status, run.message or "no reason given"), []).append(label)
        text = Text(f"failed ({len(failed)}): ", style="bold red")
        for i, ((status, why), labels) in enumerate(same.items()):
            if i:
                text.append("\n")
            text.append(f"{', '.join(labels)}: ", style="bold")
            text.append(f"{status}: {why}")
        self.show(text)


#: how a notice of each severity is written
NOTICE_STYLE = {"warning": "yellow", "error": "bold red"}


class StatusLine(Clipped):
    """Notices (warnings, what a key did): one line above the keys, never over the table; a
    notice longer than the line is read whole on the help screen (the app keeps them all)."""

    def say(self, message: str, severity: str = "information") -> None:
        self.show(Text(message, style=NOTICE_STYLE.get(severity, "")))


# ---- the detail pane and the timeline --------------------------------------------------------------
def median_step(run: RunData | None) -> tuple[dict | None, bool]:
    """The run's measured step whose time is the median (the middle one), and whether it is a
    warm-up step (no measured step yet)."""
    if run is None:
        return None, False
    steps = run.measured()
    if steps:
        ordered = sorted(steps, key=lambda s: s["wall_ms"])
        return ordered[(len(ordered) - 1) // 2], False
    warm = [s for s in run.steps if s.get("rank", 0) == 0]
    return (warm[-1], True) if warm else (None, False)


def step_segments(step: dict) -> list[tuple[str, str, float, tuple[int, int, int], int]]:
    """One step as it ran, in order: (label, phase, ms, colour, micro-batch index). The recorded
    data fetch is one value per step: it is drawn as one block before the first forward."""
    rgb = {p.name: p.rgb for p in PHASES}
    out = [("data", "data", float(step.get("data_ms") or 0.0), rgb["data"], 0)]
    fw = step.get("forward_ms") or []
    bw = step.get("backward_ms") or []
    fw = fw if isinstance(fw, list) else [fw]
    bw = bw if isinstance(bw, list) else [bw]
    for i in range(max(len(fw), len(bw))):
        if i < len(fw):
            out.append((f"f{i + 1}", "forward", float(fw[i]), rgb["forward"], i))
        if i < len(bw):
            out.append((f"b{i + 1}", "backward", float(bw[i]), rgb["backward"], i))
    out.append(("opt", "optimizer", float(step.get("optimizer_ms") or 0.0), rgb["optimizer"], 0))
    out.append(("rest", "other", float(step.get("other_ms") or 0.0), rgb["other"], 0))
    return out


def _shade(rgb: tuple[int, int, int], odd: bool) -> str:
    r, g, b = rgb
    if odd:  # every other micro-batch a little darker, so where one ends shows
        r, g, b = int(r * 0.6), int(g * 0.6), int(b * 0.6)
    return f"rgb({r},{g},{b})"


def draw_bar(segments, scale_ms: float, width: int) -> tuple[Text, Text]:
    """The segments to scale in ``width`` cells (``scale_ms`` fills them), and a line of labels
    under the segments wide enough to hold theirs."""
    bar, labels = Text(), Text()
    at = 0.0
    pos = 0
    for label, phase, ms, rgb, i in segments:
        at += max(0.0, ms)
        end = min(width, int(round(at / scale_ms * width))) if scale_ms > 0 else 0
        n = end - pos
        if n <= 0:
            continue
        bar.append("█" * n, style=_shade(rgb, i % 2 == 1))
        labels.append(label[:n].center(n) if n >= len(label) + 1 else " " * n, style="dim")
        pos = end
    return bar, labels


def _bound_words(row: dict) -> Text:
    text = Text()
    bound = row.get("bound")
    if bound:
        text.append(bound, style="bold")
        if row.get("evidence"):
            text.append(f" ({row['evidence']})")
        words = BOUNDS.get(bound)
        if words:
            text.append(f": {words}", style="dim")
    else:
        text.append("bound: not known yet" + (f" ({row['evidence']})" if row.get("evidence") else ""), style="dim")
    return text


def _loss_spark(curve: list[float], width: int = 16) -> str:
    vals = [v for v in curve if v is not None and math.isfinite(v)]
    if not vals:
        return ""
    if len(vals) > width:
        step = len(vals) / width
        vals = [vals[int(i * step)] for i in range(width)]
    lo, hi = min(vals), max(vals)
    ticks = "▁▂▃▄▅▆▇█"
    if hi - lo <= 0:
        return ticks[3] * len(vals)
    return "".join(ticks[min(7, int((v - lo) / (hi - lo) * 7.999))] for v in vals)


def loss_curve(run: RunData) -> list[float]:
    return [s.get("loss") for s in run.steps if s.get("rank", 0) == 0 and s.get("loss") is not None]


class Pane(Widget):
    """A text panel drawn for the width it has, as tall as its text: the app puts it in a
    scrolling container, so what the screen cannot hold (at 80x24, most of the detail) scrolls
    into view."""

    DEFAULT_CSS = "Pane { height: auto; }"

    def content(self, width: int) -> Text:  # pragma: no cover - overridden
        return Text()

    def shown(self, width: int) -> Text:
        """:meth:`content`, its strings from outside made harmless (:func:`~tracetui.text.safe_text`)."""
        return safe_text(self.content(max(20, width)))

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(self.shown(width).wrap(self.app.console, max(1, width)))

    def render(self) -> Text:
        return self.shown(self.size.width)


def _comm_words(row: dict) -> Text:
    """What the ranks exchange and, for DDP, what it costs: one or two lines."""
    text = Text()
    settings = row.get("settings") or {}
    gib = row.get("comm_gib_per_step")
    if row.get("comm_ms") is not None:
        text.append(f"\ncommunication: all-reduce exposed {row['comm_ms']:.1f} ms per step")
    elif row.get("comm_note"):
        text.append("\ncommunication: exposed time not separable (FSDP communicates in every micro-batch)")
    if gib is not None:
        text.append(f"\n  sends {gib * 1024:.0f} MiB per step per rank: {settings.get('comm_pattern') or ''}",
                    style="dim")
    return text


def _work_words(row: dict) -> Text:
    """The work one step does and how far it is from the device's peak (:mod:`tracetui.flops`)."""
    text = Text()
    if row.get("tflop_per_step") is None:
        return text
    text.append(f"\nwork: {_flop(row['tflop_per_step'])} per step")
    if row.get("hw_tflop_per_step") and row["hw_tflop_per_step"] > row["tflop_per_step"] * 1.001:
        text.append(f" ({_flop(row['hw_tflop_per_step'])} with checkpointing's recompute)")
    text.append(f" · {row['tflops']:.3g} TFLOP/s")
    if row.get("mfu_pct") is not None:
        text.append(f" · MFU {row['mfu_pct']:.1f}%", style="bold")
    note = row.get("mfu_note")
    if note:
        text.append(f"\n  {note}", style="dim")
    return text


def _flop(tflop: float) -> str:
    return f"{tflop:.3g} TFLOP" if tflop >= 0.1 else f"{tflop * 1000:.3g} GFLOP"


class DetailPane(Pane):
    """The selected trial: its step and speedup and why it failed, then the bound with its
    evidence in words (the why, near the top), the phase breakdown, memory against the card, the
    settings as really run, the loss curve beside the others' (on a small screen these scroll
    into view)."""

    row: dict | None = None
    run: RunData | None = None
    rows: list[dict] = []
    runs_of: dict = {}
    name: str = ""
    empty: str = "select a run in the run list (arrows)"

    def show(self, row: dict | None, run: RunData | None, rows: list[dict], results: Results, name: str,
             empty: str | None = None) -> None:
        self.row, self.run, self.rows, self.name = row, run, rows, name
        self.runs_of = {}
        for r in results.runs.values():
            key = id(row_of(r, rows))
            self.runs_of.setdefault(key, []).append(r)
        if empty:
            self.empty = empty
        self.refresh(layout=True)  # as tall as its new text (it scrolls in its container)

    def content(self, width: int) -> Text:
        row, run = self.row, self.run
        text = Text(no_wrap=False)
        if run is None and row is None:
            return Text(self.empty, style="dim")
        multi = len({r["machine"] for r in self.rows}) > 1
        where = row["machine"] if row else (run.machine if run and run.started else "")
        head = self.name or (row_label(row, multi) if row else "")
        text.append(head, style="bold")
        if where:
            text.append(f" on {where}")
        status = run.status if run is not None else row["status"]
        text.append(" · ")
        text.append(status, style=STATUS_STYLE.get(status, ""))
        if row:
            text.append(f" · {row.get('runs', 1)} run(s), {row.get('steps_measured', 0)} measured steps")
        if run is not None and run.status in FAILED:
            text.append(f"\nwhy it failed: {run.message or 'no reason given'}", style="red")
        if row and row is not None and row.get("step_ms_median"):
            text.append(f"\nstep {row['step_ms_median']:.1f} ms")
            if row.get("step_ms_ci_low") is not None:
                text.append(f" (95% CI {row['step_ms_ci_low']:.0f}-{row['step_ms_ci_high']:.0f})")
            sp = row.get("speedup_vs_slowest")
            if sp is not None:
                group = [r for r in group_of(row, self.rows) if r.get("step_ms_median")]
                slow = max(group, key=lambda r: r["step_ms_median"]) if group else row
                text.append(f" · {sp:.2f}x vs {row_name(slow)}", style="bold" if row.get("fastest") else "")
                if row.get("speedup_ci_low") is not None and row["speedup_ci_low"] != row.get("speedup_ci_high"):
                    text.append(f" [{row['speedup_ci_low']:.2f}-{row['speedup_ci_high']:.2f}]")
                if row.get("comparison"):
                    text.append(f" ({row['comparison']})", style="dim")
            if row.get("tokens_per_s"):
                text.append(f" · {row['tokens_per_s']:.0f} tok/s")
            text.append_text(_work_words(row))
            text.append("\nwhy: ")
            text.append_text(_bound_words(row))
            parts = [f"{p.short} {row.get(p.field) or 0.0:.1f}" for p in PHASES]
            text.append("\nphases (ms of the median step): " + " · ".join(parts))
            segs = [(p.short, p.name, row.get(p.field) or 0.0, p.rgb, 0) for p in PHASES]
            bar, _ = draw_bar(segs, row["step_ms_median"], max(10, width - 2))
            text.append("\n")
            text.append_text(bar)
            if row.get("gpu_util_mean") is not None:
                text.append(f"\nGPU busy {row['gpu_util_mean']:.0f}% of the time")
        if row and row.get("peak_mem_gib") is not None:
            cap = row.get("memory_limit_gib") or row.get("mem_total_gib")
            text.append(f"\nmemory: peak {row['peak_mem_gib']:.1f}")
            if cap:
                share = row["peak_mem_gib"] / cap
                text.append(f" of {cap:.0f} GiB ({100 * share:.0f}%"
                            + (", --memory-limit" if row.get("memory_limit_gib") else "") + ") ")
                n = 20
                k = min(n, int(round(share * n)))
                text.append("█" * k, style="red" if share > 0.9 else "green")
                text.append("░" * (n - k), style="dim")
            else:
                text.append(" GiB")
            if row.get("peak_mem_gib_ranks"):
                text.append(f"\n  per rank (GiB): {row['peak_mem_gib_ranks']}", style="dim")
        if row and (row.get("world_size") or 1) > 1:
            text.append_text(_comm_words(row))
        started = start_words(run) if run is not None else ""
        if started:
            text.append(f"\nstarted: {started}", style="dim")
        settings = (run.settings if run is not None and run.settings else (row or {}).get("settings")) or {}
        if settings:
            from ..probe.settings import describe

            text.append("\nran with: " + describe(settings), style="dim")
            if settings.get("max_length"):
                text.append(f" · max_length {settings['max_length']}", style="dim")
        if row is not None:
            curves = []
            for other in group_of(row, self.rows):
                runs = [r for r in self.runs_of.get(id(other), []) if loss_curve(r)]
                if runs:
                    curves.append((other, loss_curve(runs[-1])))
            if curves:
                text.append("\nloss:")
                for other, curve in curves:
                    mark = "▶" if other is row else " "
                    last = curve[-1]
                    text.append(f"\n {mark}{row_name(other):>8} {_loss_spark(curve)} "
                                f"{fmt(last, '.4f') if last is not None and math.isfinite(last) else 'NaN'}",
                                style="bold" if other is row else "")
                if row.get("loss_ok") is False and row.get("loss_note"):
                    text.append(f"\n {row['loss_note']}", style="yellow")
        return text


@dataclass
class Lane:
    """One trial's median step on the timeline."""

    name: str
    step: dict
    warmup: bool
    row: dict | None


class Timeline(Pane):
    """One median step of the selected trial drawn to scale: data, then the forward and backward
    of each micro-batch, the optimizer and the rest; a second trial stacked under it on the same
    scale to compare (``c`` picks it)."""

    lanes: list[Lane] = []

    def show(self, lanes: list[Lane]) -> None:
        self.lanes = lanes
        self.refresh(layout=True)

    def content(self, width: int) -> Text:
        if not self.lanes:
            return Text("no steps yet: the timeline of one median step appears once a run has stepped",
                        style="dim")
        width = max(10, width - 1)
        scale = max(sum(ms for _, _, ms, _, _ in step_segments(l.step)) for l in self.lanes) or 1.0
        text = Text()
        for n, lane in enumerate(self.lanes):
            segs = step_segments(lane.step)
            total = sum(ms for _, _, ms, _, _ in segs)
            if n:
                text.append("\n")
            text.append(lane.name, style="bold")
            text.append(f"  {total:.1f} ms" + (" (a warm-up step: none measured yet)" if lane.warmup else
                                               " (median step)"))
            mb = len([s for s in segs if s[1] == "forward"])
            text.append(f" · {mb} micro-batch{'es' if mb != 1 else ''}")
            util = (lane.row or {}).get("gpu_util_mean")
            text.append(f" · GPU busy {util:.0f}%" if util is not None else " · no GPU samples",
                        style="bold" if util is not None else "dim")
            fw = [ms for _, ph, ms, _, _ in segs if ph == "forward"]
            if fw:
                text.append(f"\n  forward {median(fw):.1f} ms per micro-batch", style="dim")
            bar, labels = draw_bar(segs, scale, width)
            text.append("\n")
            text.append_text(bar)
            text.append("\n")
            text.append_text(labels)
        axis = f"0 ms{'':{max(0, width - 4 - len(f'{scale:.0f} ms'))}}{scale:.0f} ms"
        text.append("\n" + axis, style="dim")
        legend = Text("\n")
        for p in PHASES:
            legend.append("█", style=_shade(p.rgb, False))
            legend.append(f"{p.short} ")
        legend.append("(darker: every other micro-batch) · c: compare with another trial", style="dim")
        text.append_text(legend)
        return text
