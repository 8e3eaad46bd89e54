"""The search planner (``--search``): unit tests fed with typed results, and a real tiny CPU
sweep with ``--memory-limit``."""

import pytest

from tracetui.analysis import Results, summarise
from tracetui.core.checks import validate
from tracetui.core.config import SweepConfig
from tracetui.planning.plan import WAIT, GridPlanner, RunSpec, TrialResult
from tracetui.planning.search import make_planner
from tracetui.planning.search import SearchPlanner, wants_search
from tracetui.core.trial import Trial

from .conftest import cpu_memory_limit


def _grid(eb):
    return [Trial(m, eb // m) for m in range(1, eb + 1) if eb % m == 0]


def drive(planner, measure, limit=200):
    """Ask ``planner`` until it is done; ``measure(trial)`` -> (status, walls, peak). Returns the
    decisions in order."""
    out = []
    for _ in range(limit):
        d = planner.next()
        if d is None:
            return out
        assert d != WAIT  # one lane: nothing is ever in flight when it is asked
        out.append(d)
        spec = RunSpec("s/" + d.trial.split, d.trial, d.repeat, why=d.why)
        if d.skip:
            planner.record(TrialResult(spec, d.skip, message=d.why))
        else:
            status, walls, peak = measure(d.trial)
            planner.record(TrialResult(spec, status, walls, peak))
    raise AssertionError("the planner never finished")


def gpu_like(peak_a=3.6, peak_b=3.7, limit=24.0, per_micro=lambda m: 250 + 20 * m):
    """Host-bound until large micro-batches: step = accumulation x time per micro-batch."""
    def measure(t):
        peak = peak_a + peak_b * t.micro_batch
        if peak > limit:
            return "oom", [], None
        return "ok", [t.grad_accum * per_micro(t.micro_batch)] * 8, peak
    return measure


def test_run_unfit_runs_the_largest_first_and_an_oom_bounds_the_search():
    """--run-unfit: trials predicted not to fit are run, the largest first; each out-of-memory
    caps the micro-batch, and the next start is the largest below the cap."""
    p = SearchPlanner(_grid(64), repeats=1, limit_gib=24.0, limit_what="--memory-limit", run_unfit=True)
    ds = drive(p, gpu_like())
    ran = [d.trial.split for d in ds if not d.skip]
    assert ran[:3] == ["1x1", "2x1", "64x1"]
    assert ds[2].why.startswith("largest micro-batch not yet out of memory, run although predicted 240.40 GiB")
    # 64, 32, 16 and 8 run out of memory (3.6 + 3.7 m > 24), each capping the next start below it
    assert ran[3:6] == ["32x2", "16x4", "8x8"] and "below micro-batch 16, which ran out of memory" in ds[5].why
    assert ran[6] == "4x16" and "predicted to fit (below micro-batch 8" in ds[6].why


def test_memory_line_from_two_probes_then_largest_fit_and_skips():
    p = SearchPlanner(_grid(64), repeats=1, limit_gib=24.0, limit_what="--memory-limit", probe_steps=5)
    ds = drive(p, gpu_like())
    ran = [d.trial.split for d in ds if not d.skip]
    assert ran[:2] == ["1x1", "2x1"] and all(d.why.startswith("memory probe") for d in ds[:2])
    # the probes are short runs; every candidate runs the sweep's steps
    assert [d.steps for d in ds[:2]] == [5, 5] and all(d.steps is None for d in ds[2:])
    # 3.6 + 3.7 m: 4 -> 18.4 GiB fits under 90% of 24; 8 -> 33.2 does not
    assert ran[2] == "4x16" and "predicted 18.40 GiB" in ds[2].why
    skipped = {d.trial.split: d.why for d in ds if d.skip}
    assert skipped["8x8"] == "skipped: predicted 33.20 GiB > limit 24 GiB"
    assert skipped["64x1"].startswith("skipped: predicted 240.40 GiB")
    # 2x32 and 1x64 are hopeless from the probes' time per micro-batch: never run
    assert "2x32" in skipped and "1x64" in skipped and "s/step from 2x1" in skipped["2x32"]
    assert ran == ["1x1", "2x1", "4x16"]
    assert sorted(d.trial.split for d in ds if d.trial.effective_batch == 64) == sorted(t.split for t in _grid(64))
    assert any("predicted/measured peak GiB: 4x16 18.40/18.40" in n for n in p.notes())


def test_neighbours_walk_down_only_while_clearly_faster():
    # at 80 GiB: 16 fits (62.8), 32 does not; 16 thrashes, so 8 is clearly faster, 4 is not
    times = {1: 400, 2: 420, 4: 500, 8: 700, 16: 3000}
    p = SearchPlanner(_grid(64), repeats=1, limit_gib=80.0, limit_what="the card")
    ds = drive(p, gpu_like(limit=80.0, per_micro=lambda m: times[m]))
    ran = [d.trial.split for d in ds if not d.skip]
    assert ran == ["1x1", "2x1", "16x4", "8x8", "4x16"]
    assert "neighbour below the best so far (8x8" in ds[4].why


def test_an_oom_bounds_the_search_and_the_line_is_refitted():
    # the probes under-predict 8 (peak grows faster above 4): it runs out of memory
    def measure(t):
        peak = 2.0 + 1.0 * t.micro_batch + (6.0 if t.micro_batch >= 8 else 0.0)
        if peak > 12.0:
            return "oom", [], None
        return "ok", [t.grad_accum * 100.0 / t.micro_batch ** 0.5] * 8, peak
    p = SearchPlanner(_grid(16), repeats=1, limit_gib=12.0, limit_what="--memory-limit")
    ds = drive(p, measure)
    ran = [(d.trial.split, d.why) for d in ds if not d.skip]
    assert [r for r, _ in ran] == ["1x1", "2x1", "8x2", "4x4"]
    assert "below micro-batch 8, which ran out of memory" in ran[3][1]
    skipped = {d.trial.split: d.why for d in ds if d.skip}
    assert skipped["16x1"] == "skipped: micro-batch 16 >= 8, which ran out of memory"
    assert "s/step from 2x1" in skipped["2x8"]  # 2x1's time per micro-batch x 8 > 4x4's step
    assert any("micro-batch 8 ran out of memory" in n for n in p.notes())


def test_probes_are_short_only_where_every_step_peaks_alike():
    """Rows of one length: the warm-up and three measured steps (or --steps, if fewer). Rows of
    varied lengths, and a user's script (its steps are its own): every step."""
    from tracetui.planning.search import make_search, probe_length

    assert probe_length(SweepConfig(steps=20, warmup=3)) == 6
    assert probe_length(SweepConfig(steps=4, warmup=3)) == 4
    assert probe_length(SweepConfig(steps=20, warmup=3, dataset="synthetic-ragged")) is None
    assert probe_length(SweepConfig(steps=20, warmup=3, dataset="train.jsonl")) is None
    cfg = SweepConfig(effective_batch=[8], steps=20, warmup=3, memory_limit=24.0, search=True)
    assert make_search(cfg, validate(cfg)).probe_steps == 6
    assert make_search(cfg, validate(cfg), short_runs=False).probe_steps is None
    decisions = drive(make_search(cfg, validate(cfg), short_runs=False), gpu_like())
    assert decisions[0].why.startswith("memory probe: one micro-batch of 1 per step, to learn")
    assert all(d.steps is None for d in decisions)


def test_effective_batches_share_memory_and_speed():
    p = SearchPlanner(_grid(16) + _grid(64), repeats=1, limit_gib=24.0, limit_what="--memory-limit")
    ds = drive(p, gpu_like())
    probes = [d for d in ds if d.why.startswith("memory probe")]
    assert [d.trial.split for d in probes] == ["1x1", "2x1"]  # once for both effective batches
    ran = [d.trial.split for d in ds if not d.skip]
    assert ran == ["1x1", "2x1", "4x4", "4x16"]


def test_repeats_run_back_to_back_and_probes_once():
    p = SearchPlanner(_grid(8), repeats=2, limit_gib=24.0, limit_what="--memory-limit")
    ds = drive(p, gpu_like())
    ran = [(d.trial.split, d.repeat) for d in ds if not d.skip]
    assert ran[:4] == [("1x1", 0), ("2x1", 0), ("4x2", 0), ("4x2", 1)]


def test_no_memory_bound_no_probes_starts_largest():
    p = SearchPlanner(_grid(8), repeats=1, limit_gib=None)
    ds = drive(p, gpu_like(limit=1e9))
    assert [d.trial.split for d in ds if not d.skip][0] == "8x1"


def test_default_is_search_above_a_handful_and_grid_forces():
    cfg = SweepConfig(effective_batch=[64], repeats=1, device="cpu")
    trials = validate(cfg)
    search, line = wants_search(cfg, trials)
    assert search and "--grid runs every split" in line
    cfg.grid = True
    assert isinstance(make_planner(cfg, trials), GridPlanner)
    small = SweepConfig(effective_batch=[4], repeats=1, device="cpu")
    assert not wants_search(small, validate(small))[0]


def _limit_above_a_trials_base() -> float:
    """The CPU searches' --memory-limit: 1.04 GiB above what a trial holds before it builds
    anything (2.45 GiB with torch's CPU build)."""
    return cpu_memory_limit(1.04)


@pytest.mark.slow
def test_real_cpu_search_with_memory_limit(tmp_path):
    """A real tiny sweep on the CPU: probes learn the memory line, the trial predicted over the
    limit is skipped with its reason, the largest predicted to fit runs, and the summary carries
    its prediction beside what it measured; probes are no rows."""
    from tracetui.runner.sweep import Sweep

    # 2.45 GiB with torch's CPU build (bound 2.2 GiB), where a trial holds 1.41 GiB before it builds
    # anything: the two probes' line predicts 8x1 at 2.32-2.62 GiB from run to run (2x1's peak read
    # 1.68-1.74 GiB; 8x1 really needs over 2.6), 4x2 at 1.90-2.04 GiB
    limit = _limit_above_a_trials_base()
    cfg = SweepConfig(effective_batch=[8], seq_len=512, steps=5, warmup=1, repeats=1, device="cpu",
                      memory_limit=limit, search=True, runs_dir=str(tmp_path))
    trials = validate(cfg)
    planner = make_planner(cfg, trials)
    results = Results()
    sweep = Sweep(cfg, trials, on_event=results.add, planner=planner)
    try:
        sweep.run()
    finally:
        sweep.close()
    rows = {r["split"]: r for r in summarise(results)}
    assert set(rows) == {"1x8", "2x4", "4x2", "8x1"}  # the probes 1x1, 2x1 are no rows
    assert rows["8x1"]["status"] == "skipped" and rows["8x1"]["message"].startswith("predicted")
    assert rows["8x1"]["predicted_mem_gib"] > limit * 0.9
    ran = [r for r in rows.values() if r["status"] == "ok"]
    assert ran and all(r["predicted_mem_gib"] and r["peak_mem_gib"] for r in ran)
    assert rows["4x2"]["status"] == "ok" and rows["4x2"]["why"].startswith("largest micro-batch predicted to fit")
    probes = [r for r in results.runs.values() if r.started.get("why", "").startswith("memory probe")]
    assert sorted(r.trial.split for r in probes) == ["1x1", "2x1"]
    assert all(s["peak_mem_gib"] > 0 for r in probes for s in r.steps)
    # a probe runs the warm-up and three measured steps, not the sweep's five: as its own
    # config says, and as it says why it ran
    assert all([s["step"] for s in r.steps] == [1, 2, 3, 4] and r.started["config"]["steps"] == 4
               and ", 4 steps, to learn peak memory" in r.started["why"] for r in probes)
    assert len(results.runs[next(i for i in results.runs if i.endswith("/4x2"))].steps) == 5


@pytest.mark.slow
def test_real_cpu_search_runs_a_trial_predicted_not_to_fit_when_asked_and_its_oom_bounds_it(tmp_path):
    """--run-unfit on the CPU: 8x1, predicted over 90% of --memory-limit, runs and really runs out
    of memory (the capped data size); its row says so beside its prediction, and the search goes
    on below it."""
    from tracetui.runner.sweep import Sweep

    limit = _limit_above_a_trials_base()
    cfg = SweepConfig(effective_batch=[8], seq_len=512, steps=2, warmup=1, repeats=1, device="cpu",
                      memory_limit=limit, search=True, run_unfit=True, runs_dir=str(tmp_path))
    trials = validate(cfg)
    results = Results()
    sweep = Sweep(cfg, trials, on_event=results.add, planner=make_planner(cfg, trials))
    try:
        sweep.run()
    finally:
        sweep.close()
    rows = {r["split"]: r for r in summarise(results)}
    big = rows["8x1"]
    assert big["status"] == "oom" and "out of memory at micro-batch 8" in big["message"]
    assert big["predicted_mem_gib"] > limit * 0.9 and "(--run-unfit)" in big["why"]
    assert rows["4x2"]["status"] == "ok" and "below micro-batch 8, which ran out of memory" in rows["4x2"]["why"]


def test_a_card_nvml_cannot_read_leaves_the_search_unbounded_and_says_why(monkeypatch, capsys):
    import pynvml

    from tracetui.planning.search import make_search

    def fails():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", fails)
    planner = make_search(SweepConfig(device="cuda"), [Trial(1, 4), Trial(2, 2), Trial(4, 1)])
    assert planner.limit is None
    said = capsys.readouterr().err
    assert "no memory bound: NVML cannot read the card's memory" in said and "--memory-limit" in said
    assert planner.notes()[0].startswith("search: no memory bound: NVML cannot read the card's memory")
