"""Where a sweep's time went: its steps against its start (the fork server's imports, the
checks, the first run's start), the time between runs and after the last step, in the JSON, a
headless line and the monitor; and what each run's start was spent on, in the detail pane.

Real sweeps of the tiny preset (real forked workers, a real trainer in each), read back from
their own logs; the monitor's account from one recorded."""

import asyncio
import json
import sys
from pathlib import Path

import pytest

from tracetui.analysis import Results, time_line, time_spent
from tracetui.events.log import read_events
from tracetui.tui.app import TraceApp
from tracetui.tui.sources import ReplaySource
from tracetui.tui.widgets import DetailPane, start_words

from .conftest import CPU_TINY, outcome, pilot_until, run_cli, run_main, scenarios


def _adds_up(spent: dict) -> bool:
    outside = sum(spent[k] for k in ("before_first_step_s", "between_runs_s", "within_runs_s", "after_last_step_s"))
    outside += spent.get("outputs_s") or 0.0  # (a command's own sweep: its outputs, to its end)
    parts = [spent[k] for k in ("libraries_s", "checks_s") if spent.get(k) is not None] + [spent["first_run_start_s"]]
    return (outside + spent["stepping_s"] == pytest.approx(spent["command_s"], abs=0.06)
            and 0 < sum(parts) <= spent["before_first_step_s"] + 0.02)  # (each rounded to 0.01 s)


def _log(runs_dir):
    (log,) = list(runs_dir.glob("*/events.jsonl"))
    return log


def _a_command_of_its_own(folder: Path) -> dict:
    """A short sweep as a command of its own (a fresh process: the fork server's imports are its)."""
    out = folder / "sum.json"
    proc = run_cli("--splits", "1x2,2x1", "--effective-batch", "2", "--steps", "5", "--warmup", "2", "--seq-len", "32",
                   "--runs-dir", folder / "runs", "--export", "json", "-o", out)
    return dict(proc=proc, out=out, runs=folder / "runs")


scenarios(__name__, {"command": _a_command_of_its_own})


@pytest.mark.slow
def test_a_sweeps_time_adds_up_from_its_start_to_its_end(scenario_results):
    got = outcome(scenario_results[__name__], "command")
    proc, out, tmp_runs = got["proc"], got["out"], got["runs"]
    assert proc.returncode == 0, proc.stderr
    (spent,) = json.loads(out.read_text())["time"]
    events = read_events([_log(tmp_runs)]).events
    steps = [e for e in events if e["type"] == "step"]
    assert spent["sweep"] == events[0]["run_id"] and events[0]["type"] == "sweep"
    assert spent["steps_s"] == pytest.approx(sum(e["wall_ms"] for e in steps) / 1000, abs=0.011)
    assert spent["warmup_steps_s"] == pytest.approx(sum(e["wall_ms"] for e in steps if e["warmup"]) / 1000, abs=0.011)
    # the parts outside the steps and the wall time the steps covered make the whole; one lane,
    # no two steps at once: that wall time is their sum
    assert _adds_up(spent) and spent["stepping_s"] == pytest.approx(spent["steps_s"], abs=0.03)
    # forked trials: the fork server's imports and the checks come before the first step, and
    # the command's start is its process's, before tracetui's first line ran
    if sys.platform.startswith("linux"):
        assert 0 < spent["libraries_s"] and 0 <= spent["checks_s"]
        assert spent["libraries_s"] + spent["checks_s"] + spent["first_run_start_s"] < spent["before_first_step_s"]
    assert 0 < spent["first_run_start_s"] < spent["before_first_step_s"]
    line = next(x for x in proc.stderr.splitlines() if x.startswith("tracetui: time: "))
    assert line.startswith(f"tracetui: time: {spent['command_s']:.1f} s, ") and "before the first step" in line
    # the account runs past the sweep's end to the outputs written; the JSON names the command
    # that runs the sweep again, and the config it emitted (none asked for)
    data = json.loads(out.read_text())
    assert 0 <= spent["outputs_s"] < 5 and data["emitted_config"] is None
    assert data["command"].startswith("tracetui --splits 1x2,2x1 --effective-batch 2 ") and str(out) in data["command"]


