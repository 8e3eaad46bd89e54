"""Statistics, verdicts, diagnosis and advice, on recorded H200 events and end to end on tiny."""

import copy
import json
from pathlib import Path

import pytest

from tracetui.analysis import (Results, confident, median, median_ci, bootstrap_medians, order_stat_ci,
                               recommendation, settle_interval, settled, stop_reason, StopRule, summarise, verdict)
from tracetui.core.trial import Trial as Split
from tracetui.events.schema import make
from tracetui.planning.plan import grid_order, interleave
from tracetui.events.log import read_events

from .conftest import busy_marked, read_csv, run_main

DATA = Path(__file__).parent / "data" / "h200_sweep.jsonl"


def recorded():
    return read_events([DATA]).events


def test_recorded_h200_summary():
    rows = {r["split"]: r for r in summarise(Results().extend(recorded()))}
    assert rows["4x1"]["step_ms_median"] == pytest.approx(441.18, abs=0.01)
    for r in rows.values():
        assert r["step_ms_ci_low"] <= r["step_ms_median"] <= r["step_ms_ci_high"]
        assert r["step_ms_p10"] <= r["step_ms_median"] <= r["step_ms_p90"]
        assert r["bound"] == "host-bound" and r["evidence"].startswith("GPU busy")
        assert r["gpu_util_mean"] < 50 and r["energy_j_per_step"] > 0 and r["loss_ok"]
    assert rows["4x1"]["fastest"] and rows["4x1"]["speedup_ci_low"] > 3.0
    assert "forward x0.9 for x4 rows" in rows["4x1"]["evidence"]
    line = verdict(list(rows.values()))
    assert line.startswith("4x1 is 3.83x faster than 1x4 (95% CI") and "peak memory 4.1 of 140 GiB" in line


#: a whole first built-in sweep on the H200 with two runs per split, and what tracetui wrote of it
#: there (docs/results/h200_after_layout/README.md)
H200_REPEATS = Path(__file__).parent.parent / "docs" / "results" / "h200_after_layout"


def test_a_recorded_h200_sweep_with_repeats_replays_to_what_tracetui_said_on_the_h200():
    """The paired verdict over runs, the MFU recommendation, every field of every row and the time
    account, from the event log alone, equal what the command wrote on the H200."""
    from tracetui.analysis import time_spent
    from tracetui.outputs.export import summary_json
    from tracetui.outputs.writer import Outputs

    wrote = json.loads((H200_REPEATS / "builtin.json").read_text())
    events = read_events([H200_REPEATS / "builtin_events.jsonl.gz"]).events
    out = Outputs("-", "json")
    results = Results().extend(events)
    rows = out.rows(results)
    assert verdict(rows) == wrote["verdict"] == (
        "4x1 is 4.01x faster than 1x4 (95% CI 2.94-5.41x, paired over 27 steps and 2+2 runs) at effective "
        "batch 4; peak memory 10.8 of 140 GiB")
    assert recommendation(rows) == wrote["recommendation"]
    assert [r["runs"] for r in rows] == [2, 2, 2]
    again = json.loads(summary_json(rows, out.answer(rows), time=time_spent(results)))
    # every column tracetui wrote there, word for word; a column added since is empty for its log
    assert len(again["splits"]) == len(wrote["splits"])
    for mine, theirs in zip(again["splits"], wrote["splits"]):
        assert {k: mine.get(k) for k in theirs} == theirs
        assert {k: mine[k] for k in mine.keys() - theirs.keys() if mine[k] is not None} == {}
    assert again["time"] == wrote["time"]  # where its 136.1 s went too


def test_no_clear_difference_when_intervals_overlap():
    events = []
    for label, base in (("1x2", 100.0), ("2x1", 101.0)):
        mb, ga = (int(x) for x in label.split("x"))
        events.append(make("run_started", label, label=label, micro_batch=mb, grad_accum=ga, effective_batch=2))
        for i in range(1, 21):
            wall = base + (i * 37 % 11) - 5  # the same spread around nearly the same centre
            events.append(make("step", label, step=i, warmup=False, wall_ms=wall, forward_ms=[wall / 2],
                               backward_ms=[wall / 2]))
        events.append(make("run_finished", label))
    rows = summarise(Results().extend(events))
    assert verdict(rows).startswith("no clear difference between")


def test_loss_drift_is_flagged():
    events = recorded()
    for e in events:
        if e["type"] == "step" and e["run_id"].endswith("2x2"):
            e["loss"] *= 1.10  # what a gradient-accumulation normalisation bug would do
    rows = {r["split"]: r for r in summarise(Results().extend(events))}
    assert rows["2x2"]["loss_ok"] is False and rows["2x2"]["loss_drift_pct"] > 5
    assert rows["1x4"]["loss_ok"] and rows["4x1"]["loss_ok"]


