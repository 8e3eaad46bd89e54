"""The runner against a stand-in for a training script (tests/stubs/trainer.py): real processes,
a real socket, the planner, the supervisor and the outputs, and no torch: the step times are the
stub's own, so the answer is known exactly."""

import os
import sys
from pathlib import Path

from .conftest import read_csv, run_main

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
