"""The monitor takes its updates as Textual messages: one "events arrived" per batch, however
many events the batch holds, and a "source done" when the sweep ends; no timer drains it."""

import asyncio
import threading
from pathlib import Path

from tracetui.events.log import read_events
from tracetui.tui import app as app_mod
from tracetui.tui.app import TraceApp
from tracetui.tui.sources import Inbox, Source, SweepSource
from tracetui.tui.widgets import RunList

from .conftest import pilot_until

DATA = Path(__file__).parent / "data" / "h200_sweep.jsonl"


def test_inbox_announces_each_batch_once():
    calls = []
    inbox = Inbox(notify=lambda: calls.append(1))
    threads = [threading.Thread(target=lambda: [inbox.put({"n": i}) for i in range(500)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1  # 2000 events, one announcement
    assert len(inbox.drain()) == 2000
    inbox.put({"n": -1})
    assert len(calls) == 2  # drained: the next event announces itself again


class Background(Source):
    """Events from a thread of its own, as a sweep delivers them, once ``go`` is set (the app is
    up: they arrive as messages, not with its start); done when they are all out."""

    live = True

    def __init__(self, events):
        self.events, self.thread, self.go = events, None, threading.Event()

    def start(self, inbox):
        def body():
            self.go.wait(30)
            for e in self.events:
                inbox.put(e)
            if self.on_done is not None:
                self.on_done()

        self.thread = threading.Thread(target=body, daemon=True)
        self.thread.start()

    def running(self):
        return self.thread is not None and self.thread.is_alive()


def test_events_reach_the_screen_without_the_timer(monkeypatch, tmp_path):
    monkeypatch.setattr(app_mod, "REFRESH_HZ", 0.001)  # the timer would first fire after 1000 s
    events = read_events([DATA]).events
    source = Background(events)
    app = TraceApp(source, out_path=str(tmp_path / "results.csv"))
    posted = []
    real_post = app.post_message
    monkeypatch.setattr(app, "post_message", lambda m: posted.append(type(m).__name__) or real_post(m))

    async def go():
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
            source.go.set()
            await pilot_until(pilot, lambda: app.events_applied == len(events) and "SourceDone" in posted
                              and app.query_one(RunList).row_count == 3 and not app._dirty)
            await pilot.press("q")

    asyncio.run(go())
    assert app.events_applied == len(events) and not app._dirty
    assert "SourceDone" in posted
    assert 1 <= posted.count("EventsArrived") < len(events) / 10  # batches, not one per event


def test_a_sweep_no_longer_runs_once_its_source_says_it_is_done():
    """The monitor draws a sweep's end on its source's word (the verdict with what its intervals
    cover, said only of a sweep with no run left to come): by then the source must not say it
    runs. Its thread used to, still alive as it said it, and the last redraw then read the sweep
    as running (the note came a timer's tick later, if at all)."""
    class Quick:  # (a sweep with nothing to run: its end is what is tested)
        on_event = None

        def run(self):
            pass

    source, said, done = SweepSource(Quick()), [], threading.Event()
    source.on_done = lambda: (said.append(source.running()), done.set())
    source.start(Inbox())
    assert done.wait(30)
    assert said == [False]
    source.join(30)
