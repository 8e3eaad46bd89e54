"""Interleaved runs (tracetui.runner.turns): the runs of a grid resident at once, taking turns.

Real sweeps of the tiny preset on the CPU (``--interleave``):
real forked workers, real pipes to the coordinator, a real trainer in each."""

import json
from pathlib import Path

from .conftest import run_main

from tracetui.config import ConfigError, SweepConfig, validate
from tracetui.plan import GridPlanner
from tracetui.runner.sweep import interleaving, memory_share
from tracetui.search import make_planner, wants_search
from tracetui.trial import Trial


def _events(runs_dir: Path) -> list[dict]:
    (log,) = list(runs_dir.glob("*/events.jsonl"))
    return [json.loads(line) for line in log.read_text().splitlines()]


def _steps(events: list[dict]) -> list[dict]:
    """Each step with when it began and ended on the host clock, in the order they began."""
    steps = [dict(e, end=e["t_end"], begin=e["t_end"] - e["wall_ms"] / 1000)
             for e in events if e["type"] == "step"]
    return sorted(steps, key=lambda s: s["begin"])


def test_interleaved_runs_take_turns_and_never_step_together(tmp_path):
    out = tmp_path / "sum.json"
    proc = run_main("--splits", "1x4,2x2,4x1", "--steps", "7", "--warmup", "1", "--interleave",
                    "--turn-steps", "2", "--runs-dir", tmp_path / "runs", "--export", "json", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "runs interleaved: 3 resident, taking turns of 2 step(s)" in proc.stderr
    events = _events(tmp_path / "runs")
    started = [e for e in events if e["type"] == "run_started"]
    assert len(started) == 3 and all(e["interleaved"]["resident"] == 3 for e in started)
    assert sum(e["type"] == "run_finished" for e in events) == 3
    steps = _steps(events)
    assert len(steps) == 21
    # no run steps while another does: each step begins after the one before it ended
    for a, b in zip(steps, steps[1:]):
        assert b["begin"] >= a["end"] - 0.005, (a["run_id"], a["step"], b["run_id"], b["step"])
    # turns of two steps, round the three runs: the run changes every second step
    order = [s["run_id"].split("/")[-1] for s in steps]
    blocks = [order[i:i + 2] for i in range(0, 18, 2)]
    assert all(len(set(b)) == 1 for b in blocks), order
    assert len({b[0] for b in blocks[:3]}) == 3, order
    # the step clock restarts with each turn: the first step of a turn is flagged, and no step
    # holds the wait for its turn (a wait is at least one other run's two steps)
    firsts = [s for s in steps if s.get("turn_first")]
    assert len(firsts) >= 9
    walls = sorted(s["wall_ms"] for s in steps if not s["warmup"])
    assert walls[-1] < 3 * walls[len(walls) // 2], walls
    # every run's starts came before any measured step: all three were ready first
    first_step = steps[0]["begin"]
    assert all(e["t"] <= first_step + 0.05 for e in events if e["type"] == "run_settings")
    rows = json.loads(out.read_text())["splits"]
    assert {r["trial"]: r["status"] for r in rows} == {"1x4": "ok", "2x2": "ok", "4x1": "ok"}
    assert all(r["runs"] == 1 and r["steps_measured"] == 6 and r["interleaved"] == 3 for r in rows)


def test_a_run_out_of_memory_under_its_share_runs_again_alone(tmp_path):
    # 2.4 GiB shared by two runs: 1.2 GiB each, less than a tiny-preset trial takes (about 1.6)
    out = tmp_path / "sum.json"
    proc = run_main("--splits", "1x4,4x1", "--steps", "6", "--warmup", "1", "--interleave",
                    "--interleave-memory", "2.4", "--runs-dir", tmp_path / "runs", "--export", "json", "-o", out)
    assert proc.returncode == 0, proc.stderr
    events = _events(tmp_path / "runs")
    crowded = [e for e in events if e["type"] == "run_failed"]
    assert crowded and all(e["kind"] == "crowded" for e in crowded), crowded
    assert all("under its share (1.2 GiB)" in e["message"] for e in crowded)
    again = [e for e in events if e["type"] == "run_started" and "alone" in e.get("why", "")]
    assert len(again) == len(crowded)
    assert all("interleaved" not in e for e in again)  # alone: no share, no turns
    finished = {e["run_id"] for e in events if e["type"] == "run_finished"}
    assert {e["run_id"] for e in again} <= finished
    # the runs that ran alone did not overlap anything
    steps = _steps(events)
    for a, b in zip(steps, steps[1:]):
        assert b["begin"] >= a["end"] - 0.005
    assert all(e["run_id"].endswith("-alone") for e in again)
    assert proc.stderr.count("started alone") == len(again)  # headless: no run of the plan's count
    rows = {r["trial"]: r for r in json.loads(out.read_text())["splits"]}
    for e in crowded:
        row = rows[e["run_id"].split("/")[-1]]
        assert row["status"] == "ok" and row["runs"] == 1  # the crowded attempt is no run of the split
        assert "under its share" in row["message"]
    # the log reads back the same, crowded runs and all (``tracetui show``)
    (log,) = list((tmp_path / "runs").glob("*/events.jsonl"))
    shown = run_main("show", log, "--export", "json", "-o", tmp_path / "shown.json")
    assert shown.returncode == 0 and "bad line" not in shown.stderr, shown.stderr
    again_rows = {r["trial"]: r for r in json.loads((tmp_path / "shown.json").read_text())["splits"]}
    assert {k: (r["status"], r["runs"]) for k, r in again_rows.items()} == {
        k: (r["status"], r["runs"]) for k, r in rows.items()}
    # stopped before they could go again alone, the crowded attempts alone: no runs, no steps,
    # no ranking (the same log without the runs that went alone)
    kept = [line for line in log.read_text().splitlines() if "-alone" not in json.loads(line)["run_id"]]
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join(kept) + "\n")
    cut = run_main("show", short, "--export", "json", "-o", tmp_path / "short.json")
    assert cut.returncode in (0, 1), cut.stderr
    cut_rows = json.loads((tmp_path / "short.json").read_text())
    for e in crowded:
        row = next(r for r in cut_rows["splits"] if r["trial"] == e["run_id"].split("/")[-1])
        assert row["status"] == "crowded" and row["runs"] == 0 and not row.get("step_ms_median")
    assert not any(r["trial"] in cut_rows["recommendation"] for r in cut_rows["splits"] if r["status"] == "crowded")


def test_a_run_that_cannot_start_does_not_hold_the_others(tmp_path):
    # liger needs a GPU: its runs are unavailable here and never seat; the others must not wait
    out = tmp_path / "s.json"
    proc = run_main("--splits", "2x2,4x1", "--vary", "liger=off,on", "--steps", "8", "--warmup", "1",
                    "--repeats", "2", "--interleave", "--runs-dir", tmp_path / "runs", "--export", "json", "-o", out)
    assert proc.returncode == 0, proc.stderr
    events = _events(tmp_path / "runs")
    kinds = sorted(e.get("kind", "ok") for e in events if e["type"] in ("run_failed", "run_finished"))
    assert kinds == ["ok"] * 4 + ["unavailable"] * 4, kinds
    # two runs of each split, at the same moment: the intervals say what they cover
    summary = json.loads(out.read_text())
    assert "runs interleaved: intervals cover how runs differ at one moment" in summary["note"]
    timed = [r for r in summary["splits"] if r.get("step_ms_median")]
    assert len(timed) == 2 and all(r["ci_scope"] == "runs" and r["interleaved"] == 4 for r in timed)


def test_when_runs_are_interleaved():
    trials = [Trial(1, 4), Trial(4, 1)]
    grid = GridPlanner(trials, 2)
    assert interleaving(SweepConfig(), grid, [None], "cuda")[0] == 0  # asked for only
    on = SweepConfig(interleave=True)
    assert interleaving(on, grid, [None], "cuda") == (4, "")
    assert interleaving(on, grid, [None], "cpu") == (4, "")
    assert interleaving(on, grid, [0, 1], "cuda")[1] == "runs go side by side on several GPUs"
    assert "until-confident" in interleaving(SweepConfig(interleave=True, until_confident=5.0), grid, [None], "cuda")[1]
    assert interleaving(on, GridPlanner(trials[:1], 1), [None], "cuda")[0] == 0
    many = GridPlanner([Trial(m, 64 // m) for m in (1, 2, 4, 8, 16, 32, 64)], 2)
    assert interleaving(on, many, [None], "cuda")[0] == 8
    # above a handful of runs the sweep would search; --interleave asks for the grid's runs
    seven = [Trial(m, 64 // m) for m in (1, 2, 4, 8, 16, 32, 64)]
    assert wants_search(SweepConfig(), seven)[0] and not wants_search(on, seven)[0]
    assert wants_search(on, seven, own_runs=False)[0]  # a script's runs are never interleaved
    refused = SweepConfig(interleave=True, until_confident=5.0)
    assert wants_search(refused, seven)[0]  # refused: the search stays, and the reason is the real one
    assert "until-confident" in interleaving(refused, make_planner(refused, seven), [None], "cuda")[1]
    # shares: what is given, less a CUDA context a run on a GPU; none on the CPU by default
    assert memory_share(SweepConfig(interleave_memory=100.0), 4, "cuda") == 24.0
    assert memory_share(SweepConfig(interleave_memory=10.0), 4, "cpu") == 2.5
    assert memory_share(SweepConfig(), 4, "cpu") is None


def test_bad_interleave_settings_are_refused_in_one_line():
    for kwargs, flag in (({"turn_steps": 0}, "--turn-steps"),
                         ({"interleave_memory": -1.0}, "--interleave-memory")):
        try:
            validate(SweepConfig(**kwargs))
        except ConfigError as err:
            assert flag in str(err) and "\n" not in str(err)
        else:
            raise AssertionError(f"{kwargs} was accepted")


def test_no_turn_is_given_while_a_run_starts_or_exits_or_its_lane_is_between_runs():
    """The coordinator with real pipes (this test plays the runs and their lane): one turn at a
    time, round the ready runs in the order they became ready; none while a run is starting,
    while one that ended has not been reaped, or while its lane has not yet seated its next run
    (whose start is heavy work); a lane that waits instead lets the others go on."""
    import multiprocessing as mp

    from tracetui.runner.turns import Turns

    turns = Turns(mp.get_context("fork"), block=1, hold=1)  # one lane: this test

    def go(conn, timeout=2.0) -> bool:
        if conn.poll(timeout):
            assert conn.recv() == "go"
            return True
        return False

    try:
        a, b = turns.seat("a"), turns.seat("b")
        a.send(("ready", 1))
        b.send(("ready", 2))
        assert go(a) and not go(b, 0.3)  # one at a time
        a.send(("yield",))
        assert go(b) and not go(a, 0.3)
        assert turns.waiting("a") and not turns.waiting("b")
        b.send(("yield",))
        assert go(a)
        a.send(("end",))  # a is done: its process exits, and nothing steps until it is reaped
        assert not go(b, 0.3)
        turns.unseat("a")  # reaped; this lane now starts its next run
        assert not go(b, 0.3)
        c = turns.seat("c")  # ... and c is starting
        assert not go(b, 0.3)
        c.send(("ready", 3))
        assert go(b) and not go(c, 0.3)  # round the ready runs: after a comes b
        b.send(("yield",))
        assert go(c)
        c.send(("end",))
        turns.unseat("c")
        assert not go(b, 0.3)  # c's lane is between runs
        turns.idle()  # it waits instead (for a run that goes alone): b goes on
        assert go(b)
        assert turns.turns_given == 6
    finally:
        turns.close()
