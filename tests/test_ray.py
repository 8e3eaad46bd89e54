"""Trials as Ray work (``--ray``) on a real Ray cluster of several nodes on this machine (Ray's
own ``ray.cluster_utils.Cluster``, started once for the module), against the stand-ins for
tracetui's worker and for a training script: the same answer as the local runner, rows that
name their nodes, and faults (a Ray worker killed, a node lost, Ctrl-C) that end the run they
hit with its reason, keep what was measured, and leave nothing of the sweep on the cluster."""

import contextlib
import io
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from tracetui.analysis import Results
from tracetui.core.checks import validate
from tracetui.core.config import ConfigError, SweepConfig
from tracetui.events.log import read_events
from tracetui.outputs.writer import Outputs
from tracetui.tui.app import TraceApp
from tracetui.tui.sources import PreparingSource, ReplaySource
from tracetui.tui.widgets import DetailPane

from .conftest import ROOT, kill_left, read_csv, run_main, wait_until
from .test_monitor_layout import drive
from .test_runner_stub import STUB, StubSweep

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]

#: every process of the module's cluster carries it (its daemons, its workers and what they start)
MARK = "TRACETUI_TEST_RAY"


@pytest.fixture(scope="module")
def cluster():
    """A head node and one more, one CPU each, started once for the module."""
    os.environ[MARK] = uuid.uuid4().hex
    for attempt in range(3):  # (Ray gives a node 30 s to register: on a loaded machine, not always enough)
        c = Cluster(initialize_head=False)
        try:
            c.add_node(num_cpus=1, include_dashboard=False)
            c.add_node(num_cpus=1)
            c.wait_for_nodes()
            break
        except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception for it; started again, or re-raised
            c.shutdown()
            if attempt == 2 or "timed out during startup" not in str(exc):
                raise
    yield c
    c.shutdown()
    os.environ.pop(MARK, None)


@pytest.fixture
def fresh_lanes(monkeypatch):
    """Each run on the cluster a fresh process (``TRACETUI_START=spawn``, as ``--fresh``): the
    lanes start no fork server, which imports torch, transformers and TRL that the stand-in
    worker does not need. The forked lanes are the two-node sweep's and the script sweep's."""
    monkeypatch.setenv("TRACETUI_START", "spawn")


def _cmdline(pid) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")


def leftovers() -> list[str]:
    """The cluster's processes that are a sweep's: a lane's runner (Ray names an actor's
    process after its class), its fork server, a run's process (what runs beside Ray's own
    daemons and idle workers)."""
    mark = os.environ[MARK].encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
            cmd = _cmdline(pid)
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) if mark in env else 0
        except OSError:
            continue
        if parent == os.getpid():
            continue  # (this process's own fork server: the local sweep's)
        if mark in env and any(w in cmd for w in ("LaneRunner", "forkserver", "spawn_main", "trainer.py")):
            found.append(f"{pid}: {cmd[:120]}")
    return found


def _sweep(tmp_path: Path, name: str, on_event=None, **cfg):
    cfg = SweepConfig(**{**dict(splits="1x4,2x2,4x1", repeats=1, steps=8, warmup=2, device="cpu",
                                runs_dir=str(tmp_path / name), allow_busy=True), **cfg})
    sweep = StubSweep(cfg, validate(cfg), on_event=on_event)
    try:
        outcomes = sweep.run()
    finally:
        sweep.close()
    return sweep, outcomes, read_events([sweep.log.path]).events


def test_a_two_node_sweep_gives_the_local_answer_and_names_its_nodes(cluster, tmp_path):
    _, _, here = _sweep(tmp_path, "here", head_start=False)
    sweep, outcomes, there = _sweep(tmp_path, "there", ray=cluster.address)
    assert set(outcomes.values()) == {"ok"}
    assert sweep.start_line().startswith("each run starts forked from its lane's fork server (the libraries imported "
                                         "once per lane; --fresh: not) on the Ray cluster: 2 lanes over 2 nodes")
    out = Outputs("-", "json")
    rows = {name: out.rows(Results().extend(events)) for name, events in (("here", here), ("there", there))}
    keys = ("trial", "status", "step_ms_median", "steps_measured", "recommended")
    assert [[r[k] for k in keys] for r in rows["there"]] == [[r[k] for k in keys] for r in rows["here"]]
    assert out.answer(rows["there"]).verdict == out.answer(rows["here"]).verdict
    assert out.answer(rows["there"]).verdict.startswith("4x1 is 2.41x faster than 1x4")
    # every row names its node; the two lanes' nodes both ran a run
    nodes = {r["nodes"] for r in rows["there"]}
    assert len(nodes) == 2 and all(n and "(" in n for n in nodes)
    assert all(r["nodes"] is None for r in rows["here"])
    # the event log is whole: every step of every run, and each run's end
    assert sum(e["type"] == "step" for e in there) == sum(e["type"] == "step" for e in here) == 24
    assert sum(e["type"] == "run_finished" for e in there) == 3
    assert not leftovers()
    # the monitor names the node of the run it shows
    app = TraceApp(ReplaySource(there), out_path=str(tmp_path / "summary.csv"))

    async def detail(pilot):
        return app.query_one(DetailPane).content(120).plain

    shown = drive(app, (120, 36), detail)
    assert re.search(r"· node \S+ \([0-9a-f]{8}\) ·", shown.splitlines()[0]), shown


