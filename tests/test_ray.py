"""Trials as Ray work (``--ray``) on a real Ray cluster of several nodes on this machine
(:mod:`tests.raycluster`), against the stand-ins for tracetui's worker and for a training script:
the same answer as the local runner, rows that name their nodes, the search's pick, and the
settings refused in one line. The faults: ``test_ray_faults.py``."""

import queue
import re
import subprocess
import sys
import threading

import pytest

from tracetui.analysis import Results
from tracetui.core.config import ConfigError
from tracetui.outputs.writer import Outputs
from tracetui.tui.app import TraceApp
from tracetui.tui.sources import PreparingSource, ReplaySource
from tracetui.tui.widgets import DetailPane

from .conftest import ROOT, read_csv, run_main
from .raycluster import left_on_nodes, leftovers, stub_sweep
from .test_monitor_layout import drive
from .test_runner_stub import STUB

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]


def test_a_two_node_sweep_gives_the_local_answer_and_names_its_nodes(ray_cluster, tmp_path):
    _, _, here = stub_sweep(tmp_path, "here", head_start=False)
    sweep, outcomes, there = stub_sweep(tmp_path, "there", ray=ray_cluster.address)
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
    assert left_on_nodes(ray_cluster) == []  # (each lane's runner exited, its folders removed)
    # the monitor names the node of the run it shows
    app = TraceApp(ReplaySource(there), out_path=str(tmp_path / "summary.csv"))

    async def detail(pilot):
        return app.query_one(DetailPane).content(120).plain

    shown = drive(app, (120, 36), detail)
    assert re.search(r"· node \S+ \([0-9a-f]{8}\) ·", shown.splitlines()[0]), shown


def test_a_script_sweep_runs_on_the_nodes_with_its_probe_there(ray_cluster, tmp_path):
    proc = run_main("sweep", "--ray", ray_cluster.address, "--runs-dir", tmp_path / "runs", "--export", "csv", "-o",
                    tmp_path / "out.csv", "--splits", "1x4,2x2,4x1", "--", sys.executable, STUB, "--max_steps", 12)
    assert proc.returncode == 0, proc.stderr
    rows = {r["trial"]: r for r in read_csv(tmp_path / "out.csv")}
    assert float(rows["1x4"]["step_ms_median"]) == 41.01 and float(rows["4x1"]["step_ms_median"]) == 17.01
    assert all(r["status"] == "ok" and r["steps_measured"] == "9" and r["nodes"] for r in rows.values())
    assert "4x1 is 2.41x faster than 1x4" in proc.stderr
    assert "each run starts forked from its lane's fork server" in proc.stderr
    assert not leftovers()
    assert left_on_nodes(ray_cluster) == []  # (nor a run's socket folder, nor its probe's)


def test_a_trial_no_node_can_take_is_one_line(ray_cluster, tmp_path):
    from tracetui.runner import raycluster

    with pytest.raises(ConfigError) as err:
        raycluster.connect(ray_cluster.address, 2, True, [str(tmp_path)])
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


def test_the_search_over_two_nodes_picks_as_the_local_search(ray_cluster, tmp_path, monkeypatch):
    """``--search`` hands its runs to the cluster's lanes (fresh processes there) as to local
    ones: the same pick."""
    picks = {}
    for name, extra in (("here", dict(head_start=False)), ("there", dict(ray=ray_cluster.address))):
        if name == "there":
            monkeypatch.setenv("TRACETUI_START", "spawn")
        _, outcomes, events = stub_sweep(tmp_path, name, search=True, splits="1x8,2x4,4x2,8x1", effective_batch=[8], **extra)
        rows = Outputs("-", "json").rows(Results().extend(events))
        picks[name] = ([r["trial"] for r in rows if r["recommended"]], sorted(outcomes.values()))
    assert picks["there"] == picks["here"] and picks["here"][0] == ["8x1"], picks


def test_a_monitor_whose_sweep_cannot_be_built_says_why():
    """Whatever stops the monitor's sweep from being built is its one line, not a thread that
    died while the monitor kept saying what it checks."""
    def build():
        raise RuntimeError("no way")

    source, done = PreparingSource(build), threading.Event()
    source.on_done = done.set
    source.start(queue.Queue())
    assert done.wait(10) and source.error == "could not start the sweep: RuntimeError: no way"


def test_an_address_that_takes_no_connection_is_one_line_before_anything_runs(tmp_path, starts):
    """Ray itself retries an address that does not answer for minutes: refused in seconds, once the
    settings pass and before the fork server starts (seconds of imports) or a sweep is built."""
    for sub in ([], ["sweep"]):
        tail = ["--", sys.executable, str(STUB)] if sub else []
        proc = run_main(*sub, "--ray", "127.0.0.1:1", "--export", "csv", "-o", tmp_path / "o.csv", "--runs-dir",
                        tmp_path / "runs", *tail)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [proc.stderr.strip()], proc.stderr
        assert proc.stderr.startswith("tracetui: error: --ray: cannot reach a Ray cluster at 127.0.0.1:1 ("), proc.stderr
        assert not (tmp_path / "o.csv").exists()
    assert starts == []
