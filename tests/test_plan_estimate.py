"""How long a sweep will take (:meth:`tracetui.planning.plan.Planner.estimate`): rough priors
before any run, then what finished runs measured; ``--dry-run``'s last line."""

import pytest

from tracetui.core.config import SweepConfig
from tracetui.core.trial import Trial
from tracetui.planning.ahead import EXPECTED_SPLITS
from tracetui.planning.estimate import ROUGH_START_S, ROUGH_TOKENS_PER_S, Pace
from tracetui.planning.plan import GridPlanner, RunSpec, TrialResult, dry_run_lines
from tracetui.planning.search import SearchPlanner, make_planner

from .test_search import _grid

SPLITS = [Trial(1, 4), Trial(2, 2), Trial(4, 1)]


def _done(t, seconds, step_ms, repeat=0, steps=None, status="ok"):
    return TrialResult(RunSpec(f"s/{t.split}/{repeat}", t, repeat, steps=steps), status, [step_ms] * 10,
                       seconds=seconds)


def test_before_any_run_the_estimate_is_the_rough_prior_and_says_so():
    p = GridPlanner(SPLITS, repeats=2)
    p.pace = Pace(steps=20, seq_len=256, device="cpu")
    e = p.estimate()
    per_run = ROUGH_START_S["cpu"] + 20 * 4 * 256 / ROUGH_TOKENS_PER_S["cpu"]
    assert e.runs == 6 and e.seconds == pytest.approx(6 * per_run)
    assert "rough: a prior of 5,000 tokens/s" in e.line() and "not measured here" in e.line()


def test_finished_runs_replace_the_prior_with_their_step_times_and_starts():
    p = GridPlanner(SPLITS, repeats=2)
    p.pace = Pace(steps=20, seq_len=256, device="cuda")
    # 1x4 ran: 20 steps of 100 ms in 12 s, so 10 s to start; a skip is no run
    done = [_done(Trial(1, 4), 12.0, 100.0), TrialResult(RunSpec("s/x", Trial(2, 2), 0), "skipped")]
    e = p.estimate(done)
    assert e.runs == 5
    # 1x4 again at its own 100 ms; the other four at 25 ms per row x 4 rows: every run 10 + 20 x 0.1 s
    assert e.seconds == pytest.approx(5 * 12.0)
    assert e.how.startswith("from 1 finished run(s): their step times") and "10 s to start a run" in e.how
    faster = p.estimate(done + [_done(Trial(4, 1), 11.0, 50.0, repeat=1)])
    # 1x4 at its own 100 ms, 4x1 at its own 50 ms (10 + 1 s); 2x2 twice at the median time per row
    # of the two, 18.75 ms x 4 rows (10 + 1.5 s); both started in 10 s
    assert faster.runs == 4 and faster.seconds == pytest.approx(12.0 + 11.0 + 2 * 11.5)
    assert p.estimate([_done(t, 12.0, 100.0, r) for t in SPLITS for r in (0, 1)]).seconds == 0.0