def test_a_script_sweep_runs_on_the_nodes_with_its_probe_there(cluster, tmp_path):
    proc = run_main("sweep", "--ray", cluster.address, "--runs-dir", tmp_path / "runs", "--export", "csv", "-o",
                    tmp_path / "out.csv", "--splits", "1x4,2x2,4x1", "--", sys.executable, STUB, "--max_steps", 12)
    assert proc.returncode == 0, proc.stderr
    rows = {r["trial"]: r for r in read_csv(tmp_path / "out.csv")}
    assert float(rows["1x4"]["step_ms_median"]) == 41.01 and float(rows["4x1"]["step_ms_median"]) == 17.01
    assert all(r["status"] == "ok" and r["steps_measured"] == "9" and r["nodes"] for r in rows.values())
    assert "4x1 is 2.41x faster than 1x4" in proc.stderr
    assert "each run starts forked from its lane's fork server" in proc.stderr
    assert not leftovers()


def test_a_killed_ray_worker_ends_its_run_with_the_reason_and_the_sweep_goes_on(cluster, tmp_path, fresh_lanes):
    """The Ray worker running 1x4 (its lane's runner) is killed (SIGKILL) at the run's first
    step: that run is crashed, saying so; the other runs finish, the lane's next on a new runner;
    nothing of the sweep is left on the cluster."""
    killed = []

    def kill_at_first_step(event):
        if event["type"] == "step" and event["run_id"].endswith("/1x4") and not killed:
            pid = event_pid[event["run_id"]]
            while "ray::" not in _cmdline(pid):  # up to the Ray worker it runs under
                pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        elif event["type"] == "run_started":
            event_pid[event["run_id"]] = event["pid"]

    event_pid: dict = {}
    sweep, outcomes, events = _sweep(tmp_path, "killed", on_event=kill_at_first_step, ray=cluster.address)
    assert killed
    by_label = {rid.rsplit("/", 1)[1]: status for rid, status in outcomes.items()}
    assert by_label == {"1x4": "crashed", "2x2": "ok", "4x1": "ok"}
    (failed,) = [e for e in events if e["type"] == "run_failed"]
    assert "its Ray worker on node" in failed["message"] and "died" in failed["message"]
    assert sum(e["type"] == "step" for e in events if not e["run_id"].endswith("/1x4")) == 16
    wait_until(lambda: not leftovers(), 20)


def test_a_lost_node_ends_its_run_and_its_lane_and_the_sweep_goes_on(cluster, tmp_path, fresh_lanes):
    node = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    lost = []

    def lose_it(event):
        if event["type"] == "run_started" and event.get("node", "").endswith(f"({node.node_id[:8]})") and not lost:
            lost.append(event["run_id"])
            threading.Thread(target=cluster.remove_node, args=(node, False)).start()

    sweep, outcomes, events = _sweep(tmp_path, "lost", on_event=lose_it, ray=cluster.address,
                                     splits="1x4,2x2,4x1,1x2,2x1", effective_batch=[2, 4])
    assert lost and outcomes[lost[0]] == "crashed"
    (failed,) = [e for e in events if e["type"] == "run_failed"]
    assert failed["run_id"] == lost[0] and "was lost" in failed["message"]
    assert "its lane takes no more runs" in failed["message"]
    assert sorted(s for rid, s in outcomes.items() if rid != lost[0]) == ["ok"] * 4
    ran_on = {e["node"] for e in events if e["type"] == "run_started" and e["run_id"] != lost[0]}
    assert not any(n.endswith(f"({node.node_id[:8]})") for n in ran_on)
    wait_until(lambda: not leftovers(), 20)


