"""The runner against stand-ins for a training script (tests/stubs/trainer.py) and for tracetui's
worker (tests/stubs/worker.py): real processes, a real socket or queue, the planner, the
supervisor, head starts' turns and the outputs, and no torch: the step times are the stubs' own,
so the answer is known exactly."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tracetui.analysis import Results
from tracetui.core.checks import validate
from tracetui.core.config import SweepConfig
from tracetui.outputs.writer import Outputs
from tracetui.runner.sweep import Sweep
from tracetui.events.log import read_events

from .conftest import read_csv, run_main
from .stubs import worker as stub_worker

# (each test starts real processes from tracetui's fork server, which imports torch, transformers
# and TRL whatever the stand-ins need: seconds, not a unit test's time)
pytestmark = pytest.mark.slow

STUB = Path(__file__).parent / "stubs" / "trainer.py"


def _sweep(tmp_path, *flags, env=None):
    old = dict(os.environ)
    os.environ.update(env or {})
    try:
        return run_main("sweep", "--runs-dir", tmp_path / "runs", "--export", "csv", "-o", tmp_path / "out.csv", *flags,
                        "--", sys.executable, STUB, "--max_steps", 12)
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_a_script_sweep_ranks_the_splits_by_the_steps_they_report(tmp_path):
    proc = _sweep(tmp_path, "--splits", "1x4,2x2,4x1")
    assert proc.returncode == 0, proc.stderr
    rows = {r["trial"]: r for r in read_csv(tmp_path / "out.csv")}
    # 1x4: 4 calls of (8 + 2) ms each way, 4x1: 1 call of (8 + 8): 41 ms against 17 ms a step
    assert float(rows["1x4"]["step_ms_median"]) == 41.01 and float(rows["4x1"]["step_ms_median"]) == 17.01
    assert "4x1 is 2.41x faster than 1x4" in proc.stderr
    assert [t for t, r in rows.items() if r["recommended"] == "True"] == ["4x1"]
    assert all(r["status"] == "ok" and r["steps_measured"] == "9" for r in rows.values())
    assert f"tracetui: the recommendation's command: {sys.executable} {STUB} --max_steps 12 " \
           "--per_device_train_batch_size 4 --gradient_accumulation_steps 1" in proc.stderr


def test_a_run_killed_beside_its_finished_repeat_is_said_and_not_pooled(tmp_path):
    proc = _sweep(tmp_path, "--splits", "1x4,4x1", "--repeats", "2",
                  env={"STUB_CRASH_RUN": "1x4#1", "STUB_CRASH_AT": "6"})
    assert proc.returncode == 1, proc.stderr  # a run crashed: not a clean sweep
    row = {r["trial"]: r for r in read_csv(tmp_path / "out.csv")}["1x4"]
    assert (row["status"], row["runs"], row["runs_failed"], row["steps_measured"]) == ("ok", "1", "1", "9")
    assert "crashed in 1 of 2 runs (1x4#1: killed by SIGKILL" in row["message"]
    assert "tracetui: warning: 1x4: crashed in 1 of 2 runs" in proc.stderr
    assert "4x1 is 2.41x faster than 1x4" in proc.stderr  # the verdict stands on the runs that finished


class StubSweep(Sweep):
    """The built-in sweep, its trials run by the stand-in worker."""

    target = staticmethod(stub_worker.run)


def test_the_built_in_sweep_keeps_the_turns_of_head_starts_and_ranks_exactly(tmp_path):
    cfg = SweepConfig(splits="1x4,2x2,4x1", repeats=1, steps=8, warmup=2, device="cpu", runs_dir=str(tmp_path / "runs"),
                      allow_busy=True)
    sweep = StubSweep(cfg, validate(cfg))
    try:
        sweep.run()
    finally:
        sweep.close()
    events = read_events([sweep.log.path]).events
    started = [e for e in events if e["type"] == "run_started"]
    assert [e["label"] for e in started] == ["1x4", "2x2", "4x1"]
    # each run after the first was built during the warm-up of the one before (a head start)
    assert [bool(e.get("head_start")) for e in started] == [False, True, True]
    steps = {e["run_id"]: [] for e in started}
    for e in events:
        if e["type"] == "step":
            steps[e["run_id"]].append((e["t_begin"], e["t_end"], e["warmup"]))
    runs = [steps[e["run_id"]] for e in started]
    assert [len(s) for s in runs] == [8, 8, 8]
    # one run steps at a time: a run's first step begins after the last step of the one before
    for before, run in zip(runs, runs[1:]):
        assert before[-1][1] <= run[0][0]
    # and no step of any run overlaps another's
    every = sorted((b, e) for run in runs for b, e, _ in run)
    assert all(e <= b2 for (_, e), (b2, _) in zip(every, every[1:]))
    # the answer from the canned step times, exactly
    out = Outputs("-", "json")
    rows = out.rows(Results().extend(events))
    assert [(r["trial"], r["step_ms_median"]) for r in rows] == [("1x4", 41.01), ("2x2", 25.01), ("4x1", 17.01)]
    assert all(r["status"] == "ok" and r["steps_measured"] == 6 for r in rows)
    assert out.answer(rows).verdict.startswith("4x1 is 2.41x faster than 1x4")


def _stub_sweep(kind, tmp_path, **settings):
    """One sweep of ``kind`` on the CPU, one run a split, no head starts: the sweep, its events."""
    cfg = SweepConfig(repeats=1, device="cpu", runs_dir=str(tmp_path / "runs"), allow_busy=True, head_start=False,
                      **settings)
    sweep = kind(cfg, validate(cfg))
    try:
        sweep.run()
    finally:
        sweep.close()
    return sweep, read_events([sweep.log.path]).events


class DyingSweep(Sweep):
    """The built-in sweep, its worker dying before it has opened its run's log."""

    target = staticmethod(stub_worker.dies_at_once)


