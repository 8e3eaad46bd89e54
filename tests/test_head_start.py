"""Head starts (tracetui.runner.headstarts, the turns of tracetui.runner.turns): each next run of a grid (of a search:
each it has decided already) starts while the one before takes its warm-up steps, and waits, built, for its turn.

Real sweeps of the tiny preset on the CPU: real forked workers, real pipes to the coordinator,
a real trainer in each; and the coordinator's rules with real pipes."""

import json
import multiprocessing as mp
import threading
import time
from pathlib import Path

import pytest

from .conftest import ROOT, read_csv, run_main

from tracetui.core.config import SweepConfig
from tracetui.planning.plan import GridPlanner
from tracetui.runner.headstarts import head_starts_apply
from tracetui.runner.turns import Turns
from tracetui.events.schema import WAITING_STAGE
from tracetui.planning.search import make_planner
from tracetui.core.trial import Trial


def _runs(runs_dir: Path) -> tuple[list[dict], dict[str, dict]]:
    """The log's events, and per run: when its process started (host clock), when it was built
    and waiting, and its steps (begin, end, warm-up)."""
    (log,) = list(runs_dir.glob("*/events.jsonl"))
    events = [json.loads(line) for line in log.read_text().splitlines()]
    runs: dict[str, dict] = {}
    for e in events:
        if e["type"] == "sweep":  # the sweep's own times: of no run
            continue
        r = runs.setdefault(e["run_id"], {"steps": []})
        if e["type"] == "run_stage":
            r.setdefault("forked", e["t"] - e["elapsed_s"])
            r["stages"] = e["stages"]
            if e["stage"] == WAITING_STAGE:  # dated from when it asked for its turn
                r["ready"] = r["forked"] + e["elapsed_s"]
        elif e["type"] == "run_started":
            r["started"] = e
        elif e["type"] == "step":
            r["steps"].append((e["t_end"] - e["wall_ms"] / 1000, e["t_end"], e["warmup"]))
        elif e["type"] in ("run_finished", "run_failed"):
            r["end"] = e
    return events, runs


@pytest.mark.slow
def test_each_next_run_starts_in_the_warm_up_and_never_beside_a_measured_step(tiny_sweep):
    proc = tiny_sweep["proc"]
    assert proc.returncode == 0, proc.stderr
    assert "head starts: each next run starts during the one before's warm-up (3 steps" in proc.stderr
    events, runs = _runs(tiny_sweep["dir"] / "runs")
    order = sorted(runs.values(), key=lambda r: r["forked"])
    assert len(order) == 3 and all(r["end"]["type"] == "run_finished" for r in order)
    # the first run starts alone; each later one while the run before it is inside its warm-up:
    # after its first step, before its last warm-up step ended
    assert not order[0]["started"].get("head_start")
    # the first run's turn comes at once: it never says it waits for one
    assert WAITING_STAGE not in order[0]["stages"]
    # (its readiness then: built, about to ask for its first turn)
    order[0]["ready"] = order[0]["forked"] + order[0]["stages"]["building the trainer"]
    for before, run in zip(order, order[1:]):
        assert run["started"].get("head_start") is True
        warm = [s for s in before["steps"] if s[2]]
        assert len(warm) == 3
        assert before["ready"] <= run["forked"] < warm[-1][1], (before["ready"], warm, run["forked"])
        # built, it waited for its turn: its first step began after the run before it ended,
        # and its first measured step after the run before it had said so (its process exits
        # meanwhile: warm-up steps only)
        assert run["ready"] < before["steps"][-1][1] <= run["steps"][0][0]
        first_measured = next(b for b, _, warm in run["steps"] if not warm)
        assert first_measured >= before["end"]["t"]
    # no measured step ran beside another run's start (process start to built and waiting: its
    # wait is dated from when it told the sweep it was built)
    for run in order:
        for other in order:
            if other is run:
                continue
            for begin, end, warmup in run["steps"]:
                if not warmup:
                    assert end <= other["forked"] or begin >= other["ready"], (
                        begin, end, other["forked"], other["ready"])
    # the wait is no part of a run's start: start_s ends where the trainer was built
    rows = {r["trial"]: r for r in read_csv(tiny_sweep["out"])}
    assert all(r["status"] == "ok" and r["steps_measured"] == "6" for r in rows.values())
    later = order[-1]
    waited = later["steps"][0][0] - later["forked"]
    assert float(rows["4x1"]["start_s"]) < waited, (rows["4x1"]["start_s"], waited)
    # nor of its training time: the trainer's clock ran on while it waited
    end = later["end"]
    assert end["waited_s"] >= later["steps"][0][0] - later["ready"] - 0.05, (end, later["ready"])
    assert end["train_runtime_s"] < later["steps"][-1][1] - later["steps"][0][0] + 1.0, end
    assert "head start" in proc.stderr  # the headless line of a run built early says so


