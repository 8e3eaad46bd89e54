"""A first run that explains itself: a verdict held back on a busy machine says how to go on,
ctrl+c stops the monitor's sweep as q does, logs shown together keep their runs apart, a busy
machine's bound is undetermined rather than a contradiction, and status cells cut at a word
with one clock. Real Textual apps (run_test) over real event logs."""

import asyncio
import json
import threading
from pathlib import Path

from rich.text import Text

from tracetui.analysis import Results, summarise
from tracetui.analysis.answer import verdict
from tracetui.cli.commands import log_names, read_logs, show_main
from tracetui.events.log import read_events
from tracetui.tui.app import TraceApp
from tracetui.tui.help import HelpScreen
from tracetui.tui.sources import ReplaySource, Source
from tracetui.tui.widgets import RunList, SummaryTable, Verdict, run_state
from tracetui.tui.widgets.base import cut_words

from .conftest import pilot_until
from .test_monitor_layout import MEMLIMIT, load, screen_text, settled

DATA = Path(__file__).parent / "data"
#: a real CPU sweep (1x4, 2x2, 4x1 at effective batch 4)
TINY = DATA / "cpu_tiny_sweep.jsonl"


def busy_events(other_cores: float = 1.6) -> list[dict]:
    """The recorded CPU sweep as a busy machine would have logged it: other processes' load
    in every run's window (the field the sweep writes at each run's end)."""
    events = read_events([TINY]).events
    for e in events:
        if e["type"] == "run_finished":
            e["quiet"] = dict(e.get("quiet") or {}, other_cpu_cores=other_cores, cores=2)
    return events