def test_a_forked_trial_that_dies_before_its_log_is_open_says_why(tmp_path):
    """Its last words went to the fork server's standard error (a file, not the terminal the
    monitor draws on): the row quotes them rather than an exit status alone."""
    sweep, events = _stub_sweep(DyingSweep, tmp_path, splits="1x4", steps=4, warmup=1)
    (row,) = Outputs("-", "json").rows(Results().extend(events))
    run_id = sweep.plan[0].run_id
    assert row["status"] != "ok" and "exited with status 1 without reporting (before its log was open, the fork " \
        f"server's output: RuntimeError: {run_id}: no start (a stand-in's failure))" in row["message"], row["message"]


def test_a_built_in_run_that_reads_back_another_split_keeps_its_plan_and_is_not_ranked(tmp_path):
    """The supervisor's check is every sweep's: a built-in run whose trainer reported 1x1 where 4x1
    was planned is the planned 4x1's row, a mismatch, unranked, its steps pooled with no one's."""
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "STUB_TRAINS").write_text("4x1:1x1")
    _, events = _stub_sweep(StubSweep, tmp_path, splits="1x4,4x1", steps=8, warmup=2)
    started = {e["label"]: e for e in events if e["type"] == "run_started"}
    assert sorted(started) == ["1x4", "4x1"] and started["4x1"]["trained"] == "1x1"
    assert (started["4x1"]["micro_batch"], started["4x1"]["grad_accum"]) == (4, 1)
    out = Outputs("-", "json")
    rows = {r["trial"]: r for r in out.rows(Results().extend(events))}
    assert rows["4x1"]["status"] == "mismatch" and rows["1x4"]["status"] == "ok" and rows["1x4"]["runs"] == 1
    assert out.answer(list(rows.values())).verdict == (
        "effective batch 4: no verdict (4x1 (trained 1x1) did not train what was planned, so the splits were "
        "not all measured)")


def test_a_server_log_variable_left_in_the_shell_names_no_file_the_server_removes(tmp_path):
    """The fork server removes the name of the file it writes its standard error to: a
    ``TRACETUI_SERVER_LOG`` left in the shell is not passed to it, even where tracetui cannot make
    a file of its own (its output then goes where tracetui's does)."""
    mine = tmp_path / "mine.txt"
    mine.write_text("keep")
    code = textwrap.dedent(f"""
        import os, tempfile
        import tracetui.runner.lifetime as lifetime

        os.environ["TRACETUI_SERVER_LOG"] = {str(mine)!r}
        def no_file(*a, **k):
            raise OSError(28, "No space left on device")
        lifetime.tempfile.mkstemp = no_file
        ctx = lifetime.trial_context()
        proc = ctx.Process(target=os.getpid)
        proc.start()
        proc.join(60)
        print(proc.exitcode)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip() == "0", proc.stderr
    assert mine.read_text() == "keep"