@pytest.mark.slow
def test_without_head_starts_each_run_starts_after_the_one_before_ends(tmp_path):
    proc = run_main("--splits", "1x4,4x1", "--steps", 3, "--warmup", 2, "--seq-len", 32, "--no-head-start",
                    "--runs-dir", tmp_path / "runs", "--export", "json", "-o", tmp_path / "s.json")
    assert proc.returncode == 0, proc.stderr
    assert "head starts" not in proc.stderr
    _, runs = _runs(tmp_path / "runs")
    first, second = sorted(runs.values(), key=lambda r: r["forked"])
    assert second["forked"] >= first["end"]["t"]
    assert "ready" not in second and not second["started"].get("head_start")


@pytest.mark.slow
def test_until_confident_runs_get_the_references_of_the_runs_that_ended_before_their_turn(until_confident_sweep):
    """--until-confident with head starts: a later split starts before the one before it has
    measured anything, so its stopping rule gets its references with its turns (complete with
    the one that begins its measured steps). A later split clear of the first stops as soon as
    the rule allows."""
    got = until_confident_sweep
    assert got["proc"].returncode == 0, got["proc"].stderr
    _, runs = _runs(got["runs"])
    first, second = sorted(runs.values(), key=lambda r: r["forked"])
    assert second["started"].get("head_start") is True
    assert second["end"]["stop_reason"]
    assert len([s for s in second["steps"] if not s[2]]) < got["cap"]  # stopped by the rule, not the cap
    # the later split stops because it is clear of the first (which it can only know from the
    # references its turns brought), not because its own median is known to 0.01%
    rows = {r["trial"]: r for r in json.loads(got["out"].read_text())["splits"]}
    assert rows["1x4"]["stop_reason"] == "settled", rows["1x4"]


def test_a_probe_takes_its_references_with_its_first_turn():
    """The worker's side, with a real pipe and gate: what the sweep sends with the first turn
    replaces the (then incomplete) references the run started with."""
    from tracetui.analysis import StopRule
    from tracetui.probe import turn
    from tracetui.probe.callback import Probe
    from tracetui.runner.turns import Gate

    mine, theirs = mp.get_context("fork").Pipe(duplex=True)
    probe = Probe(lambda e: None, "r", warmup=2, stop_after=StopRule(5.0, 6, []))
    probe.gate = Gate(theirs, 2)
    probe.cuda = False
    mine.send(("go", [[100.0, 120.0]]))
    turn.take_turn(probe)
    assert mine.recv()[0] == "ready"
    assert probe.stop_after.references == [(100.0, 120.0)]
    assert probe.gate.due(2) and not probe.gate.due(1) and not probe.gate.due(4)


def test_when_runs_get_head_starts():
    trials = [Trial(1, 4), Trial(4, 1)]
    grid = GridPlanner(trials, 1)
    assert head_starts_apply(SweepConfig(), grid, [None], "cuda") == (True, "")
    assert head_starts_apply(SweepConfig(), grid, [None], "cpu") == (True, "")
    assert head_starts_apply(SweepConfig(head_start=False), grid, [None], "cuda")[0] is False
    assert head_starts_apply(SweepConfig(), grid, [0, 1], "cuda")[1] == "runs go side by side on several GPUs"
    assert head_starts_apply(SweepConfig(warmup=2), grid, [None], "cuda") == (True, "")
    assert "--warmup 1: a head start needs 2" in head_starts_apply(SweepConfig(warmup=1), grid, [None], "cuda")[1]
    assert "no probe" in head_starts_apply(SweepConfig(probe=False), grid, [None], "cuda")[1]
    assert "torchrun" in head_starts_apply(SweepConfig(nproc_per_node=2), grid, [None], "cuda")[1]
    assert head_starts_apply(SweepConfig(), GridPlanner(trials[:1], 1), [None], "cuda") == (False, "one run")
    search_cfg = SweepConfig(search=True)  # (it decides as it goes: more than one run)
    assert head_starts_apply(search_cfg, make_planner(search_cfg, trials), [None], "cuda") == (True, "")


