"""The search's skips against its predictions' margin of error (:mod:`tracetui.planning.margin`):
the real planner fed with canned measurements."""

import pytest

from tracetui.planning.margin import OWN_CHECKS, PRIOR_MARGIN, StepErrors
from tracetui.planning.search import SearchPlanner
from tracetui.core.trial import Trial

from .test_search import _grid, drive


def qwen_like(step_ms):
    """A Qwen3-4B-like shape at 2,048 tokens under --memory-limit 64: 20 + 15 GiB per row, so
    micro-batch 2 fits 90% of 64 GiB and 4 does not; ``step_ms[split]`` the step each run measures."""
    def measure(t):
        return "ok", [step_ms[t.split]] * 8, 20.0 + 15.0 * t.micro_batch
    return measure


def test_a_split_predicted_slower_than_the_best_even_with_the_margin_is_skipped_not_run_twice():
    """2x16 runs (the largest predicted to fit); 1x32, predicted 1.45x its step from the probe
    1x1's time per micro-batch, is skipped: 1.45 / 1.09 is still slower, where the fixed ratio
    (0.75 x prediction against 1.1 x the best) ran it, twice with --repeats 2."""
    steps = {"1x1": 725.0, "2x1": 1040.0, "2x16": 16000.0, "1x32": 23200.0}
    p = SearchPlanner(_grid(32), repeats=2, limit_gib=64.0, limit_what="--memory-limit")
    ds = drive(p, qwen_like(steps))
    ran = [(d.trial.split, d.repeat) for d in ds if not d.skip]
    assert ran == [("1x1", 0), ("2x1", 0), ("2x16", 0), ("2x16", 1)]
    why = {d.trial.split: d.why for d in ds if d.skip}["1x32"]
    # 2x16 was predicted at 16 x 1040 = 16,640 ms and measured 16,000: +4.0%, within the prior
    assert why.startswith("skipped: predicted 23.2 s/step from 1x1's time per micro-batch, 1.45x the best (2x16); "
                          "1.33x even if 9.0% faster (margin 9.0%: the prior from held-out H200 checks")
    assert "this sweep's 1 check(s) within it (2x16 +4.0%)" in why
    assert any("slower than the best measured; margin 9.0%: the prior" in n for n in p.notes())


def test_a_sweep_whose_predictions_are_far_off_widens_the_margin_and_runs_the_split():
    """The probes' time per micro-batch over-predicts by 40% (their step carries the optimizer once
    per micro-batch): 2x16's check says so, and 1x32, predicted 1.3x slower, runs."""
    steps = {"1x1": 650.0, "2x1": 1400.0, "2x16": 16000.0, "1x32": 15000.0}
    p = SearchPlanner(_grid(32), repeats=1, limit_gib=64.0, limit_what="--memory-limit")
    ds = drive(p, qwen_like(steps))
    ran = [d.trial.split for d in ds if not d.skip]
    assert ran == ["1x1", "2x1", "2x16", "1x32"]
    assert p.errors.margin() == pytest.approx(0.40)
    # 1x32 was a check too: predicted 20,800 ms, measured 15,000
    assert [(t.split, round(e, 3)) for t, e in p.errors.errors()] == [("2x16", 0.4), ("1x32", 0.387)]


def test_a_split_within_the_margin_of_the_best_runs():
    steps = {"1x1": 530.0, "2x1": 1000.0, "2x16": 16000.0, "1x32": 16500.0}  # 1x32 predicted 1.06x
    p = SearchPlanner(_grid(32), repeats=1, limit_gib=64.0, limit_what="--memory-limit")
    assert [d.trial.split for d in drive(p, qwen_like(steps)) if not d.skip] == ["1x1", "2x1", "2x16", "1x32"]


def test_the_margin_is_the_prior_until_the_sweep_has_its_own_checks():
    e = StepErrors()
    assert e.margin() == PRIOR_MARGIN and "no check of this sweep's yet" in e.said()
    trials = [Trial(1, 2 ** k) for k in range(OWN_CHECKS)]
    e.expect(trials[0], 102.0, "1x1")
    e.measure(trials[0], 100.0)
    assert e.margin() == PRIOR_MARGIN  # one small error says little about the largest
    e.expect(trials[1], 80.0, "1x1")
    e.measure(trials[1], 100.0)
    assert e.margin() == pytest.approx(0.20) and "this sweep's largest error" in e.said()
    e.expect(trials[2], 101.0, "1x1")
    e.measure(trials[2], 100.0)
    assert e.margin() == pytest.approx(0.20) and e.said().startswith("margin 20.0%: the largest error of this sweep's 3")
    small = StepErrors()
    for t in trials:
        small.expect(t, 103.0, "1x1")
        small.measure(t, 100.0)
    assert small.margin() == pytest.approx(0.03)  # enough checks of its own: below the prior
    assert small.improved(103.0) == pytest.approx(100.0)
    unpredicted = StepErrors()
    unpredicted.measure(trials[0], 100.0)  # no prediction made before it ran: no check
    assert unpredicted.errors() == []
