"""The live monitor: a Textual app over an event source (a sweep, a replayed log, a watch).

Events land in an :class:`Inbox` from background threads, which announces each batch with one
:class:`EventsArrived` message (never one per event); the app folds the batch into
:class:`Results` and redraws within its CPU budget, so a flood of events never blocks training
nor makes the screen flicker. The source says it is done with :class:`SourceDone`, drawn at
once. A slow timer only counts clocks on (a trial's start-up) and draws what the budget held
back.
"""

from __future__ import annotations

import time
from contextlib import suppress
from pathlib import Path

from rich.text import Text
from textual import events, on
from textual.app import App, ComposeResult, ScreenStackError
from textual.binding import Binding
from textual.message import Message
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.widgets import Footer, Header, Static, TabbedContent, TabPane
from textual.widgets.data_table import CellDoesNotExist

from ..analysis import Results, time_line, time_spent
from ..outputs.writer import Outputs, output_format
from ..probe.settings import describe
from ..events.schema import ESTIMATE, NOTICE
from ..core.text import clean
from ..core.trial import Trial
from .cpu import CpuMeter
from .filtering import TableFilter
from .help import HelpScreen
from .quitting import Quitting
from .sources import Inbox, Source
from .terminal import hung_up, terminal_fd
from .widgets import (DetailPane, Failures, GpuChart, GpuStatus, Lane, MemoryChart, NOTICE_STYLE, PhaseChart, RunList,
                      Stage, StatusLine, StepChart, SummaryTable, ThroughputChart, Timeline, Verdict, median_step, multi_machine,
                      phase_legend, row_of, run_name)

REFRESH_HZ = 4.0
#: the statistics are recomputed at most this often (and at most every 4x their own cost)
SUMMARY_MIN_S = 0.25


class EventsArrived(Message):
    """Events are waiting in the inbox (posted from the thread that put the first of them)."""


class SourceDone(Message):
    """The source has delivered everything it will (a sweep ended)."""
#: the monitor's own CPU, in cores, above which it redraws less often: it shares the machine with
#: the training it measures, which redraws without a bound would slow
CPU_BUDGET = 0.15
#: but the screen is never older than this
MAX_STALE_S = 2.0
#: CPU training on a machine of at most this many cores is disturbed by the monitor: say so
SHARED_CPU_CORES = 4


#: the width (columns) below which the monitor packs for a narrow terminal
NARROW_BELOW = 100