def write_log(path: Path, events: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def run_app(app, size, steps):
    async def go():
        async with app.run_test(size=size) as pilot:
            await settled(pilot)
            return await steps(pilot)

    return asyncio.run(go())


# ---- a. a verdict held back on a busy machine says how to go on ---------------------------------
def test_a_busy_verdict_names_allow_busy_wherever_it_is_said(tmp_path, capsys):
    events = busy_events()
    line = verdict(summarise(Results().extend(events)))
    assert "held back: the machine was busy" in line
    assert "measure again on a quiet machine" in line and "--allow-busy" in line
    assert "marked as measured on a busy machine" in line
    # headless: show's stderr
    log = write_log(tmp_path / "busy.jsonl", events)
    show_main([str(log), "--export", "csv", "-o", str(tmp_path / "s.csv")])
    err = capsys.readouterr().err
    assert "held back: the machine was busy" in err and "--allow-busy" in err
    # the monitor's answer, and its help screen (the answer whole)
    app = TraceApp(ReplaySource(events))

    async def steps(pilot):
        said = app.query_one(Verdict).full.plain
        await pilot.press("question_mark")
        await pilot_until(pilot, lambda: isinstance(app.screen, HelpScreen))
        helped = screen_text(app)
        await pilot.press("escape")
        await pilot.press("q")
        return said, helped

    said, helped = run_app(app, (120, 36), steps)
    assert "--allow-busy" in said, said
    assert "--allow-busy" in helped


# ---- b. ctrl+c stops the sweep as q does -------------------------------------------------------
class Endless(Source):
    """A live sweep that steps until it is stopped (a recorded run's start and steps, then
    nothing more): what the monitor shows while a first run trains."""

    live = True

    def __init__(self, events):
        self.events, self.stopped, self.thread = events, threading.Event(), None
        self.stop_calls = 0

    def start(self, inbox):
        def body():
            for e in self.events:
                inbox.put(e)
            self.stopped.wait(60)
            if self.on_done is not None:
                self.on_done()

        self.thread = threading.Thread(target=body, daemon=True)
        self.thread.start()

    def stop(self):
        self.stop_calls += 1
        self.stopped.set()

    def running(self):
        return self.thread is not None and self.thread.is_alive()

    def join(self, timeout=None):
        if self.thread is not None:
            self.thread.join(timeout)


def _first_steps() -> list[dict]:
    events = read_events([TINY]).events
    first = next(e["run_id"] for e in events if e["type"] == "run_started")
    return [e for e in events if e.get("run_id") == first and e["type"] != "run_finished"][:12]


def _quit_with(key: str, tmp_path):
    source = Endless(_first_steps())
    app = TraceApp(source, out_path=str(tmp_path / f"{key}.csv"))

    async def steps(pilot):
        await pilot_until(pilot, lambda: app.results.runs and source.running())
        footer = screen_text(app).splitlines()[-1]
        await pilot.press(key)
        await pilot_until(pilot, lambda: app._exit_renderables is not None or app.return_code is not None
                          or not app.is_running, 30)
        return footer

    footer = run_app(app, (80, 24), steps)
    return app, source, footer


def test_ctrl_c_stops_the_sweep_the_way_q_does(tmp_path):
    by_q, q_source, footer = _quit_with("q", tmp_path)
    by_c, c_source, _ = _quit_with("ctrl+c", tmp_path)
    assert "q/^c" in footer and "quit" in footer  # the footer says so, at 80 columns
    for app, source in ((by_q, q_source), (by_c, c_source)):
        assert source.stop_calls >= 1 and not source.running()
        assert app.return_code == 130 and app.quit_reason == "quit while the sweep was running"
        assert not app._notifications  # no "press ctrl+q" toast
    assert (tmp_path / "ctrl+c.csv").exists() and (tmp_path / "q.csv").exists()  # what was measured, written


# ---- c. two logs from the same machine stay apart -------------------------------------------------
def test_logs_of_one_machine_shown_together_stay_apart_labelled_by_file(tmp_path, capsys):
    events = read_events([TINY]).events
    a = write_log(tmp_path / "monday" / "events.jsonl", events)
    b = write_log(tmp_path / "tuesday" / "events.jsonl", events)  # (the same runs: a copied log)
    assert log_names([str(a), str(b)]) == ["monday/events", "tuesday/events"]
    assert log_names(["x/a.jsonl", "y/b.jsonl.gz"]) == ["a", "b"]
    out = tmp_path / "both.csv"
    assert show_main([str(a), str(b), "--export", "csv", "-o", str(out)]) == 0
    import csv

    with open(out) as fh:
        rows = list(csv.DictReader(fh))
    assert sorted((r["machine"], r["split"]) for r in rows) == sorted(
        (f"CPU ({d}/events)", s) for d in ("monday", "tuesday") for s in ("1x4", "2x2", "4x1"))
    err = capsys.readouterr().err
    assert "on CPU (monday/events)" in err and "on CPU (tuesday/events)" in err
    # the monitor: a row per split and log, each labelled by its file
    app = TraceApp(ReplaySource(read_logs([str(a), str(b)]).events))

    async def steps(pilot):
        table = app.query_one(SummaryTable)
        await pilot.press("q")
        return [str(table.get_cell_at((i, 0))) for i in range(table.row_count)]

    labels = run_app(app, (120, 36), steps)
    assert len(labels) == 6, labels
    assert sum("(monday/events)" in x for x in labels) == 3 and sum("(tuesday/events" in x for x in labels) == 3
    # one log alone is labelled as before
    assert {r.machine for r in Results().extend(read_logs([str(a)]).events).runs.values()} == {"CPU"}


# ---- d. a busy machine's bound is undetermined -----------------------------------------------------
def test_a_bound_read_on_a_busy_machine_is_undetermined():
    quiet = {r["trial"]: r for r in summarise(Results().extend(read_events([TINY]).events))}
    assert all(r["bound"] != "undetermined" for r in quiet.values()), quiet
    busy = summarise(Results().extend(busy_events()))
    for r in busy:
        assert r["bound"] == "undetermined" and r["evidence"].startswith("the machine was busy ("), r
        assert "exponent" not in r["evidence"]
    # one busy neighbour is enough: its times bend the exponent of those fitted with it
    events = read_events([TINY]).events
    for e in events:
        if e["type"] == "run_finished" and e["run_id"].endswith("/1x4"):
            e["quiet"] = dict(e["quiet"], other_cpu_cores=1.6)
    rows = {r["trial"]: r for r in summarise(Results().extend(events))}
    assert rows["2x2"]["bound"] == "undetermined" and "1x4" in rows["2x2"]["evidence"]


# ---- e. cells cut at a word, one clock ------------------------------------------------------------
def test_status_cells_are_cut_at_a_word_with_an_ellipsis():
    assert cut_words(Text("ok (busy: other processes)"), 7).plain == "ok…"
    assert cut_words(Text("oom: out of memory at micro-batch 16"), 20).plain == "oom: out of memory…"
    assert cut_words(Text("ok 8/8"), 6).plain == "ok 8/8"
    app = TraceApp(ReplaySource(load(MEMLIMIT)))

    async def steps(pilot):
        runs = app.query_one(RunList)
        await pilot.press("q")
        return [(str(runs.get_cell_at((i, 1))), state.plain) for i, (_, _, state) in enumerate(runs.entries)]

    cells = run_app(app, (80, 24), steps)
    cut = [(c, whole) for c, whole in cells if c != whole]
    assert cut, cells  # (the oom's reason is longer than its cell at 80 columns)
    for c, whole in cut:  # cut where a word ends, and an ellipsis says so
        assert c.endswith("…") and whole.startswith(c[:-1]) and whole[len(c) - 1] == " ", (c, whole)


def test_status_cells_count_one_clock_up_from_the_runs_start():
    """A run's status before its first step (its stage's time) and while it steps (its age)
    read one clock: the time since its start, counting up."""
    events = read_events([TINY]).events
    run_id = next(e["run_id"] for e in events if e["type"] == "run_started")
    results, said = Results(), []
    from tracetui.tui.widgets.runlist import Stage

    for e in events:
        results.add(e)
        run = results.runs.get(run_id)
        if e.get("run_id") != run_id or run is None:
            continue
        stage = Stage(e["stage"], e["elapsed_s"], 0.0) if e["type"] == "run_stage" else None
        if e["type"] in ("run_stage", "step") and run.status != "ok":
            said.append(run_state(run, stage, False, 0.0).plain)
    secs = [int(s.rsplit(" ", 1)[1].rstrip("s")) for s in said if s.rsplit(" ", 1)[1].rstrip("s").isdigit()]
    assert any("/" in s for s in said) and secs == sorted(secs), said
    help_text = HelpScreen.__module__  # (the help screen says which clock: see CLOCK)
    from tracetui.tui.widgets import CLOCK

    assert "counts up from its start" in CLOCK and help_text


def test_the_monitor_says_the_sweeps_estimate_on_its_status_line():
    """The sweep's estimate of the time left, sent after each run ends (a notice of level
    ``estimate``), reaches the monitor's status line and its list of notices."""
    from tracetui.events.schema import ESTIMATE, NOTICE, make

    events = read_events([TINY]).events
    first = next(e["run_id"] for e in events if e["type"] == "run_finished")
    line = "estimate: about 12 s for 2 run(s) left (from 1 finished run(s): their step times)"
    at = next(i for i, e in enumerate(events) if e["type"] == "run_finished") + 1
    app = TraceApp(ReplaySource(events[:at] + [make(NOTICE, first, level=ESTIMATE, message=line)] + events[at:]))

    async def drive():
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot_until(pilot, lambda: any(m == line for _, m in app.notices))
            await pilot.press("q")

    asyncio.run(drive())
