"""End to end: the real CLI, real spawned workers, real TRL training of the tiny preset."""

import json

import pytest

from tracetui.analysis import Results
from tracetui.events.log import read_events

from .conftest import read_csv

pytestmark = pytest.mark.slow


def test_headless_sweep_writes_three_ok_rows(tiny_sweep):
    proc = tiny_sweep["proc"]
    assert proc.returncode == 0, proc.stderr
    rows = read_csv(tiny_sweep["out"])
    assert [r["split"] for r in rows] == ["1x4", "2x2", "4x1"]
    for r in rows:
        assert r["status"] == "ok"
        assert int(r["steps_measured"]) == 6
        phases = sum(float(r[c]) for c in ("data_ms", "forward_ms", "backward_ms", "optimizer_ms", "other_ms"))
        median = float(r["step_ms_median"])
        assert abs(phases - median) / median < 0.005, (r["split"], phases, median)  # they add up
        assert r["activation_checkpointing"] == "False"  # read back from the trainer's model
        assert r["ci_scope"] == "steps"  # one run each: the table says so
        assert float(r["tokens_per_s"]) > 0 and float(r["samples_per_s"]) > 0
        assert float(r["step_ms_p10"]) <= median <= float(r["step_ms_p90"])
        assert float(r["train_runtime_s"]) > 0
        assert r["gpu_util_mean"] == ""  # CPU: no GPU samples, not zeros
    speedups = [float(r["speedup_vs_slowest"]) for r in rows]
    assert min(speedups) == pytest.approx(1.0) and max(speedups) >= 1.0
    # progress lines on stderr, one per run start
    assert proc.stderr.count("started on CPU") == 3
    # how long the runs left will take: at the start from rough priors, then after each run but
    # the last from what the finished runs measured
    estimates = [line for line in proc.stderr.splitlines() if line.startswith("tracetui: estimate: about ")]
    assert len(estimates) == 3, proc.stderr
    assert "rough" in estimates[0] and "for 3 run(s) left" in estimates[0]
    assert "from 1 finished run(s)" in estimates[1] and "for 2 run(s) left" in estimates[1]
    assert "for 1 run(s) left" in estimates[2]


def test_same_seed_same_loss_across_splits(tiny_sweep):
    rows = read_csv(tiny_sweep["out"])
    losses = [float(r["final_loss"]) for r in rows]
    assert max(losses) - min(losses) < 1e-3 * max(losses)
    assert all(r["loss_ok"] == "True" for r in rows)


def test_jsonl_holds_every_event(tiny_sweep):
    report = read_events([tiny_sweep["jsonl"]])
    assert report.skipped == 0
    types = [e["type"] for e in report.events]
    assert types.count("run_started") == 3 and types.count("run_finished") == 3
    assert types.count("step") == 3 * 9
    started = [e for e in report.events if e["type"] == "run_started"]
    for e in started:
        env = e["env"]
        for key in ("torch", "transformers", "trl", "peft", "python"):
            assert env[key]
    steps = [e for e in report.events if e["type"] == "step"]
    by_run = {}
    for e in steps:
        by_run.setdefault(e["run_id"], []).append(e)
    for run_id, evs in by_run.items():
        assert [e["step"] for e in evs] == list(range(1, 10))
        assert [e["warmup"] for e in evs] == [True] * 3 + [False] * 6
        ga = next(e["grad_accum"] for e in started if e["run_id"] == run_id)
        for e in evs:
            # per-micro-batch phases are kept
            assert len(e["forward_ms"]) == ga and len(e["backward_ms"]) == ga
            assert e["samples"] == 4 and e["tokens"] == 4 * 64  # every row is --seq-len long
            parts = e["data_ms"] + sum(e["forward_ms"]) + sum(e["backward_ms"]) + e["optimizer_ms"] + e["other_ms"]
            assert parts == pytest.approx(e["wall_ms"], rel=1e-6)
    # the summary can be rebuilt from the log alone
    results = Results().extend(report.events)
    assert {r.status for r in results.runs.values()} == {"ok"}


def test_steps_csv(tiny_sweep):
    rows = read_csv(tiny_sweep["steps"])
    assert len(rows) == 27
    one = [r for r in rows if r["split"] == "1x4"][0]
    assert len(one["forward_ms_each"].split()) == 4


def test_json_export_matches_csv(tiny_sweep, tmp_path):
    from .conftest import run_cli

    out = tmp_path / "again.json"
    proc = run_cli("show", tiny_sweep["jsonl"], "--export", "json", "-o", out)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    csv_rows = read_csv(tiny_sweep["out"])
    assert [s["split"] for s in data["splits"]] == [r["split"] for r in csv_rows]
    for s, r in zip(data["splits"], csv_rows):
        assert s["step_ms_median"] == pytest.approx(float(r["step_ms_median"]), rel=1e-5)
    assert "effective batch 4" in data["verdict"]