class TraceApp(Quitting, TableFilter, App):
    """tracetui's monitor."""

    TITLE = "tracetui"
    CSS_PATH = "tracetui.tcss"
    #: below 100 columns the run list narrows, the tabs and the footer pack closer, and the
    #: charts give way to the table
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (NARROW_BELOW, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (30, "-tall")]
    #: one word each in the footer, so that every key shows at 80 columns; the tooltip is what
    #: the help screen says
    BINDINGS = [
        Binding("q", "quit_app", "quit", key_display="q/^c", id="quit",
                tooltip="quit (stops the workers; what was measured is written); ctrl+c does the same"),
        Binding("e", "export", "export", tooltip="export the summary CSV now", id="export"),
        Binding("s", "screenshot", "svg", tooltip="save an SVG screenshot", id="screenshot"),
        Binding("r", "rerun", "rerun", tooltip="run the selected split again", id="rerun"),
        Binding("c", "compare", "compare", tooltip="keep the selected trial stacked on the timeline", id="compare"),
        Binding("t", "timeline", "timeline", tooltip="the timeline of one median step", id="timeline"),
        Binding("f", "filter", "filter", tooltip="filter the table to one value of a varied setting", id="filter"),
        Binding("question_mark", "help", "help", key_display="?",
                tooltip="this screen (the answer, the failures and the notices whole)", id="help"),
    ]

    def __init__(self, source: Source, out_path: str = "tracetui_results.csv", screenshot_dir: str = ".",
                 planned: list[tuple[str, Trial]] | None = None, subtitle: str = "", note: str = "",
                 project_steps: int | None = None, force: bool = False, idle: str = "",
                 outputs: Outputs | None = None):
        """``outputs``: what to write, and where (:class:`~tracetui.outputs.writer.Outputs`); without it,
        a summary at ``out_path`` (in the format its extension says), replaced only if this
        monitor wrote it or ``force``, with ``project_steps``."""
        super().__init__()
        self.source = source
        self.inbox = Inbox(notify=lambda: self.post_message(EventsArrived()))
        self._said_dropped = False
        self.results = Results()
        self.rows: list[dict] = []
        self.outputs = outputs or Outputs(out_path, output_format(type("ns", (), {"output": out_path})),
                                          force=force, project_steps=project_steps)
        #: what the last write said (:class:`~tracetui.outputs.writer.Written`): the command's closing lines
        self.written = None
        self.screenshot_dir = screenshot_dir
        self.planned = planned or []
        self.sub_title = subtitle
        self.base_subtitle = subtitle
        self.note = note
        #: what the screen says while nothing has arrived (watch: how to connect)
        self.idle = idle or "waiting for the first measured steps ..."
        self.events_applied = 0
        self.exit_code = 0
        self.quit_reason = ""
        self._dirty = False
        self._next_summary = 0.0
        #: whether the sweep ran at the last tick (a change is drawn at once, the notes with it)
        self._was_running = False
        self._last_redraw = 0.0
        self._warned_cpu = False
        self.cpu = CpuMeter()
        self._quitting = False
        self._focus_run: str | None = None
        #: the sweeps whose time has been said (:meth:`_say_time`)
        self._timed: set[str] = set()
        #: the run whose trial is stacked under the selected one on the timeline (``c``)
        self.compare_run: str | None = None
        #: what each run said it was doing before its first step (``run_stage`` events)
        self.stages: dict[str, Stage] = {}
        #: every notice shown on the status line, oldest first
        self.notices: list[tuple[str, str]] = []
        #: a stop signal (SIGTERM, SIGHUP, SIGINT) caught by :func:`~tracetui.tui.launchers.run_app`; the timer acts on it
        self.signalled: int | None = None
        self._terminal: int | None = None  # (set on mount: the terminal, where there is one)
        #: called with the signal when the monitor itself finds a reason to stop (a hung-up
        #: terminal), as a caught signal would be: :func:`~tracetui.tui.launchers.run_app` sets it
        self.stop_requested = None

    def format_title(self, title: str, sub_title: str):
        # the header quotes settings and paths from outside: shown literally, never as controls
        return super().format_title(clean(title), clean(sub_title))

    # ---- layout --------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header()
        yield Verdict(self.idle, id="verdict")
        with Horizontal(id="main"):
            with Vertical(id="left"):
                yield RunList(id="runs")
                yield GpuStatus(id="gpu-status")
            # labels short enough that every tab shows at 80 columns
            with TabbedContent(id="charts"):
                with TabPane("Detail", id="tab-detail"):
                    with VerticalScroll(classes="pane"):
                        yield DetailPane(id="detail")
                with TabPane("Timeline", id="tab-timeline"):
                    with VerticalScroll(classes="pane"):
                        yield Timeline(id="timeline")
                with TabPane("Phases", id="tab-phases"):
                    yield Static(phase_legend(), id="legend")
                    yield PhaseChart(id="phases")
                with TabPane("Steps", id="tab-steps"):
                    yield StepChart(id="steps")
                with TabPane("Tok/s", id="tab-throughput"):
                    yield ThroughputChart(id="throughput")
                with TabPane("GPU", id="tab-gpu"):
                    yield GpuChart(id="gpu")
                with TabPane("Memory", id="tab-memory"):
                    yield MemoryChart(id="memory")
        yield Failures(id="failures")
        yield SummaryTable(id="summary")
        yield StatusLine(id="status")
        # (ctrl+p, the command palette, is on the help screen: the footer's room goes to the keys)
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        self._terminal = terminal_fd(self.is_headless)
        self.query_one(Failures).display = False
        self.source.on_done = lambda: self.post_message(SourceDone())
        self.source.start(self.inbox)
        self.apply_events()
        self.redraw()
        self.set_interval(1.0 / REFRESH_HZ, self._tick)
        if self.note:
            self.say(self.note, "warning")

    def on_resize(self, event: events.Resize) -> None:
        # the compact footer holds every key in 80 columns
        self.query_one(Footer).compact = event.size.width < NARROW_BELOW

    def say(self, message: str, severity: str = "information") -> None:
        """A notice on the status line (never a toast over the table)."""
        self.notices.append((severity, message))
        with suppress(ScreenStackError, NoMatches):  # no screen yet or any more, or the help screen's (it lists them)
            self.query_one(StatusLine).say(message, severity)

    # ---- events -> screen ---------------------------------------------------------------------
    def apply_events(self) -> int:
        events = self.inbox.drain()
        for e in events:
            if e["type"] == "run_stage":
                # before the first step: what the trial's process is doing, and since when
                self.stages[e["run_id"]] = Stage(str(e.get("stage") or "starting"),
                                                 float(e.get("elapsed_s") or 0.0), time.monotonic())
                if self._focus_run is None or self._focus_run not in self.results.runs:
                    self._focus_run = e["run_id"]
            run = self.results.add(e)
            if e["type"] == "run_started" and not self._warned_cpu:
                self._warn_shared_cpu(e.get("env") or {})
            if e["type"] in ("run_settings", "run_started"):
                self._show_settings()
            if e["type"] == NOTICE and e.get("level") == ESTIMATE:
                self.say(str(e.get("message", "")))
            if e["type"] in ("run_started", "step") and run.status in ("warming up", "running"):
                focused = self.results.runs.get(self._focus_run) if self._focus_run else None
                # a run built early (a head start) waits: the panes stay on the one stepping
                if e["type"] == "step" or not e.get("head_start") or focused is None or focused.status not in (
                        "warming up", "running"):
                    self._focus_run = run.run_id
        if events:
            self.events_applied += len(events)
            self._dirty = True
        if self.inbox.dropped and not self._said_dropped:
            self._said_dropped = True
            self.say(f"events arrive faster than the screen takes them: some are left out of the screen "
                     f"(never out of the log: {self.source.describe()})", "warning")
        if any(e["type"] == "sweep" for e in events):
            self._say_time()  # (once a sweep has ended: its end comes in one of these)
        return len(events)

    def _show_settings(self) -> None:
        """The header says what the trainers really run with (read back from them: in
        ``sweep -- script`` mode the script's own steps and length), or that the runs differ."""
        runs = [r for r in self.results.runs.values() if r.started]
        lines = {describe(r.settings) for r in runs if r.settings}
        line = lines.pop() if len(lines) == 1 else "runs differ in their settings (see the detail pane)" if lines else ""
        own = []
        steps = {r.started.get("max_steps") or (r.started.get("config") or {}).get("steps") for r in runs}
        steps.discard(None)
        if self.base_subtitle.startswith("script") and len(steps) == 1:
            own.append(f"{steps.pop()} steps")
        lengths = {r.settings.get("max_length") for r in runs if r.settings}
        lengths.discard(None)
        if self.base_subtitle.startswith("script") and len(lengths) == 1:
            own.append(f"max_length {lengths.pop()}")
        self.sub_title = " · ".join(x for x in (self.base_subtitle, *own, line) if x)

    def _warn_shared_cpu(self, env: dict) -> None:
        """Training on a CPU of few cores beside the monitor is slowed by it, and unevenly across
        splits, so the comparison itself changes: said once, with the way round it."""
        cores = env.get("cpu_count") or 0
        if self.source.live and env.get("device") == "cpu" and 0 < cores <= SHARED_CPU_CORES:
            self._warned_cpu = True
            self.say(f"training shares this machine's {cores} CPU cores with the monitor, which slows it: "
                     "for figures, run headless (tracetui --export csv)", "warning")

    def on_events_arrived(self, _message: EventsArrived) -> None:
        self.apply_events()
        self._draw_within_budget()

    def sweep_ready(self, sweep) -> None:
        """The checks passed and the sweep is built (:class:`PreparingSource`): its planned runs,
        its header; the screen now waits for its first steps."""
        self.planned = [(s.run_id, s.trial) for s in (sweep.planned() or [])]
        self.sub_title = self.base_subtitle = sweep_subtitle(sweep)
        self.idle = "waiting for the first measured steps ..."
        for w in sweep.warnings:
            self.say(w, "warning")
        for line in (sweep.start_line(), sweep.estimate_line()):
            if line:
                self.say(line)
        self._next_summary = 0.0
        self.redraw()

    def on_source_done(self, _message: SourceDone) -> None:
        error = getattr(self.source, "error", None)
        if error:  # the checks refused the settings: the line is said as tracetui exits
            self.exit(return_code=2)
            return
        self.apply_events()
        self._next_summary = 0.0
        self.redraw()  # the last events and the verdict, at once
        self._was_running = self.source.running()  # (its end drawn: no second redraw for it)

    def _say_time(self) -> None:
        """Once a sweep has ended: where its time went, on the status line (once a sweep; a
        replayed one as it is read)."""
        for spent in time_spent(self.results):
            line = time_line(spent)
            if line and spent["sweep"] not in self._timed:
                self._timed.add(spent["sweep"])
                self.say(f"time: {line}")

    def _tick(self) -> None:
        if not self.signalled and hung_up(self._terminal):
            # A hung-up terminal reads as empty for ever (Textual's input thread then spins,
            # noticing nothing), and its SIGHUP may not come (blocked, or handled late): the
            # hang-up is read here, as the SIGHUP would say it
            self._hang_up()
        if self.signalled and not self._quitting:
            self.quit_on_signal(self.signalled)
        if self.source.watching:
            self.sub_title = self.source.describe()
            for line in self.source.news():  # what the listener refused or dropped, as it happens
                self.say(line, "warning")
        if self.stages and self.source.live:
            self._dirty = True  # the stage's elapsed time counts on
        running = self.source.running()
        changed, self._was_running = running != self._was_running, running
        if changed:  # the sweep ended (its last word, now) or runs again: drawn at once, whole
            self._next_summary = 0.0
            self.redraw()
            return
        self._draw_within_budget()

    def _draw_within_budget(self) -> None:
        busy = self.cpu.share()
        # Held back only while training runs: the last events (the verdict) are drawn at once.
        if self._dirty and (busy < CPU_BUDGET or time.monotonic() - self._last_redraw >= MAX_STALE_S
                            or not self.source.running()):
            self.redraw()

    def focus_run(self):
        if self._focus_run and self._focus_run in self.results.runs:
            return self.results.runs[self._focus_run]
        runs = [r for r in self.results.runs.values() if r.steps]
        return runs[-1] if runs else None

    def _label_of(self, run) -> str:
        return run_name(run.run_id, run, multi_machine(self.results)) if run is not None else ""

    def _lanes(self, run) -> list[Lane]:
        """The selected run's median step, and the compared one's under it."""
        lanes = []
        others = [self.results.runs.get(self.compare_run)] if self.compare_run else []
        for r in [run, *others]:
            step, warm = median_step(r)
            if step is not None and not any(l.name == self._label_of(r) for l in lanes):
                lanes.append(Lane(self._label_of(r), step, warm, row_of(r, self.rows)))
        return lanes

    def redraw(self) -> None:
        self._dirty = False
        self._last_redraw = time.monotonic()
        # The statistics (bootstrap intervals over every step) cost more as steps pile up, so
        # they are recomputed at most every 4x their own cost: bounded CPU, however long the run.
        now = time.monotonic()
        fresh = now >= self._next_summary
        if fresh:
            self.rows = self.outputs.rows(self.results)
            cost = time.monotonic() - now
            self._next_summary = now + max(SUMMARY_MIN_S, 4.0 * cost)
        else:
            self._dirty = True  # the table still owes an update
        run = self.focus_run()
        name = self._label_of(run)
        with self.batch_update():
            runs = self.query_one(RunList)
            runs.update_from(self.results, self.planned, self.stages, live=self.source.live)
            if not runs.user_moved and run is not None and run.run_id in runs.rows:
                # the cursor follows the running trial until the user moves it
                index = runs.get_row_index(run.run_id)
                if runs.cursor_row != index:
                    runs.move_cursor(row=index, animate=False)
            self.query_one(GpuStatus).update_from(run, self.results)
            self.query_one(StepChart).update_from(run, name)
            self.query_one(GpuChart).update_from(run, name)
            self.query_one(Failures).update_from(self.results)
            self.query_one(DetailPane).show(row_of(run, self.rows), run, self.rows, self.results, name,
                                            empty=self.idle)
            self.query_one(Timeline).show(self._lanes(run))
            if fresh:
                self.query_one(Verdict).update_from(self.rows, self.idle, self.results, self.source.live,
                                                    ended=not self.source.running(), policy=self.outputs.policy,
                                                    speak=self.outputs.speak)
                shown = self.shown_rows()
                self.query_one(PhaseChart).update_from(shown)
                self.query_one(ThroughputChart).update_from(shown)
                self.query_one(MemoryChart).update_from(self.rows, self.results)
                self.query_one(SummaryTable).update_from(shown)

    @on(RunList.RowHighlighted, "#runs")
    def _pick_run(self, event: RunList.RowHighlighted) -> None:
        key = event.row_key.value if event.row_key is not None else None
        if self.query_one(RunList).user_moved and key in self.results.runs and key != self._focus_run:
            self._focus_run = key
            self.redraw()  # the user's move is answered at once, not on the next tick

    # ---- actions --------------------------------------------------------------------------------
    @property
    def out_path(self) -> str:
        return self.outputs.summary

    def write_outputs(self, final: bool = False) -> str | None:
        """Write the outputs (:class:`~tracetui.outputs.writer.Outputs`: the summary, the steps CSV and,
        when ``final``, the recommendation's config); an error line, or None. A file already there
        that this monitor did not write is left alone unless it was started with ``--force``."""
        self.written = self.outputs.write(self.results, log_path=None, final=final)
        self.rows = self.written.rows
        if self.written.errors:
            return "; ".join(self.written.errors) + f"; events stay in {self.source.describe()}"
        return None

    def action_export(self) -> None:
        self.apply_events()
        err = self.write_outputs()
        if err:
            self.say(err, "error")
        else:
            self.say(f"wrote {self.out_path}")

    def action_screenshot(self) -> None:
        path = self.save_screenshot(path=self.screenshot_dir)
        self.say(f"saved {path}")

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.in_full()))

    def in_full(self) -> Text:
        """The answer, the failures and every notice, whole: the main screen cuts them to the
        lines it has room for."""
        text = Text()
        text.append("The answer\n", style="bold")
        text.append_text(self.query_one(Verdict).full)
        failures = self.query_one(Failures)
        if failures.display:
            text.append("\n\n")
            text.append_text(failures.full)
        if self.notices:
            text.append("\n\nNotices, oldest first", style="bold")
            for severity, message in self.notices:
                text.append("\n" + message, style=NOTICE_STYLE.get(severity, ""))
        return text

    def action_timeline(self) -> None:
        self.query_one(TabbedContent).active = "tab-timeline"

    def action_compare(self) -> None:
        """Stack the selected trial's median step on the timeline under the next one selected
        (``c`` again on the same run: stop comparing)."""
        run = self.focus_run()
        if run is None:
            self.say("no run selected to compare", "warning")
            return
        if self.compare_run == run.run_id:
            self.compare_run = None
            self.say("timeline: comparison cleared")
        else:
            self.compare_run = run.run_id
            self.say(f"timeline: {self._label_of(run)} stays stacked under the selected trial (c on it again clears)")
        self.query_one(TabbedContent).active = "tab-timeline"
        self._dirty = True
        self.redraw()

    def action_rerun(self) -> None:
        table = self.query_one(RunList)
        if not self.source.can_rerun:
            self.say("this view replays saved events: nothing to run again", "warning")
            return
        if self.source.running():
            self.say("the sweep is still running: run a split again once it has finished", "warning")
            return
        try:
            row_key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        except CellDoesNotExist:  # an empty table
            self.say("no run selected", "warning")
            return
        label = run_name(row_key, self.results.runs.get(row_key), multi_machine(self.results),
                         dict(self.planned).get(row_key))
        if not self.source.rerun(row_key):
            self.say("that run cannot be run again", "warning")
            return
        self.say(f"running {label} again")

def sweep_subtitle(sweep, cfg=None) -> str:
    """The monitor's header for a live sweep: what it trains, and how its runs share the device
    (``sweep`` None: not built yet, from its ``cfg``)."""
    cfg = sweep.cfg if sweep is not None else cfg
    cmd = getattr(sweep, "cmd", None)
    # a script's own settings come with its runs (run_started, run_settings), not tracetui's
    subtitle = (f"script {' '.join(Path(c).name if i == 1 else c for i, c in enumerate(cmd[:2]))}" if cmd
                else f"{cfg.model} · seq {cfg.seq_len} · {cfg.steps} steps")
    if sweep is not None and sweep.head_starts:
        subtitle += " · head starts"
    if getattr(sweep, "fork", None) is not None:
        subtitle += " · forked starts"
    return subtitle
