"""Paired comparisons: where two trials' steps trained on the same rows (their fingerprints agree
step by step), they are compared step by step; otherwise as two samples, and the verdict says why.
On synthetic step events whose times follow the rows' lengths, on the recorded logs, and through
the stopping rule and the search that use the same comparison."""

import copy
from pathlib import Path

import pytest

from tracetui.analysis import (Policy, Results, StopRule, paired_log_ratios, recommendation, settle_interval,
                               settled, summarise, verdict)
from tracetui.events.schema import make, validate
from tracetui.planning.plan import Measured, RunSpec, TrialResult
from tracetui.planning.search import SearchPlanner
from tracetui.events.log import read_events
from tracetui.core.trial import Trial

DATA = Path(__file__).parent / "data"
#: each optimizer step's work, as its rows' lengths make it: steps differ several-fold
LENGTHS = [1, 7, 2, 8, 1.5, 6, 3, 5, 1.2, 7.5, 2.5, 4]


def sweep(fingerprints=True, differ_at=None, runs=1, drift=0.0):
    """Two trials of effective batch 8 (checkpointing off and on), ``runs`` fresh processes each:
    a step takes 100 ms (off) or about 150 ms (on) per unit of its rows' length, so the two
    medians' intervals overlap widely while every step of ``on`` is 1.5x its step of ``off``.
    ``drift``: each later process is that much slower (the host drifts between processes)."""
    events = []
    for r in range(runs):
        for on, per, noise in ((False, 100.0, 0.0), (True, 150.0, 0.03)):
            label = f"8x1 ckpt={'on' if on else 'off'}"
            rid = f"s/{label.replace(' ', '_')}#{r + 1}"
            events.append(make("run_started", rid, label=label, micro_batch=8, grad_accum=1, effective_batch=8,
                               repeat=r, varied={"activation_checkpointing": on}, env={"device": "cpu"}))
            for k, length in enumerate(LENGTHS, 1):
                wall = per * length * (1 + noise * ((k * 7) % 5 - 2) / 2) * (1 + drift * r)
                step = make("step", rid, step=k, warmup=k <= 3, wall_ms=wall, forward_ms=[wall / 2],
                            backward_ms=[wall / 2])
                if fingerprints:
                    step["fingerprint"] = "other" if (on and k == differ_at) else f"rows-of-step-{k}"
                events.append(validate(step))  # the field is part of the event schema
            events.append(make("run_finished", rid))
    return events


def rows_of(events):
    return {r["trial"]: r for r in summarise(Results().extend(events))}


def test_equal_fingerprints_give_a_clear_paired_verdict_where_the_intervals_overlap():
    rows = rows_of(sweep())
    off, on = rows["8x1 ckpt=off"], rows["8x1 ckpt=on"]
    # taken apart, the two trials' median intervals overlap: no verdict could come from them
    assert off["step_ms_ci_high"] > on["step_ms_ci_low"]
    assert off["comparison"] == "paired over 9 steps" and off["paired_steps"] == 9
    assert off["speedup_vs_slowest"] == pytest.approx(1.5, rel=0.03)
    assert 1.0 < off["speedup_ci_low"] <= off["speedup_vs_slowest"] <= off["speedup_ci_high"] < 1.6
    line = verdict(list(rows.values()))
    assert line.startswith("8x1 ckpt=off is 1.50x faster than 8x1 ckpt=on (95% CI 1.")
    assert "x, paired over 9 steps) at effective batch 8" in line


@pytest.mark.parametrize("kind", ["missing", "differ"])
def test_fingerprints_missing_or_different_fall_back_to_unpaired_and_say_why(kind):
    events = sweep(fingerprints=kind != "missing", differ_at=6 if kind == "differ" else None)
    rows = rows_of(events)
    off = rows["8x1 ckpt=off"]
    why = ("steps without row fingerprints" if kind == "missing"
           else "fingerprints differ at step 6: the two trained on different rows")
    assert off["comparison"] == f"unpaired: {why}" and off.get("paired_steps") is None
    line = verdict(list(rows.values()))
    assert line == ("no clear difference between 8x1 ckpt=off and 8x1 ckpt=on at effective batch 8 "
                    f"(intervals overlap; unpaired: {why})")


