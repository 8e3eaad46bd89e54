"""The monitor: driven by a real sweep through App.run_test(), and snapshots of recorded events."""

import asyncio
import multiprocessing as mp
import re
from pathlib import Path

import pytest

from tracetui.analysis import Policy, Results, verdict
from tracetui.core.checks import validate
from tracetui.core.config import SweepConfig
from tracetui.events.schema import make
from tracetui.outputs.writer import Outputs
from tracetui.runner.sweep import Sweep
from tracetui.events.log import read_events
from tracetui.tui.app import TraceApp
from tracetui.tui.sources import ReplaySource, SweepSource
from tracetui.tui.widgets import RunList, SummaryTable, Verdict
from .conftest import busy_marked, pilot_until, read_csv

DATA = Path(__file__).parent / "data" / "h200_sweep.jsonl"


def recorded(until_step_of: str | None = None, step: int = 0):
    """Events recorded on the H200; optionally cut in the middle of one split's run."""
    events = read_events([DATA]).events
    if until_step_of is None:
        return events
    out = []
    for e in events:
        out.append(e)
        if e["type"] == "step" and e["run_id"].endswith(until_step_of) and e["step"] == step:
            break
    return out


def _identity(path: Path):
    """Which file is at ``path`` (a file replaced whole is another file), or None."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


#: the form of a verdict of a sweep of 1x2 and 2x1: one is faster, or no clear difference
CLAIM_1X2_2X1 = re.compile(r"((1x2 is [\d.]+x faster than 2x1|2x1 is [\d.]+x faster than 1x2)( \([^)]*\))?"
                           r"|no clear difference between (1x2 and 2x1|2x1 and 1x2)) at effective batch 2")


@pytest.mark.slow
def test_live_sweep_in_app(tmp_path):
    cfg = SweepConfig(splits="1x2,2x1", effective_batch=[2], repeats=1, steps=7, warmup=1, seq_len=32,
                      runs_dir=str(tmp_path / "runs"), allow_busy=True)
    sweep = Sweep(cfg, validate(cfg))
    out = tmp_path / "live.csv"
    # the answer under the sweep's policy (a verdict even on a busy machine), as the command gives it
    app = TraceApp(SweepSource(sweep), outputs=Outputs(str(out), "csv", policy=Policy.of(cfg)),
                   planned=[(s.run_id, s.trial) for s in sweep.planned()], screenshot_dir=str(tmp_path))
    statuses_seen = set()
    answers_while_running = set()
    apply_events = app.apply_events

    def applied():  # every batch of events, as the app takes it: the statuses it shows on the way
        n = apply_events()
        statuses_seen.update(r.status for r in app.results.runs.values())
        return n

    app.apply_events = applied

    async def drive():
        async with app.run_test(size=(100, 30)) as pilot:
            runs = app.query_one(RunList)
            # every planned run is listed from the start, queued
            assert runs.row_count == 2
            assert sorted(str(runs.get_cell_at((i, 0))) for i in range(2)) == ["1x2", "2x1"]

            def done():
                if app.source.running() and app._was_running:  # (and the app has seen it running)
                    answers_while_running.add(app.query_one(Verdict).full.plain)
                return (len(app.results.runs) == 2
                        and all(r.status == "ok" for r in app.results.runs.values()))

            await pilot_until(pilot, done, 240)
            # the sweep over (and the app has taken that in), the last events are drawn at once:
            # the table and the whole answer
            await pilot_until(pilot, lambda: not app.source.running() and not app._was_running and not app._dirty
                        and app.query_one(SummaryTable).row_count == 2, 30)
            said = app.query_one(Verdict).full.plain
            # the verdict (asked for on a busy machine too: allow_busy), marked when measured busy:
            # the one the analysis gives from the event log on disk, word for word
            on_disk = Results()
            for e in read_events([sweep.log.path]).events:
                on_disk.add(e)
            expected = verdict(Outputs(str(out), "csv", policy=Policy.of(cfg)).rows(on_disk), Policy.of(cfg))
            assert CLAIM_1X2_2X1.search(expected) and said.startswith(expected + "\n"), (said, expected)
            assert busy_marked(said, app.rows), said
            # what the intervals cover is said once no run of the sweep is left to come
            assert "one run per split: intervals cover step noise only" in app.query_one(Verdict).full.plain
            before = _identity(out)  # (the summary may be written already: e writes it anew, whole)
            await pilot.press("e")
            await pilot_until(pilot, lambda: _identity(out) not in (None, before), 30)
            assert [r["status"] for r in read_csv(out)] == ["ok", "ok"]
            await pilot.press("s")
            await pilot_until(pilot, lambda: list(tmp_path.glob("*.svg")), 30)
            # r runs the split under the run list's cursor (the first, 1x2) once more
            runs.focus()
            await pilot.press("up", "up")  # as a user moves it (the cursor then stays put)
            assert runs.cursor_row == 0
            await pilot.press("r")
            await pilot_until(pilot, lambda: done() and False or (len(app.results.runs) == 3
                        and all(r.status == "ok" for r in app.results.runs.values())), 120)
            # while that run was on its way the answer stood, without a note on what the
            # intervals cover (another run of a split was still to come)
            assert any(CLAIM_1X2_2X1.search(a) for a in answers_while_running), answers_while_running
            assert not any("intervals cover" in a for a in answers_while_running)
            assert sorted(r.label for r in app.results.runs.values()) == ["1x2", "1x2", "2x1"]
            # the run reports its end before its process has gone: quit once the sweep is over
            await pilot_until(pilot, lambda: not app.source.running(), 30)
            await pilot.press("q")

    asyncio.run(drive())
    assert app.return_code == 0
    # the screen followed the runs as they went: a run was shown before it had finished
    assert statuses_seen & {"warming up", "running"}, statuses_seen
    assert mp.active_children() == []


@pytest.mark.slow
def test_quit_mid_run_stops_workers_and_keeps_steps(tmp_path):
    cfg = SweepConfig(splits="1x4,4x1", repeats=1, steps=200, warmup=1, seq_len=64, runs_dir=str(tmp_path / "runs"))
    sweep = Sweep(cfg, validate(cfg))
    out = tmp_path / "partial.csv"
    app = TraceApp(SweepSource(sweep), out_path=str(out))

    async def drive():
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot_until(pilot, lambda: any(len(r.steps) >= 3 for r in app.results.runs.values()), 120)
            await pilot.press("q")
            await pilot_until(pilot, lambda: not app.is_running, 30)

    asyncio.run(drive())
    assert app.return_code == 130
    assert mp.active_children() == []
    on_disk = read_events([sweep.log.path]).events
    steps = [e for e in on_disk if e["type"] == "step"]
    assert len(steps) >= 3
    failed = [e for e in on_disk if e["type"] == "run_failed"]
    assert failed and failed[0]["kind"] == "interrupted"
    assert out.exists()


def test_replay_fills_table_and_verdict():
    app = TraceApp(ReplaySource(recorded()))

    async def drive():
        async with app.run_test(size=(120, 40)) as pilot:
            table = app.query_one(SummaryTable)
            await pilot_until(pilot, lambda: table.row_count == 3)
            verdict = str(app.query_one("#verdict").render())
            assert "4x1 is 3.83x faster than 1x4" in verdict
            await pilot.press("r")  # replay: nothing to rerun, says so, keeps running
            await pilot.press("question_mark")
            await pilot_until(pilot, lambda: app.screen.__class__.__name__ == "HelpScreen")
            await pilot.press("escape")
            await pilot.press("q")

    asyncio.run(drive())


def test_snapshot_mid_sweep(snap_compare):
    assert snap_compare(TraceApp(ReplaySource(recorded("2x2", 12))), terminal_size=(100, 32))


def test_snapshot_final_table(snap_compare):
    assert snap_compare(TraceApp(ReplaySource(recorded())), terminal_size=(100, 32))


def test_snapshot_80x24(snap_compare):
    assert snap_compare(TraceApp(ReplaySource(recorded())), terminal_size=(80, 24))


def test_snapshot_help(snap_compare):
    assert snap_compare(TraceApp(ReplaySource(recorded())), terminal_size=(80, 24), press=["question_mark"])


def test_snapshot_light_theme(snap_compare):
    """Readable on a light terminal: the stylesheet uses theme variables only."""

    async def light(pilot):
        pilot.app.theme = "textual-light"
        await pilot.pause()

    assert snap_compare(TraceApp(ReplaySource(recorded())), terminal_size=(100, 32), run_before=light)


def test_redraws_hold_off_while_the_monitor_is_over_its_cpu_budget(monkeypatch):
    """The monitor shares the machine with the training it measures: over its CPU budget it
    redraws only once the screen is MAX_STALE_S old, while training runs; once it has ended, at
    once. (Each rule on its own: the bound moved between never and at once, not timed.)"""
    from tracetui.tui import app as app_mod

    class Training(ReplaySource):
        going = True

        def running(self):
            return self.going

    events = recorded()
    first = [e for e in events if e["run_id"].endswith("1x4")]
    later = [e for e in events if not e["run_id"].endswith("1x4")]
    monkeypatch.setattr(app_mod, "REFRESH_HZ", 20.0)  # (ticks every 50 ms: the rules, not the rate, are tested)
    monkeypatch.setattr(app_mod, "CPU_BUDGET", 0.0)  # always over budget
    monkeypatch.setattr(app_mod, "MAX_STALE_S", 3600.0)  # the screen never goes stale: held for good
    source = Training(first)
    app = TraceApp(source)
    tick, ticks = app._tick, []
    app._tick = lambda: (tick(), ticks.append(1))  # (counted: the held screen outlives ticks)

    async def drive():
        async with app.run_test(size=(100, 30)) as pilot:
            runs = app.query_one(RunList)
            # the first events applied, and training seen running (that change is drawn at once)
            await pilot_until(pilot, lambda: app.events_applied == len(first) and app._was_running, 10)
            app.redraw()  # (drawn once by hand: the bound of an hour holds back even the first)
            assert runs.row_count == 1
            for e in later:
                app.inbox.put(e)
            await pilot_until(pilot, lambda: app.events_applied == len(events), 10)
            seen = len(ticks)
            await pilot_until(pilot, lambda: len(ticks) >= seen + 3, 10)
            assert app._dirty and runs.row_count == 1  # events applied, screen held, tick after tick
            monkeypatch.setattr(app_mod, "MAX_STALE_S", 0.0)  # now stale: the next tick draws
            await pilot_until(pilot, lambda: runs.row_count == 3 and not app._dirty, 10)
            monkeypatch.setattr(app_mod, "MAX_STALE_S", 3600.0)
            source.going = False  # training over: the last events are drawn at once
            n = app.events_applied
            app.inbox.put(dict(later[-1], run_id=later[-1]["run_id"] + "-last"))
            await pilot_until(pilot, lambda: app.events_applied > n and not app._dirty, 10)
            source.going = True
            monkeypatch.setattr(app_mod, "CPU_BUDGET", 100.0)  # under budget: every batch draws
            seen = len(ticks)
            await pilot_until(pilot, lambda: len(ticks) >= seen + 2, 10)  # (training seen going again)
            n = app.events_applied
            app.inbox.put(dict(later[-1], run_id=later[-1]["run_id"] + "-again"))
            await pilot_until(pilot, lambda: app.events_applied > n and not app._dirty, 10)

    asyncio.run(drive())


def test_live_cpu_training_on_few_cores_warns_to_measure_headless():
    class Live(ReplaySource):
        live = True

    def started(run, cores, device="cpu"):
        return make("run_started", run, label="4x1", micro_batch=4, grad_accum=1, effective_batch=4,
                    env={"device": device, "cpu_count": cores})

    async def messages(source):
        app = TraceApp(source)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
            assert list(app._notifications) == []  # never a toast over the table
            return [m for _, m in app.notices]

    warned = asyncio.run(messages(Live([started("a/4x1", 2), started("a/1x4", 2)])))
    assert len(warned) == 1 and "shares this machine's 2 CPU cores" in warned[0] and "--export csv" in warned[0]
    for quiet in (Live([started("a/4x1", 64)]), Live([started("a/4x1", 2, "cuda")]), ReplaySource([started("a/4x1", 2)])):
        assert asyncio.run(messages(quiet)) == []  # many cores, a GPU, or a replay: nothing to say