@pytest.mark.slow  # (two sweeps of the stand-in worker: real processes from the fork server, 15 s)
def test_a_search_starts_early_only_what_it_has_decided_and_picks_as_without(tmp_path):
    """The stand-in worker's search of effective batch 8 on the CPU (no memory bound: no probes;
    the largest micro-batch, then its neighbour): each split's second run, decided with its first,
    is built during the first's warm-up and steps after it; a split the search decides from the
    runs before it starts once they have ended. The same runs and pick as without head starts."""
    from .test_runner_stub import StubSweep
    from tracetui.analysis import Results
    from tracetui.core.checks import validate
    from tracetui.outputs.writer import Outputs

    got = {}
    for name, head in (("with", True), ("without", False)):
        cfg = SweepConfig(splits="1x8,2x4,4x2,8x1", effective_batch=[8], search=True, repeats=2, steps=6, warmup=2,
                          device="cpu", allow_busy=True, head_start=head, runs_dir=str(tmp_path / name))
        sweep, ran = StubSweep(cfg, validate(cfg)), {}
        runner = threading.Thread(target=lambda: ran.update(outcomes=sweep.run()))
        runner.start()
        runner.join(120)  # (a lane that waited for the search without letting turns go on: a deadlock)
        if runner.is_alive():
            sweep.stop()
            runner.join(30)
        sweep.close()
        assert "outcomes" in ran and not sweep.interrupted, f"{name}: the sweep did not end within 120 s"
        outcomes = ran["outcomes"]
        assert sweep.head_starts is head
        events, runs = _runs(tmp_path / name)
        rows = Outputs("-", "json").rows(Results().extend(events))
        got[name] = (sorted(outcomes.items()), [r["trial"] for r in rows if r["recommended"]])
    assert got["with"][1] == got["without"][1] == ["8x1"]
    assert [(rid.split("/")[1], s) for rid, s in got["with"][0]] == [(rid.split("/")[1], s) for rid, s in got["without"][0]]
    events, runs = _runs(tmp_path / "with")
    order = sorted((r for r in runs.values() if r.get("steps")), key=lambda r: r["steps"][0][0])
    labels = [(r["started"]["label"], bool(r["started"].get("head_start"))) for r in order]
    assert labels == [("8x1", False), ("8x1", True), ("4x2", False), ("4x2", True)], labels
    for before, after in zip(order, order[1:]):
        assert after["steps"][0][0] >= before["steps"][-1][1] - 0.01  # one run steps at a time
    for first, second in (order[0:2], order[2:4]):  # built in the first's warm-up, not after its end
        assert second["started"]["t"] < first["steps"][-1][1]  # (the stand-in says it started once up)