@pytest.mark.slow
def test_a_replayed_log_gives_the_same_account_and_a_command_called_again_starts_afresh(tmp_path):
    """The account is the log's: ``show`` gives what the sweep gave. A second command in the
    same process starts when it is called, not with the first (nor with the process)."""
    outs = []
    for name in ("a", "b"):
        out = tmp_path / f"{name}.json"
        proc = run_main("--splits", "2x1", "--effective-batch", "2", "--steps", "3", "--warmup", "1",
                        "--seq-len", "16", "--runs-dir", tmp_path / name, "--export", "json", "-o", out)
        assert proc.returncode == 0, proc.stderr
        outs.append(json.loads(out.read_text())["time"][0])
    # the second found the fork server up: its imports were the first command's, none of its own
    assert outs[1]["libraries_s"] is None
    for spent in outs:
        assert _adds_up(spent)
    again = tmp_path / "again.json"
    proc = run_cli("show", _log(tmp_path / "b"), "--export", "json", "-o", again)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(again.read_text())["time"] == [outs[1]]


def test_the_monitor_says_where_the_time_went_and_what_each_start_was_spent_on():
    events = read_events([CPU_TINY]).events  # a real sweep's log, recorded
    results = Results().extend(events)
    runs = [r for r in results.runs.values() if r.steps]
    words = start_words(runs[0])
    assert words.startswith(f"{min(s['t_end'] - s['wall_ms'] / 1000 for s in runs[0].steps) - runs[0].asked_at:.1f} s "
                            "from its start to its first step")
    app = TraceApp(ReplaySource(events))

    async def drive():
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot_until(pilot, lambda: any(m.startswith("time: ") for _, m in app.notices))
            detail = app.query_one(DetailPane).content(100).plain
            return [m for _, m in app.notices if m.startswith("time: ")], detail

    said, detail = asyncio.run(drive())
    (spent,) = time_spent(results)
    assert said == [f"time: {time_line(spent)}"]
    assert said[0].startswith(f"time: {spent['command_s']:.1f} s, {100 * spent['steps_s'] / spent['command_s']:.0f}% "
                              "in steps")
    assert "started: " in detail and "from its start to its first step" in detail


def _ev(etype, run_id, t, **kw):
    return {"v": 1, "type": etype, "run_id": run_id, "t": t, **kw}


def _step(run_id, step, begin, wall_s, warmup=False):
    return _ev("step", run_id, begin + wall_s + 0.01, step=step, warmup=warmup, wall_ms=wall_s * 1000,
               t_end=begin + wall_s, rank=0)


def test_the_account_of_two_lanes_a_later_rerun_and_a_scripts_stages():
    """Two lanes step at once (the share is of the wall time the steps covered, not of their
    sum); a run made again after the sweep's end is not the sweep's; a script's stages, sent
    at once at its first step, still date its start."""
    t0 = 1000.0
    events = [_ev("sweep", "s", t0, times={"command": t0, "sweep": t0 + 1.0})]
    for lane, rid in enumerate(("s/a", "s/b")):
        # a script's callback: every stage at once, at the first step, each with its own age
        for stage, age in (("running the script", 0.2), ("building the trainer", 1.5), ("first step", 2.0)):
            events.append(_ev("run_stage", rid, t0 + 3.0 + lane * 0.1, stage=stage, elapsed_s=age + lane * 0.1,
                              stages={}))
        events += [_step(rid, n, t0 + 3.0 + lane * 0.1 + n, 1.0) for n in range(4)]
    events.append(_ev("sweep", "s", t0 + 8.0, times={"ended": t0 + 8.0}))
    events += [_step("s/a", 0, t0 + 60.0, 1.0)]  # the monitor's r, a minute later
    (spent,) = time_spent(Results().extend(events))
    assert spent["steps_s"] == pytest.approx(8.0) and spent["stepping_s"] == pytest.approx(4.1)
    assert spent["command_s"] == 8.0 and spent["steps_share"] == pytest.approx(4.1 / 8.0, abs=0.001)
    assert spent["after_last_step_s"] == pytest.approx(0.9) and spent["first_run_start_s"] == pytest.approx(2.0)
    assert _adds_up(spent)