def test_a_search_guesses_its_runs_left_and_narrows_them_as_it_runs():
    p = SearchPlanner(_grid(32), repeats=2, limit_gib=64.0, limit_what="--memory-limit", probe_steps=6)
    p.pace = Pace(steps=20, seq_len=2048, device="cuda")
    before = p.estimate()
    assert before.runs == 2 + EXPECTED_SPLITS * 2 and "the search's runs left guessed" in before.how
    # the probes ran: the line says 2 fits 90% of 64 GiB, 4 does not
    probes = []
    for d in (p.next(), p.next()):
        r = TrialResult(RunSpec(f"s/{d.trial.split}", d.trial, 0, steps=d.steps), "ok", [1000.0 * d.trial.micro_batch] * 3,
                        20.0 + 15.0 * d.trial.micro_batch, seconds=40.0)
        p.record(r)
        probes.append(r)
    start = p.next()
    assert start.trial.split == "2x16"
    after = p.estimate(probes)
    # 2x16 twice (begun), then two more splits that fit (1x32), each twice: 1x32 is the only other
    assert after.runs == 2 + 2 and "from 2 finished run(s)" in after.how
    # 2x16 measured (both runs): what is left is its one neighbour that fits, 1x32, twice; once
    # 1x32 is measured too, nothing (the search ends: no split left that it would run)
    done = probes + [TrialResult(RunSpec(f"s/2x16/{r}", start.trial, r), "ok", [1500.0] * 10, seconds=30.0)
                     for r in (0, 1)]
    assert p.next().trial == start.trial  # (its second run)
    for r in done[2:]:
        p.record(r)
    assert p.estimate(done).runs == 2
    below = p.next()
    assert below.trial.split == "1x32"
    done += [TrialResult(RunSpec(f"s/1x32/{r}", below.trial, r), "ok", [2500.0] * 10, seconds=40.0) for r in (0, 1)]
    assert p.next().trial == below.trial
    for r in done[-2:]:
        p.record(r)
    assert p.estimate(done).runs == 0 and p.next() is not None


def test_once_the_best_and_its_neighbours_are_measured_a_search_guesses_no_run_left():
    """The H200's effective batch 16: the start (the largest micro-batch) measured fastest and its
    one neighbour clearly slower: the search ends there, and its guess says so, not "two more"."""
    p = SearchPlanner(_grid(32), repeats=2, limit_gib=1000.0, limit_what="--memory-limit", probe_steps=6)
    p.pace = Pace(steps=20, seq_len=512, device="cuda")
    done = []

    def run(step_ms):
        d = p.next()
        r = TrialResult(RunSpec(f"s/{d.trial.split}/{d.repeat}", d.trial, d.repeat, steps=d.steps), "ok",
                        [step_ms(d.trial)] * 10, 20.0 + 15.0 * d.trial.micro_batch, seconds=30.0)
        p.record(r)
        done.append(r)
        return d.trial

    run(lambda t: 100.0 * t.micro_batch)
    run(lambda t: 100.0 * t.micro_batch)  # the probes: 1x1, 2x1
    assert [run(lambda t: 2000.0), run(lambda t: 2000.0)] == [Trial(32, 1)] * 2
    assert p.estimate(done).runs == 2  # its neighbour below, 16x2, twice
    assert [run(lambda t: 2600.0), run(lambda t: 2600.0)] == [Trial(16, 2)] * 2
    assert p.estimate(done).runs == 0
    assert all(d.skip for d in iter(p.next, None))  # (the rest: skipped, none run)


def test_a_scripts_sweep_has_no_estimate_before_a_run_and_its_runs_after():
    p = GridPlanner(SPLITS, repeats=1)
    p.pace = Pace(steps=None, seq_len=256, device="cpu")
    assert p.estimate().seconds is None and "a script's steps are its own" in p.estimate().line()
    e = p.estimate([_done(Trial(1, 4), 30.0, 100.0)])
    assert e.seconds == pytest.approx(60.0) and "30 s a run" in e.how


def test_the_dry_run_ends_with_the_estimate_for_a_sweep_of_its_own_steps_only():
    cfg = SweepConfig(effective_batch=[4], repeats=1, device="cpu")
    lines = dry_run_lines(make_planner(cfg, SPLITS), cfg)
    assert len(lines) == 4 and lines[-1].startswith("estimate: about ") and "rough" in lines[-1]
    script = dry_run_lines(make_planner(cfg, SPLITS, short_runs=False), cfg)
    assert len(script) == 3 and not any(line.startswith("estimate") for line in script)
    search = SweepConfig(effective_batch=[32], repeats=1, device="cpu", memory_limit=64.0, search=True)
    lines = dry_run_lines(make_planner(search, _grid(32)), search)
    assert lines[-1].startswith("estimate: about ") and any("margin 9.0%" in line for line in lines)