def test_the_coordinators_head_start_rules():
    """With real pipes (this test plays the runs and their lanes): a run may start only while
    the one before is past its first step inside its warm-up, and where there is room; the
    oldest ready run gets the turn; each turn carries what the sweep sends with it, the one
    that begins a run's measured steps only once the run before has been reaped."""
    room = {"ok": False, "step": False}
    said: list = []
    sent = []

    def on_go(rid):
        sent.append(rid)
        return [(1.0, 2.0)] if rid == "b" else []

    turns = Turns(mp.get_context("fork"), room=lambda rid, gib: said.append((rid, gib)) or room["ok"],
                  room_to_step=lambda rid: room["step"], on_go=on_go)

    def go(conn, timeout=2.0):
        if conn.poll(timeout):
            return conn.recv()
        return None

    try:
        a = turns.seat("a")
        assert a is not None  # nothing resident: starts at once
        assert turns.seat("b") is None  # a is starting: b may not
        a.send(("ready", 1, 3.5))
        assert go(a) == ("go", [])
        assert turns.seat("b") is None  # a steps, but has not said it is past its first step
        a.send(("warm",))
        stop = threading.Event()
        waiter = threading.Thread(target=turns.wait_to_start, args=(stop,))
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive() and said and said[-1] == ("a", 3.5)  # no room: it waits
        room["ok"] = True
        waiter.join(2.0)
        assert not waiter.is_alive()
        b = turns.seat("b")
        together = time.time()
        assert b is not None and turns.beside("a", together) and turns.beside("b", together)
        assert not turns.beside("a", together - 60)  # before b was seated, a was alone
        a.send(("yield",))  # a's warm-up is over: no turn while b starts
        assert go(a, 0.3) is None
        b.send(("ready", 2, 3.5))
        assert go(a) == ("go", []) and go(b, 0.3) is None  # the oldest ready run: a again
        assert turns.waiting("b") and not turns.waiting("a")
        assert turns.seat("c") is None  # two resident: no third
        a.send(("end",))
        assert go(b, 0.3) is None  # a exits: no room for b's steps beside it, so none until it is reaped
        room["step"] = True
        turns.idle()  # (a poke: the coordinator looks again)
        assert go(b) == ("go", [(1.0, 2.0)]) and sent == ["a", "a", "b"]  # b's warm-up, while a exits
        b.send(("yield",))  # b's warm-up is over: its measured steps wait for a's reap
        assert go(b, 0.3) is None
        turns.unseat("a")
        assert go(b, 0.3) is None  # a's lane is between runs: its next run's start comes first
        turns.idle()  # its lane waits for its next run's start
        assert go(b) == ("go", [(1.0, 2.0)]) and sent == ["a", "a", "b", "b"]  # asked again: a has gone
        assert not turns.beside("b", time.time())  # a has gone
        assert turns.beside("b", together)  # ... but an out-of-memory said late is judged by when it was
        b.send(("end",))
        turns.unseat("b")
    finally:
        turns.close()


@pytest.mark.slow
def test_a_run_out_of_memory_under_its_own_cap_is_out_of_memory_even_beside_a_head_start(cpu_oom_sweep):
    """On the CPU --memory-limit caps each run's own data size: the big micro-batch runs out of
    memory on its first step while the next run starts beside it, and that is its own limit,
    not crowding: recorded oom once, not run again alone."""
    proc = cpu_oom_sweep["proc"]
    assert proc.returncode == 0, proc.stderr
    events, runs = _runs(cpu_oom_sweep["runs"])
    assert any(r["started"].get("head_start") for r in runs.values() if "started" in r)
    failed = [e for e in events if e["type"] == "run_failed"]
    assert failed and all(e["kind"] == "oom" and e["run_id"].endswith("16x1") for e in failed), failed
    assert not any("-alone" in rid for rid in runs)
    rows = {r["trial"]: r["status"] for r in json.loads(cpu_oom_sweep["out"].read_text())["splits"]}
    assert rows == {"16x1": "oom", "1x16": "ok"}


