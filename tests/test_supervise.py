"""The supervisor on its own, with real processes: how a trial's end is read when the trial says
it, and when it does not (exit status, a signal, an out-of-memory in its log, a stop, a stall)."""

import queue
import signal
import sys
import threading
import time

from tracetui.events import make
from tracetui.plan import RunSpec
from tracetui.runner import supervise as sup
from tracetui.trial import Trial

SPEC = RunSpec("s/4x1", Trial(4, 1), 0)


def _run(code: str, tmp_path, inbox=None, stop=None, stall=None, events=()):
    """Supervise ``python -c code``; ``events`` are put in its inbox as if sent over the socket."""
    inbox = inbox or queue.Queue()
    for e in events:
        inbox.put(e)
    child = sup.CommandChild([sys.executable, "-c", code], {}, inbox, tmp_path / "run.log")
    seen: list[dict] = []
    t0 = time.monotonic()
    status = sup.supervise(SPEC, child, seen.append, stop or threading.Event(), stall)
    return status, seen, time.monotonic() - t0, child


def test_the_lead_ranks_end_is_the_runs_end(tmp_path):
    events = [make("step", "s/4x1", step=1, wall_ms=5.0, rank=1),
              make("run_failed", "s/4x1", rank=1, kind="oom", message="rank 1"),
              make("run_finished", "s/4x1", rank=0, steps=1),
              make("step", "s/other", step=9, wall_ms=1.0, rank=0)]  # a straggler of another run: passed on
    status, seen, _, _ = _run("pass", tmp_path, events=events)
    assert status == ("ok", "")
    assert [e["type"] for e in seen] == ["step", "run_failed", "run_finished", "step"]


def test_an_end_nobody_reported_is_read_once(tmp_path):
    cases = {
        "import sys; sys.exit(3)": ("error", "exited with status 3 without reporting"),
        "print('torch.OutOfMemoryError: CUDA out of memory'); raise SystemExit(1)": (
            "oom", "out of memory at micro-batch 4"),
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)": ("crashed", "killed by SIGKILL"),
        "pass": ("error", "no Trainer reported"),
    }
    for code, (kind, words) in cases.items():
        (status, message), seen, _, child = _run(code, tmp_path)
        assert status == kind and words in message, (code, status, message)
        assert str(child.log_path) in message
        # said once, as the run's run_failed event
        assert [(e["type"], e["kind"]) for e in seen] == [("run_failed", kind)]


def test_a_stop_reaches_the_whole_process_group(tmp_path):
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    # with a child of its own: the signal goes to the whole group
    code = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
            " time.sleep(60)")
    (status, message), _, took, child = _run(code, tmp_path, stop=stop)
    assert (status, message) == ("interrupted", "stopped by the sweep")
    assert took < 10 and child.exitcode() == -signal.SIGTERM


def test_a_run_without_progress_is_stalled(tmp_path, monkeypatch):
    monkeypatch.setattr(sup, "START_STALL_S", 0.0)  # no first-step allowance: the limit is --stall-timeout
    (status, message), seen, took, _ = _run("import time; time.sleep(60)", tmp_path, stall=1.0)
    assert status == "stalled" and message.startswith("no progress for 1 s (limit 1 s, before the first step)")
    assert took < 10 and seen[-1]["kind"] == "stalled"
