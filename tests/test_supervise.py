"""The supervisor on its own, with real processes: how a trial's end is read when the trial says
it, and when it does not (exit status, a signal, an out-of-memory in its log, a stop, a stall)."""

import queue
import signal
import sys
import threading

import pytest

from tracetui.events.schema import make
from tracetui.planning.plan import RunSpec
from tracetui.runner import supervise as sup
from tracetui.runner.lifetime import process_gone
from tracetui.core.trial import Trial

from .conftest import wait_until

SPEC = RunSpec("s/4x1", Trial(4, 1), 0)


@pytest.fixture(autouse=True)
def no_drain(monkeypatch):
    """These trials send nothing over a socket: no wait for events after their process has gone
    (their output is in their log, whole, once they have gone)."""
    monkeypatch.setattr(sup, "DRAIN_S", 0.0)


def _run(code: str, tmp_path, inbox=None, stop=None, stall=None, events=()):
    """Supervise ``python -c code``; ``events`` are put in its inbox as if sent over the socket."""
    inbox = inbox or queue.Queue()
    for e in events:
        inbox.put(e)
    child = sup.CommandChild([sys.executable, "-c", code], {}, inbox, tmp_path / "run.log")
    seen: list[dict] = []
    status = sup.supervise(SPEC, child, seen.append, stop or threading.Event(), stall)
    return status, seen, child


def test_the_lead_ranks_end_is_the_runs_end(tmp_path):
    events = [make("step", "s/4x1", step=1, wall_ms=5.0, rank=1),
              make("run_failed", "s/4x1", rank=1, kind="oom", message="rank 1"),
              make("run_finished", "s/4x1", rank=0, steps=1),
              make("step", "s/other", step=9, wall_ms=1.0, rank=0)]  # a straggler of another run: passed on
    status, seen, _ = _run("pass", tmp_path, events=events)
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
        (status, message), seen, child = _run(code, tmp_path)
        assert status == kind and words in message, (code, status, message)
        assert str(child.log_path) in message
        # said once, as the run's run_failed event, after a start event that gives it its row
        assert [(e["type"], e.get("kind") or e.get("mode")) for e in seen] == [
            ("run_started", "unreported"), ("run_failed", kind)]
        assert seen[0]["label"] == "4x1" and seen[0]["micro_batch"] == 4


def test_a_stop_reaches_the_whole_process_group(tmp_path):
    stop = threading.Event()
    # with a child of its own: the signal goes to the whole group
    code = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
            " print('child', p.pid, flush=True); time.sleep(60)")
    log = tmp_path / "run.log"

    def started():  # the trial and its own child both running: stop it
        return log.exists() and "child" in log.read_text()

    stopper = threading.Thread(target=lambda: (wait_until(started, 60), stop.set()), daemon=True)
    stopper.start()
    (status, message), _, child = _run(code, tmp_path, stop=stop)
    assert (status, message) == ("interrupted", "stopped by the sweep")
    assert child.exitcode() == -signal.SIGTERM
    grandchild = int(log.read_text().split()[1])
    wait_until(lambda: process_gone(grandchild), 10)  # SIGTERM'd with it (a sleep of a minute otherwise)


def test_a_run_without_progress_is_stalled(tmp_path, monkeypatch):
    monkeypatch.setattr(sup, "START_STALL_S", 0.0)  # no first-step allowance: the limit is --stall-timeout
    (status, message), seen, _ = _run("import time; time.sleep(60)", tmp_path, stall=1.0)
    assert status == "stalled" and message.startswith("no progress for 1 s (limit 1 s, before the first step)")
    assert seen[-1]["kind"] == "stalled"


def test_a_death_under_a_memory_cap_is_out_of_memory(tmp_path):
    """On the CPU --memory-limit caps the data size: C++ code (the OpenMP runtime, the allocator)
    dies of it by a signal or a failed thread creation rather than raising; that is an oom. The
    same death without a cap stays a crash."""
    code = "import os, signal, sys; print('libgomp: Thread creation failed: Resource temporarily unavailable'); " \
           "sys.stdout.flush(); os.kill(os.getpid(), signal.SIGSEGV)"
    inbox = queue.Queue()
    child = sup.CommandChild([sys.executable, "-c", code], {}, inbox, tmp_path / "capped.log")
    child.memory_limit = 0.5
    status, message = sup.supervise(SPEC, child, lambda e: None, threading.Event(), None)
    assert status == "oom"
    assert message.startswith("out of memory at micro-batch 4 under --memory-limit 0.5 GiB (killed by SIGSEGV)")
    (status, message), _, _ = _run(code, tmp_path)
    assert status == "crashed" and "killed by SIGSEGV" in message


@pytest.mark.slow
def test_a_script_that_dies_before_its_trainer(tmp_path):
    """``tracetui sweep -- python bad.py``: a script that fails before any trainer reports gets a
    row per run under its trial's name with the reason; the second identical failure stops the
    sweep (the same failure in every run, whatever each run's log is called), exit 2. A script
    that does not exist is refused before anything starts."""
    from .conftest import read_csv, run_main

    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nprint('this script needs a GPU')\nsys.exit(3)\n")
    out = tmp_path / "r.csv"
    proc = run_main("sweep", "--export", "csv", "-o", out, "--splits", "1x4,2x2,4x1", "--runs-dir", tmp_path / "runs",
                    "--", sys.executable, bad)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "every run fails the same way" in proc.stderr
    rows = {r["split"]: r for r in read_csv(out)}
    for split in ("1x4", "2x2"):
        assert rows[split]["status"] == "error"
        assert "exited with status 3 without reporting: this script needs a GPU" in rows[split]["message"]
    assert rows["4x1"]["message"].startswith("not run: every run fails the same way")
    proc = run_main("sweep", "--export", "csv", "-o", tmp_path / "m.csv", "--", sys.executable,
                    tmp_path / "missing.py")
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"tracetui: error: sweep: {tmp_path / 'missing.py'} does not exist; give the training script's path"