def test_several_runs_add_the_spread_between_processes_to_the_paired_interval():
    """With two fresh processes per trial, the interval is over steps and over runs: the drift
    between processes (here 8% from one to the next) widens it, but the steps stay paired."""
    steady = rows_of(sweep(runs=2))["8x1 ckpt=off"]
    drifting = rows_of(sweep(runs=2, drift=0.08))["8x1 ckpt=off"]
    for row in (steady, drifting):
        assert row["ci_scope"] == "runs" and row["comparison"] == "paired over 9 steps and 2+2 runs"
    one = rows_of(sweep())["8x1 ckpt=off"]
    width = lambda r: r["speedup_ci_high"] / r["speedup_ci_low"]  # noqa: E731
    assert width(drifting) > 1.1 * width(one)
    assert drifting["speedup_ci_low"] < 1.5 < drifting["speedup_ci_high"]


def trial(label, walls, warmup=3):
    """One run of trial ``label`` (micro-batch x accumulation) of effective batch 8 whose measured
    steps take ``walls`` ms, each on the rows every other trial's step of that number took."""
    mb, ga = (int(x) for x in label.split("x"))
    rid = f"s/{label}#1"
    events = [make("run_started", rid, label=label, micro_batch=mb, grad_accum=ga, effective_batch=8, repeat=0,
                   env={"device": "cpu"})]
    for k, wall in enumerate([walls[0]] * warmup + list(walls), 1):
        events.append(validate(dict(make("step", rid, step=k, warmup=k <= warmup, wall_ms=wall, forward_ms=[wall / 2],
                                         backward_ms=[wall / 2]), fingerprint=f"rows-of-step-{k}")))
    return events + [make("run_finished", rid)]


def test_the_speedups_reference_is_a_split_no_other_is_measured_slower_than():
    """Two nearly tied splits whose paired estimate ranks them the other way round from their
    medians: 2x4 is 10% slower than 4x2 on five of nine steps that trained on the same rows, yet
    its median is lower. The table measures every split against the one no other is slower than by
    the estimate it gives (2x4 here), so no split is "0.91x faster than the slowest", and the
    verdict and the recommendation name the fastest by that same estimate."""
    ref = [10.0 * k for k in range(1, 10)]  # 4x2: median 50
    odd = [w * (1.1 if k < 5 else 0.5) for k, w in enumerate(ref)]  # 2x4: median 35, paired 1.1x slower
    fast = [w / 4 for w in ref]  # 8x1: a quarter of 4x2's every step
    rows = rows_of(trial("4x2", ref) + trial("2x4", odd) + trial("8x1", fast))
    assert rows["2x4"]["step_ms_median"] < rows["4x2"]["step_ms_median"]
    assert rows["2x4"]["speedup_vs_slowest"] == 1.0 and rows["2x4"]["slowest"]
    assert rows["4x2"]["speedup_vs_slowest"] == pytest.approx(1.1) and rows["4x2"]["comparison"] == "paired over 9 steps"
    assert rows["8x1"]["speedup_vs_slowest"] == pytest.approx(4.4) and rows["8x1"]["fastest"]
    assert min(r["speedup_vs_slowest"] for r in rows.values()) == 1.0
    assert verdict(list(rows.values())).startswith("8x1 is 4.40x faster than 2x4 (95% CI ")
    assert recommendation(list(rows.values()), Policy(allow_busy=True)).startswith("use 8x1 for effective batch 8")
    # the two alone: the faster by the paired estimate is the fastest, measured against the other
    pair = rows_of(trial("4x2", ref) + trial("2x4", odd))
    assert pair["2x4"]["slowest"] and pair["4x2"]["fastest"] and pair["4x2"]["speedup_vs_slowest"] == pytest.approx(1.1)
    assert verdict(list(pair.values())).startswith("no clear difference between 4x2 and 2x4 ")


def test_ties_in_the_recommendation_use_the_paired_comparison():
    """A third trial as fast as the best, step by step, is named as a tie; the overlapping
    intervals of the slower one no longer make it one."""
    events = sweep()
    twin = [copy.deepcopy(e) for e in events if e["run_id"].startswith("s/8x1_ckpt=off")]
    for e in twin:
        e["run_id"] = e["run_id"].replace("8x1_ckpt=off", "4x2")
        if e["type"] == "run_started":
            e.update(label="4x2 ckpt=off", micro_batch=4, grad_accum=2)
        if e["type"] == "step":
            e["wall_ms"] *= 1.0 + (0.004 if e["step"] % 2 else -0.004)
    rows = list(rows_of(events + twin).values())
    rec = recommendation(rows, Policy(allow_busy=True))
    assert "4x2 ckpt=off is as fast within the intervals" in rec or "8x1 ckpt=off is as fast" in rec
    assert "8x1 ckpt=on" not in rec.split(";")[0]


