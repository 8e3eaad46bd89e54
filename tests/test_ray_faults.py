"""Faults of trials run as Ray work (``--ray``) on a real Ray cluster of several nodes on this
machine (:mod:`tests.raycluster`): a Ray worker killed, a node lost, Ctrl-C, each ends the run it
hit with its reason, keeps what was measured and leaves nothing of the sweep on the cluster; a
sweep built where stderr is no file."""

import contextlib
import io
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tracetui.core.checks import validate
from tracetui.core.config import SweepConfig

from .conftest import ROOT, kill_left, read_csv, wait_until
from .raycluster import cmdline, leftovers, stub_sweep
from .test_runner_stub import STUB, StubSweep

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray-faults")]


def test_a_killed_ray_worker_ends_its_run_with_the_reason_and_the_sweep_goes_on(ray_cluster, tmp_path, fresh_lanes):
    """The Ray worker running 1x4 (its lane's runner) is killed (SIGKILL) at the run's first
    step: that run is crashed, saying so; the other runs finish, the lane's next on a new runner;
    nothing of the sweep is left on the cluster."""
    killed = []

    def kill_at_first_step(event):
        if event["type"] == "step" and event["run_id"].endswith("/1x4") and not killed:
            pid = event_pid[event["run_id"]]
            while "ray::" not in cmdline(pid):  # up to the Ray worker it runs under
                pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        elif event["type"] == "run_started":
            event_pid[event["run_id"]] = event["pid"]

    event_pid: dict = {}
    sweep, outcomes, events = stub_sweep(tmp_path, "killed", on_event=kill_at_first_step, ray=ray_cluster.address)
    assert killed
    by_label = {rid.rsplit("/", 1)[1]: status for rid, status in outcomes.items()}
    assert by_label == {"1x4": "crashed", "2x2": "ok", "4x1": "ok"}
    (failed,) = [e for e in events if e["type"] == "run_failed"]
    assert "its Ray worker on node" in failed["message"] and "died" in failed["message"]
    assert sum(e["type"] == "step" for e in events if not e["run_id"].endswith("/1x4")) == 16
    wait_until(lambda: not leftovers(), 20)


def test_a_lost_node_ends_its_run_and_its_lane_and_the_sweep_goes_on(ray_cluster, tmp_path, fresh_lanes):
    node = ray_cluster.add_node(num_cpus=1)
    ray_cluster.wait_for_nodes()
    lost = []

    def lose_it(event):
        if event["type"] == "run_started" and event.get("node", "").endswith(f"({node.node_id[:8]})") and not lost:
            lost.append(event["run_id"])
            threading.Thread(target=ray_cluster.remove_node, args=(node, False)).start()

    sweep, outcomes, events = stub_sweep(tmp_path, "lost", on_event=lose_it, ray=ray_cluster.address,
                                     splits="1x4,2x2,4x1,1x2,2x1", effective_batch=[2, 4])
    assert lost and outcomes[lost[0]] == "crashed"
    (failed,) = [e for e in events if e["type"] == "run_failed"]
    assert failed["run_id"] == lost[0] and "was lost" in failed["message"]
    assert "its lane takes no more runs" in failed["message"]
    assert sorted(s for rid, s in outcomes.items() if rid != lost[0]) == ["ok"] * 4
    ran_on = {e["node"] for e in events if e["type"] == "run_started" and e["run_id"] != lost[0]}
    assert not any(n.endswith(f"({node.node_id[:8]})") for n in ran_on)
    wait_until(lambda: not leftovers(), 20)


def test_ctrl_c_cancels_every_task_and_keeps_what_was_measured(ray_cluster, tmp_path):
    """A real CLI (each run a fresh process: ``--fresh``) stopped by Ctrl-C while its runs step
    on the cluster. (A hang-up takes the same path, :class:`~tracetui.session.signals.StopSignals`,
    with its own status; tested without Ray.)"""
    runs, sig = tmp_path / "runs", signal.SIGINT
    argv = ["sweep", "--ray", ray_cluster.address, "--fresh", "--runs-dir", runs, "--export", "csv", "-o",
            tmp_path / "out.csv", "--splits", "1x4,4x1", "--repeats", 1, "--", sys.executable, STUB, "--max_steps", 400,
            "--stub_step_ms", 50]
    proc = subprocess.Popen([sys.executable, "-m", "tracetui", *map(str, argv)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        def stepping():
            logs = list(runs.glob("*/events.jsonl"))
            return bool(logs) and logs[0].read_text().count('"step"') >= 10
        try:
            wait_until(stepping, 120)
        except AssertionError:
            proc.kill()
            pytest.fail("no steps in 120 s: " + proc.communicate()[1][-3000:])
        assert leftovers()  # (the runs are there to be cancelled)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=90)
    finally:
        kill_left(proc)
    assert proc.returncode == 128 + sig, err
    rows = read_csv(tmp_path / "out.csv")
    assert rows and all(r["status"] == "interrupted" for r in rows), err
    assert sum(int(r["steps_measured"] or 0) for r in rows) > 0
    wait_until(lambda: not leftovers(), 20)


def test_a_sweep_built_where_stderr_is_no_file_connects_and_keeps_rays_lines_apart(ray_cluster, tmp_path, fresh_lanes):
    """The monitor builds its sweep on a thread while stderr is Textual's capture, which has no
    file behind it (Ray's fault handler wanted one: the build died there, the monitor kept saying
    "checking"). Ray's own start-up lines go to the sweep's ray.log, not over the monitor."""
    said, got = io.StringIO(), {}

    def build():
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            cfg = SweepConfig(splits="1x4", repeats=1, steps=2, warmup=0, device="cpu", allow_busy=True,
                              runs_dir=str(tmp_path), ray=ray_cluster.address)
            sweep = StubSweep(cfg, validate(cfg))
            got["line"] = sweep.start_line()
            sweep.close()
            got["log"] = (sweep.dir / "ray.log").read_text()

    thread = threading.Thread(target=build)
    thread.start()
    thread.join(120)
    assert got.get("line", "").startswith("each run starts as a fresh process"), got
    assert said.getvalue() == "" and "log" in got
