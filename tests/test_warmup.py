"""The warm-up rule (tracetui.core.warmup): replayed on recorded H200 runs, a fixed count, and a
real tiny CPU sweep whose rows say how many warm-up steps each run took and why."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

from tracetui.core import warmup
from tracetui.core.config import SweepConfig
from tracetui.core.warmup import AUTO, Rule

RESULTS = Path(__file__).parent.parent / "docs" / "results"
LOGS = sorted(RESULTS.glob("h200_*/*events*.jsonl.gz")) + sorted(RESULTS.glob("h200_time_to_verdict/*.jsonl.gz"))


def _runs(path: Path) -> dict[str, list[tuple[int, float, float | None]]]:
    runs: dict[str, list] = {}
    with gzip.open(path, "rt") as fh:
        for line in fh:
            e = json.loads(line)
            if e.get("type") == "step" and e.get("rank", 0) == 0:
                runs.setdefault(e["run_id"], []).append((e["step"], e["wall_ms"], e.get("peak_mem_gib")))
    return {k: sorted(v) for k, v in runs.items() if len(v) >= 8}


def _replay(steps) -> Rule:
    rule = Rule(AUTO, len(steps))
    for _, wall, peak in steps:
        rule.step(wall, peak)
    return rule


def test_auto_on_recorded_h200_runs_ends_early_and_keeps_the_fixed_warmups_medians():
    """Every recorded H200 run (step times, peaks): auto ends its warm-up after 2 or 3 steps (the first
    step's one-time costs and the peak's growth in step 2 always inside), and the median of the steps
    it measures is within 7% of the fixed three-step warm-up's (1% on average)."""
    runs = [s for path in LOGS for s in _runs(path).values()]
    assert len(runs) >= 30
    devs = []
    for steps in runs:
        rule = _replay(steps)
        assert rule.count in (2, 3) and rule.why.startswith("settled")
        auto = statistics.median(w for k, w, _ in steps if k > rule.count)
        fixed = statistics.median(w for k, w, _ in steps if k > 3)
        devs.append(abs(auto / fixed - 1))
    assert max(devs) < 0.07 and statistics.mean(devs) < 0.01


def test_auto_never_ends_before_the_first_step_or_while_the_peak_grows_and_has_a_ceiling():
    rule = Rule(AUTO, 20)
    assert rule.step(100.0, 1.0) is True  # the first optimizer step: always warm-up
    assert rule.step(100.0, 2.0) is True  # same time, but the peak grew
    assert rule.step(100.0, 2.0) is False and rule.count == 2 and "settled" in rule.why
    noisy = Rule(AUTO, 20)
    flags = [noisy.step(w) for w in [100.0, 200.0] * 10]
    assert flags == [True] * 10 + [False] * 10 and noisy.count == 10 and noisy.why.startswith("ceiling")
    short = Rule(AUTO, 8)  # the ceiling leaves the steps pairing needs
    assert [short.step(w) for w in [100.0, 200.0] * 4].count(False) == warmup.LEAST_MEASURED


def test_under_head_starts_the_step_that_settles_stays_warmup():
    rule = Rule(AUTO, 20)
    assert [rule.step(w, hold=True) for w in (300.0, 100.0, 100.0)] == [True, True, True]
    assert rule.count == 3 and rule.ended_at(3) and not rule.step(100.0, hold=True)


def test_a_fixed_count_keeps_its_meaning():
    rule = Rule(3, 20)
    assert [rule.step(w) for w in (100.0,) * 6] == [True, True, True, False, False, False]
    assert rule.count == 3 and rule.why == "--warmup 3" and rule.ended_at(3)
    none = Rule(0, 20)
    assert none.count == 0 and none.step(100.0) is False


def test_the_setting_takes_auto_or_a_count():
    from tracetui.core.coerce import from_mapping
    from tracetui.core.config import ConfigError

    assert SweepConfig().warmup == AUTO
    assert from_mapping({"warmup": "3"}).warmup == 3 and from_mapping({"warmup": "auto"}).warmup == AUTO
    with pytest.raises(ConfigError, match="auto or a whole number"):
        from_mapping({"warmup": "soon"})


def test_the_default_run_length_pairs_every_verdict():
    """At the default --steps and --warmup, any two runs share at least the steps a paired verdict
    needs, whatever each run's warm-up."""
    from tracetui.analysis import MIN_INTERVAL_STEPS

    cfg = SweepConfig()
    for steps in (cfg.steps, 8, 12):
        assert steps - warmup.most(cfg.warmup, steps) >= MIN_INTERVAL_STEPS


@pytest.mark.slow
def test_a_tiny_cpu_sweep_says_each_runs_warmup(tmp_path):
    """A real sweep at the default --warmup (auto): each row says how many warm-up steps its run
    took and why, and keeps the measured steps a paired verdict needs."""
    from .conftest import run_main

    out = tmp_path / "s.json"
    run_main("--export", "json", "-o", out, "--splits", "1x2,2x1", "--effective-batch", 2, "--steps", 8,
             "--repeats", 1, "--seq-len", 32, "--allow-busy", "--runs-dir", tmp_path / "runs")
    rows = json.loads(out.read_text())["splits"]
    assert len(rows) == 2
    for row in rows:
        count, _, why = row["warmup_why"].partition(" ")
        assert 1 <= int(count) <= 2 and ("settled" in why or "ceiling" in why), row
        assert row["steps_measured"] == 8 - int(count) >= 6


def test_a_run_started_at_the_default_warmup_passes_the_wire_schema():
    """A swept script's probe says its warm-up as given (``auto`` by default) in its run_started
    config; the listener validates every event, and one refused would leave the run without a row."""
    from tracetui.events.schema import RUN_STARTED, make, validate

    event = make(RUN_STARTED, "s/1x4", label="1x4", micro_batch=1, grad_accum=4, world_size=1, mode="attach",
                 config={"steps": 8, "warmup": "auto"}, max_steps=8)
    assert validate(event)["config"]["warmup"] == "auto"