def test_an_attempt_crowded_out_by_a_head_start_is_no_run_of_its_split():
    """Out of memory on a GPU beside the next run, built early: the attempt (``crowded``) runs
    again alone (``-alone``). Its steps are not pooled, it is no run of the split, only its
    message stays; on its own (stopped before it could go again) the split has no runs, no
    steps and no rank. The same for a run ``lost`` with its fork server before its first step."""
    from tracetui.analysis import Results, recommendation, summarise, verdict
    from tracetui.events.schema import make

    def run(events, rid, mb, ga, walls, failed=None):
        events.append(make("run_started", rid, label=f"{mb}x{ga}", micro_batch=mb, grad_accum=ga,
                           effective_batch=mb * ga, env={"device": "cuda", "gpu_name": "H200"}))
        for i, w in enumerate(walls, 1):
            events.append(make("step", rid, step=i, warmup=False, wall_ms=w, data_ms=0.0, forward_ms=[w / 2],
                               backward_ms=[w / 2], optimizer_ms=0.0, other_ms=0.0))
        events.append(make("run_failed", rid, kind=failed[0], message=failed[1]) if failed
                      else make("run_finished", rid, quiet={}))

    for kind, said in (("crowded", "out of memory beside the next run, built early (a head start), so run "
                                    "again alone"),
                       ("lost", "its fork server was killed; it had taken no step, so it runs again alone")):
        events: list = []
        run(events, "s/1x4", 1, 4, [300.0 + (i % 3) for i in range(12)])
        run(events, "s/4x1", 4, 1, [10.0] * 3, failed=(kind, said))
        cut = list(events)  # stopped before it could go again
        run(events, "s/4x1-alone", 4, 1, [100.0 + (i % 3) for i in range(12)])
        rows = {r["trial"]: r for r in summarise(Results().extend(events))}
        assert rows["4x1"]["status"] == "ok" and rows["4x1"]["runs"] == 1, rows["4x1"]
        assert rows["4x1"]["steps_measured"] == 12 and rows["4x1"]["step_ms_median"] >= 100  # the attempt's steps: none
        assert said in rows["4x1"]["message"]
        assert verdict(list(rows.values())).startswith("4x1 is")
        alone = {r["trial"]: r for r in summarise(Results().extend(cut))}
        assert alone["4x1"]["status"] == kind and alone["4x1"]["runs"] == 0, alone["4x1"]
        assert not alone["4x1"].get("step_ms_median")
        assert "4x1" not in recommendation(list(alone.values()))


def test_a_split_whose_next_run_waits_for_its_turn_is_queued_not_warming_up():
    """Replayed from the H200's built-in sweep (two runs a split, head starts): while a split's
    next run is built and waits for its turn, the split's row says ``queued``, as it would
    without head starts (its first run is done, nothing of it warms up); once that run steps,
    the row follows it. The run list still says what the run waits for."""
    from tracetui.analysis import Results, summarise
    from tracetui.tui.widgets.runlist import Stage, run_state

    from .test_monitor_layout import load

    events = load(ROOT / "docs" / "results" / "h200_after_layout" / "builtin_events.jsonl.gz")
    results, seen = Results(), []
    for e in events:
        results.add(e)
        if e["type"] == "run_stage" and e["stage"] == WAITING_STAGE and e["run_id"].endswith("2x2#2"):
            rows = {r["trial"]: r for r in summarise(results)}
            run = results.runs[e["run_id"]]
            seen.append((rows["2x2"]["status"], rows["4x1"]["status"], rows["1x4"]["status"],
                         run_state(run, Stage(e["stage"], e["elapsed_s"], 0.0), False, 0.0).plain))
        elif e["type"] == "step" and e["run_id"].endswith("2x2#2") and e["step"] == 1:
            seen.append(({r["trial"]: r for r in summarise(results)}["2x2"]["status"],))
    # 2x2's first run is done and its second waits while 4x1's second takes its warm-up steps
    assert seen == [("queued", "warming up", "ok", f"{WAITING_STAGE} 2s"), ("warming up",)], seen


@pytest.mark.slow  # (a sweep starts its fork server)
@pytest.mark.quiet  # (a stopping rule at work: it runs last, on a quiet machine)
def test_until_confident_runs_take_their_warm_up_while_the_run_before_exits(tmp_path):
    """Their references come with the turn that begins their measured steps (after the run
    before has been reaped), so nothing holds their warm-up back to the reap."""
    from tracetui.runner.headstarts import HeadStarts
    from tracetui.runner.sweep import Sweep

    cfg = SweepConfig(splits="1x2,2x1", effective_batch=[2], until_confident=5.0, device="cpu",
                      runs_dir=str(tmp_path))
    sweep = Sweep(cfg, [Trial(1, 2), Trial(2, 1)])
    hs = HeadStarts(mp.get_context("fork"), cfg, sweep._device)  # (what the sweep's run holds)
    try:
        assert sweep.head_starts and hs.room_to_step("any") is True
    finally:
        hs.close()
        sweep.close()
