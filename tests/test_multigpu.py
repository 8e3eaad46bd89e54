"""Multi-GPU logic on CPUs: DDP through real torchrun with gloo (world size 2), and parallel
lanes scheduled over a fake device list (no GPU here)."""

import pytest

from tracetui.config import SweepConfig, validate
from tracetui.runner.sweep import Sweep
from tracetui.store import read_events

from .conftest import read_csv, run_cli

pytestmark = pytest.mark.slow


def test_ddp_world_size_2_with_gloo(tmp_path):
    out = tmp_path / "ddp.csv"
    proc = run_cli("--export", "csv", "-o", out, "--nproc-per-node", 2, "--effective-batch", 8,
                   "--splits", "1x4,4x1", "--steps", 5, "--warmup", 1, "--seq-len", 64, "--runs-dir", tmp_path / "runs")
    assert proc.returncode == 0, proc.stderr
    rows = read_csv(out)
    assert [(r["split"], r["world_size"], r["effective_batch"], r["status"]) for r in rows] == [
        ("1x4x2", "2", "8", "ok"), ("4x1x2", "2", "8", "ok")]
    assert all(r["ranks"] == "2" for r in rows)
    ga4 = rows[0]
    assert float(ga4["comm_ms"]) >= 0 and float(ga4["backward_sync_ms"]) > 0
    events = read_events(list((tmp_path / "runs").glob("*/events.jsonl"))).events
    steps = [e for e in events if e["type"] == "step"]
    assert {e["rank"] for e in steps} == {0, 1}
    for e in steps:
        if e["run_id"].endswith("1x4x2"):
            assert len(e["backward_ms"]) == 4 and e["backward_sync_ms"] == e["backward_ms"][-1]
    # both ranks of a run share its id, and each says which rank it is
    started = [e for e in events if e["type"] == "run_started"]
    assert sorted((e["run_id"].rsplit("/", 1)[1], e["rank"]) for e in started) == [
        ("1x4x2", 0), ("1x4x2", 1), ("4x1x2", 0), ("4x1x2", 1)]


def test_parallel_lanes_on_a_fake_device_list(tmp_path):
    cfg = SweepConfig(splits="1x4,2x2,4x1", repeats=1, steps=4, warmup=1, seq_len=32, runs_dir=str(tmp_path), device="cpu")
    sweep = Sweep(cfg, validate(cfg), lanes=[0, 1])
    outcomes = sweep.run()
    sweep.close()
    assert sorted(outcomes.values()) == ["ok", "ok", "ok"]
    events = read_events([sweep.log.path]).events
    started = {e["run_id"].rsplit("/", 1)[1]: e for e in events if e["type"] == "run_started"}
    assert {e["gpu"] for e in started.values()} == {0, 1}
    finished = {e["run_id"].rsplit("/", 1)[1]: e["t"] for e in events if e["type"] == "run_finished"}
    # the first two runs overlapped in time: one per lane
    first, second = "1x4", "2x2"
    assert started[second]["t"] < finished[first] and started[first]["t"] < finished[second]
    from tracetui.analysis import Results, summarise

    rows = summarise(Results().extend(events))
    assert {r["gpus"] for r in rows} <= {"0", "1"}


def test_gpus_refused_without_gpus(capsys):
    from tracetui.cli import main
    from tracetui.runner.preflight import gpu_count

    if gpu_count() > 0:
        pytest.skip("this machine has GPUs")
    assert main(["--export", "csv", "--gpus", "0,1"]) == 2
    assert "--gpus: GPU 0 does not exist (this machine has 0)" in capsys.readouterr().err