def test_paired_log_ratios_reasons():
    a = [(k, f"f{k}", 100.0) for k in range(1, 10)]
    assert paired_log_ratios(a, [(k, f"f{k}", 150.0) for k in range(1, 10)])[1] == ""
    assert paired_log_ratios(a, [(k, None, 150.0) for k in range(1, 10)]) == ([], "steps without row fingerprints")
    assert paired_log_ratios(a, [(k, f"f{k}", 150.0) for k in range(1, 4)]) == ([], "only 3 steps in common (6 needed)")
    runs = a + [(1, "elsewhere", 100.0)]  # a second run of the same trial that saw other rows at step 1
    assert paired_log_ratios(runs, a)[1] == "one split: its runs trained on different rows at step 1"


def test_stopping_rule_settles_step_by_step_where_the_steps_pair():
    """``--until-confident``: a later split whose steps pair with the reference's is settled by the
    paired interval; the same times without fingerprints are not (the two median intervals
    overlap)."""
    ref = [(k, f"f{k}", 100.0 * n) for k, n in enumerate(LENGTHS, 1)]
    mine = [(k, f"f{k}", 150.0 * n * (1.01 if k % 2 else 0.99)) for k, n in enumerate(LENGTHS, 1)]
    walls = [w for _, _, w in mine]
    interval = settle_interval([w for _, _, w in ref])
    assert settled(walls, [(*interval, ref)], mine)
    assert not settled(walls, [interval], mine)  # a reference without its steps: unpaired
    assert not settled(walls, [(*interval, [(k, None, w) for k, _, w in ref])], [(k, None, w) for k, _, w in mine])
    rule = StopRule(0.01, 6, [(*interval, ref)])
    stops = [rule(walls[:n], mine[:n]) for n in range(1, len(walls) + 1)]
    assert stops[-1] == "settled" and stops[:8] == [None] * 8  # 7 paired steps, held for 3


def test_references_carry_the_steps_that_pair():
    """The sweep hands a run its references with the steps of the trials measured before it, when
    those carry fingerprints (:class:`tracetui.planning.plan.Measured`)."""
    measured = Measured()
    a, b = Trial(8, 1), Trial(1, 8)
    for t in (a, b):
        measured.add(RunSpec(f"s/{t.split}", t, 0))
    for k, n in enumerate(LENGTHS, 1):
        measured.observe(make("step", "s/8x1", step=k, warmup=False, wall_ms=100.0 * n, fingerprint=f"f{k}"))
    (ref,) = measured.references(b, 6)
    assert len(ref) == 3 and ref[2][0] == [1, "f1", 100.0]
    result = measured.result(RunSpec("s/8x1", a, 0), "ok")
    assert result.steps[0] == (1, "f1", 100.0)


def test_search_calls_a_neighbour_clearly_faster_step_by_step():
    planner = SearchPlanner([Trial(8, 1), Trial(4, 2)], repeats=1)
    fast, slow = Trial(8, 1), Trial(4, 2)
    for t, per in ((fast, 100.0), (slow, 150.0)):
        steps = [(k, f"f{k}", per * n * (1.01 if k % 2 else 0.99)) for k, n in enumerate(LENGTHS, 1)]
        planner.outcome[t] = [TrialResult(RunSpec("s/" + t.split, t, 0), "ok", [w for *_, w in steps], None, "",
                                          steps)]
    assert planner.clearly_faster(fast, slow)
    for t in (fast, slow):  # the same times, their rows unknown: the medians' intervals overlap
        planner.outcome[t][0].steps = [(k, None, w) for k, _, w in planner.outcome[t][0].steps]
    assert not planner.clearly_faster(fast, slow)


def test_recorded_logs_report_pairing_or_its_refusal():
    """The recorded H200 sweep predates fingerprints: its verdict says it compared unpaired and
    why; the recorded CPU sweep of checkpointing off and on (ragged rows, one run each) pairs
    every measured step."""
    h200 = summarise(Results().extend(read_events([DATA / "h200_sweep.jsonl"]).events))
    assert {r["comparison"] for r in h200 if not r["speedup_vs_slowest"] == 1.0} == {
        "unpaired: steps without row fingerprints"}
    assert "unpaired: steps without row fingerprints) at effective batch 4" in verdict(h200)
    events = read_events([DATA / "cpu_paired_ckpt.jsonl"]).events
    rows = summarise(Results().extend(events))
    fast = next(r for r in rows if r["fastest"])
    measured = [e for e in events if e["type"] == "step" and not e["warmup"]]
    assert len(measured) == 18 and all(e["fingerprint"] for e in measured)
    assert fast["comparison"] == "paired over 9 steps" and fast["paired_steps"] == 9
    # recorded on a shared two-core machine that was busy: held back unless allowed, then said
    assert "held back: the machine was busy" in verdict(rows)
    assert "paired over 9 steps" in verdict(rows, Policy(allow_busy=True))