def test_ctrl_c_cancels_every_task_and_keeps_what_was_measured(cluster, tmp_path):
    """A real CLI (each run a fresh process: ``--fresh``) stopped by Ctrl-C while its runs step
    on the cluster. (A hang-up takes the same path, :class:`~tracetui.session.signals.StopSignals`,
    with its own status; tested without Ray.)"""
    runs, sig = tmp_path / "runs", signal.SIGINT
    argv = ["sweep", "--ray", cluster.address, "--fresh", "--runs-dir", runs, "--export", "csv", "-o",
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


def test_a_trial_no_node_can_take_is_one_line(cluster, tmp_path):
    from tracetui.runner import raycluster

    with pytest.raises(ConfigError) as err:
        raycluster.connect(cluster.address, 2, True, [str(tmp_path)])
    assert str(err.value).startswith("--ray: no node of the cluster can take a trial (node ")
    assert "0 GPUs, a trial needs 2" in str(err.value)


def test_ray_not_installed_is_one_line_and_exit_2(tmp_path):
    code = ("import sys; sys.modules['ray'] = None\nfrom tracetui.cli.main import main\n"
            f"sys.exit(main(['sweep', '--ray', '--runs-dir', {str(tmp_path)!r}, '--', sys.executable, {str(STUB)!r}]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("tracetui: error: --ray: Ray is not installed here") and "pip install" in line


def test_ray_with_this_machines_gpus_or_nnodes_is_one_line(tmp_path):
    for flags, first in ((["--gpus", "0"], "tracetui: error: --gpus: picks this machine's GPUs, but --ray"),
                         (["--nnodes", "2", "--rdzv-endpoint", "h:1"], "tracetui: error: --nnodes: spreads a trial")):
        proc = run_main("--ray", *flags, "--dry-run", "--runs-dir", tmp_path)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [proc.stderr.strip()], proc.stderr
        assert proc.stderr.startswith(first), proc.stderr


def test_the_search_over_two_nodes_picks_as_the_local_search(cluster, tmp_path, monkeypatch):
    """``--search`` hands its runs to the cluster's lanes (fresh processes there) as to local
    ones: the same pick."""
    picks = {}
    for name, extra in (("here", dict(head_start=False)), ("there", dict(ray=cluster.address))):
        if name == "there":
            monkeypatch.setenv("TRACETUI_START", "spawn")
        _, outcomes, events = _sweep(tmp_path, name, search=True, splits="1x8,2x4,4x2,8x1", effective_batch=[8], **extra)
        rows = Outputs("-", "json").rows(Results().extend(events))
        picks[name] = ([r["trial"] for r in rows if r["recommended"]], sorted(outcomes.values()))
    assert picks["there"] == picks["here"] and picks["here"][0] == ["8x1"], picks


def test_a_sweep_built_where_stderr_is_no_file_connects_and_keeps_rays_lines_apart(cluster, tmp_path, fresh_lanes):
    """The monitor builds its sweep on a thread while stderr is Textual's capture, which has no
    file behind it (Ray's fault handler wanted one: the build died there, the monitor kept saying
    "checking"). Ray's own start-up lines go to the sweep's ray.log, not over the monitor."""
    said, got = io.StringIO(), {}

    def build():
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            cfg = SweepConfig(splits="1x4", repeats=1, steps=2, warmup=0, device="cpu", allow_busy=True,
                              runs_dir=str(tmp_path), ray=cluster.address)
            sweep = StubSweep(cfg, validate(cfg))
            got["line"] = sweep.start_line()
            sweep.close()
            got["log"] = (sweep.dir / "ray.log").read_text()

    thread = threading.Thread(target=build)
    thread.start()
    thread.join(120)
    assert got.get("line", "").startswith("each run starts as a fresh process"), got
    assert said.getvalue() == "" and "log" in got


def test_a_monitor_whose_sweep_cannot_be_built_says_why():
    """Whatever stops the monitor's sweep from being built is its one line, not a thread that
    died while the monitor kept saying what it checks."""
    def build():
        raise RuntimeError("no way")

    source, done = PreparingSource(build), threading.Event()
    source.on_done = done.set
    source.start(queue.Queue())
    assert done.wait(10) and source.error == "could not start the sweep: RuntimeError: no way"


def test_an_address_that_takes_no_connection_is_one_line_before_anything_runs(tmp_path):
    """Ray itself retries an address that does not answer for minutes: refused in seconds."""
    for sub in ([], ["sweep"]):
        tail = ["--", sys.executable, str(STUB)] if sub else []
        proc = run_main(*sub, "--ray", "127.0.0.1:1", "--export", "csv", "-o", tmp_path / "o.csv", "--runs-dir",
                        tmp_path / "runs", *tail)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [proc.stderr.strip()], proc.stderr
        assert proc.stderr.startswith("tracetui: error: --ray: cannot reach a Ray cluster at 127.0.0.1:1 ("), proc.stderr
        assert not (tmp_path / "o.csv").exists()