def test_projection_and_recommendation():
    rows = summarise(Results().extend(recorded()), project_steps=1000)
    by = {r["split"]: r for r in rows}
    assert by["4x1"]["projected_s"] == pytest.approx(441.18, abs=0.1)
    rec = recommendation(rows)
    assert rec.startswith("use 4x1 for effective batch 4 (4x1: 7 min 21 s; 2x2: 14 min 14 s; 1x4: 28 min")


def test_attach_mode_projects_its_own_max_steps():
    events = copy.deepcopy(recorded())
    for e in events:
        if e["type"] == "run_started":
            e["max_steps"] = 2000
    by = {r["split"]: r for r in summarise(Results().extend(events))}
    assert by["1x4"]["projected_s"] == pytest.approx(2000 * by["1x4"]["step_ms_median"] / 1000)


def test_memory_limited_and_headroom():
    events = copy.deepcopy(recorded())
    for e in events:
        if e["type"] == "run_started":
            e["config"]["memory_limit"] = 4.25  # peaks 3.69 (1x4), 3.84 (2x2), 4.09 (4x1) GiB
    rows = {r["split"]: r for r in summarise(Results().extend(events))}
    assert rows["4x1"]["bound"] == "memory-limited" and rows["4x1"]["evidence"] == "peak 4.1 of 4.25 GiB"
    # only 1x4 leaves 10% headroom under 4.25 GiB: the advice is the fastest split that does
    assert recommendation(list(rows.values())).startswith("use 1x4")


def test_bootstrap_is_deterministic_and_order_stats():
    xs = [float(x) for x in range(1, 101)]
    boots = bootstrap_medians(xs, seed=3)
    assert boots == bootstrap_medians(xs, seed=3)
    lo, hi = median_ci(boots)
    assert lo < median(xs) < hi
    olo, ohi = order_stat_ci(xs)
    assert 38 <= olo <= 42 and 59 <= ohi <= 62
    assert confident([100.0 + (i % 3) * 0.1 for i in range(20)], 2.0)
    assert not confident([100.0, 150.0, 60.0, 140.0, 80.0, 120.0], 2.0)


def test_interleaved_order():
    a, b, c = Split(1, 4), Split(2, 2), Split(4, 1)
    assert [s.split for s, _ in interleave([a, b, c], 3)] == ["1x4", "2x2", "4x1", "4x1", "2x2", "1x4",
                                                             "1x4", "2x2", "4x1"]


def test_until_confident_measures_the_cheapest_split_first():
    a, b, c, d = Split(1, 4), Split(2, 2), Split(4, 1), Split(8, 1)
    assert [s.split for s, _ in grid_order([a, b, d, c], 2, True)] == ["4x1", "2x2", "1x4", "8x1",
                                                                     "8x1", "1x4", "2x2", "4x1"]
    # without it, the order given
    assert [s.split for s, _ in grid_order([a, b, d, c], 2, False)][:4] == ["1x4", "2x2", "8x1", "4x1"]


def walls_of(events, split):
    runs = {e["run_id"] for e in events if e["type"] == "run_started" and e["label"] == split}
    return [e["wall_ms"] for e in events if e["type"] == "step" and e["run_id"] in runs and not e["warmup"]]


def test_stop_rule_on_recorded_h200_steps():
    ev = recorded()
    fast, mid, slow = walls_of(ev, "4x1"), walls_of(ev, "2x2"), walls_of(ev, "1x4")
    ref = [settle_interval(fast)]
    # 1x4 is ~3.8x slower: ten steps settle where it ranks against 4x1's full run...
    assert settled(slow[:10], ref) and stop_reason(slow[:10], 0.1, 10, ref) == "settled"
    # ...but not before --min-steps, and not against nothing measured before it.
    assert stop_reason(slow[:9], 0.1, 10, ref) is None and not settled(slow[:10], [])
    # Two halves of one split are one distribution: never "settled" apart, at any length (below
    # 7 steps no 97.5% interval exists: two steps 1 ms apart would otherwise look settled).
    assert not any(settled(fast[:k], [settle_interval(fast[12:])]) for k in range(2, 13))
    assert not confident([100.0, 100.1], 2) and not confident([100.0] * 5, 2) and confident([100.0] * 6, 2)
    # Clear of one earlier split is not enough: it must be clear of every one.
    assert settled(mid[:10], ref) and not settled(mid[:10], ref + [settle_interval(mid[10:])])
    # Precision is checked first: a loose enough target stops on "precise".
    assert stop_reason(fast[:10], 50, 10, []) == "precise"


def test_stop_rule_must_hold_for_three_steps():
    rule = StopRule(2.0, 6, [])
    steady = [100.0] * 6
    assert rule(steady) is None and rule(steady) is None  # judged once per new step, not per call
    assert rule(steady + [100.0]) is None and rule(steady + [100.0] * 2) == "precise"
    rule = StopRule(2.0, 6, [])
    spread = [100.0] * 6 + [150.0] * 6
    calls = [rule([100.0] * 6), rule([100.0] * 7), rule(spread), rule(spread + [125.0] * 20),
             rule(spread + [125.0] * 21), rule(spread + [125.0] * 22)]
    assert calls == [None, None, None, None, None, "precise"]  # a break in the streak starts it again


@pytest.mark.slow
def test_until_confident_later_splits_stop_once_settled(until_confident_sweep):
    """4x1 goes first and, at an unreachable 0.01%, runs to the cap; 1x4, about twice as slow on
    this CPU, stops as soon as its interval is clear of 4x1's."""
    got = until_confident_sweep
    proc, cap = got["proc"], got["cap"]
    assert proc.returncode == 0, proc.stderr
    order = [l.split("] ")[1].split(":")[0] for l in proc.stderr.splitlines() if "started on" in l]
    assert order == ["4x1", "1x4"]
    summary = json.loads(got["out"].read_text())
    rows = {r["split"]: r for r in summary["splits"]}
    assert rows["4x1"]["steps_measured"] == cap and not rows["4x1"]["stop_reason"]
    # Whether 1x4 came clear of 4x1 depends on how loaded this machine was; what must hold either
    # way is that the run stopped exactly where the rule, replayed on the steps it measured
    # against 4x1's interval, says it had settled (or ran to the cap when it never did).
    from tracetui.analysis import StopRule, settle_interval

    events = read_events(list(got["runs"].glob("*/events.jsonl"))).events
    steps = {s: [(e["step"], e.get("fingerprint"), e["wall_ms"]) for e in events if e["type"] == "step"
                 and e["run_id"].endswith("/" + s) and not e["warmup"]] for s in ("4x1", "1x4")}
    walls = {s: [w for _, _, w in steps[s]] for s in steps}
    # the reference as the sweep hands it: 4x1's interval and its steps (their rows' fingerprints
    # agree with 1x4's step by step, so the rule compares them step by step)
    assert all(fp for _, fp, _ in steps["4x1"] + steps["1x4"])
    rule = StopRule(0.01, 6, [(*settle_interval(walls["4x1"]), steps["4x1"])])
    stop_at = next((k for k in range(1, len(walls["1x4"]) + 1) if rule(walls["1x4"][:k], steps["1x4"][:k])), None)
    measured = rows["1x4"]["steps_measured"]
    if stop_at is None or stop_at >= cap - 1:  # never settled, or only as the cap came
        assert measured == cap
    else:
        # the probe judges at each step's end on the steps resolved by then: at most one behind
        assert rows["1x4"]["stop_reason"] == "settled" and stop_at <= measured <= stop_at + 1 and 6 <= stop_at
    # the verdict (asked for on a busy machine too: --allow-busy), marked when measured busy
    line = summary["verdict"]
    assert line.startswith("4x1 is ") and " faster than 1x4 " in line and f"tracetui: {line}" in proc.stderr
    assert busy_marked(line, rows.values()), (line, [r["busy"] for r in rows.values()])


@pytest.mark.slow
@pytest.mark.quiet  # (a stopping rule at work: it runs last, on a quiet machine)
def test_repeats_and_until_confident_end_to_end(tmp_path):
    out = tmp_path / "r.csv"
    proc = run_main("--export", "csv", "-o", out, "--effective-batch", 2, "--splits", "1x2,2x1", "--repeats", 2,
                    "--steps", 60, "--warmup", 1, "--seq-len", 32, "--until-confident", 40, "--min-steps", 4,
                    "--project-steps", 500, "--allow-busy", "--runs-dir", tmp_path / "runs")
    assert proc.returncode == 0, proc.stderr
    order = [l.split("] ")[1].split(":")[0] for l in proc.stderr.splitlines() if "started on" in l]
    assert order == ["2x1#1", "1x2#1", "1x2#2", "2x1#2"]  # cheapest first
    rows = read_csv(out)
    for r in rows:
        assert r["runs"] == "2" and r["repeat_spread_pct"] != ""
        # (a cap far above where a run settles: a loaded machine widens step noise, and a run that
        # reaches its cap unsettled would say nothing about the rule)
        assert r["stopped_early"] == "True" and 8 <= int(r["steps_measured"]) < 2 * 59
        assert float(r["projected_s"]) == pytest.approx(500 * float(r["step_ms_median"]) / 1000, rel=1e-3)
    # the recommendation (asked for on a busy machine too: --allow-busy), with each split's
    # projected time, marked when measured busy
    (rec,) = [l for l in proc.stderr.splitlines() if l.startswith("tracetui: use ")]
    assert " for effective batch 2 (" in rec and all(f"{s}: " in rec for s in ("1x2", "2x1")), rec
    assert busy_marked(rec, rows), (rec, [r["busy"] for r in rows])
