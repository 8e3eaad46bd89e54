"""What the trainer does between optimizer steps (evaluation, checkpoints, logging) is its own
time, never a step's; a run the trainer ended early says why.

The probe driven through a trainer's callback events with a clock the test moves (exact sums);
the summary, the projection and the answer on synthetic events; and one real script (a TRL
trainer that evaluates slowly every 2 steps and whose own callback stops it at step 5 of 12) run
through ``tracetui run``."""

import sys
import types
from pathlib import Path

import pytest
from transformers import Trainer, TrainerCallback, TrainerControl

from tracetui.analysis import Results, summarise
from tracetui.analysis.answer import held_back
from tracetui.analysis.between import occurrences
from tracetui.events.schema import make, validate
from tracetui.core.phases import FIELDS
from tracetui.probe.callback import Probe
from tracetui.probe.schedule import between_schedule
from tracetui.probe.stops import watch_stops
from tracetui.probe.timing import HostClock, Mark
from tracetui.events.log import read_events

from .conftest import outcome, read_csv, run_cli, scenarios


class MovedClock(HostClock):
    """A host clock that reads what the test set: every duration exact."""

    now = 0.0

    def mark(self, label: str) -> Mark:
        return Mark(label, self.now)


def _probe():
    events: list[dict] = []
    probe = Probe(events.append, "r", warmup=0)
    probe.clock = MovedClock()
    return probe, events


def _state(step, max_steps=12):
    return types.SimpleNamespace(global_step=step, max_steps=max_steps)


def _step(probe, clock, step, data=0.010, work=0.100):
    """One optimizer step: ``data`` s before on_step_begin (the trainer fetches the batches there),
    then ``work`` s of it."""
    clock.now += data
    probe.on_step_begin(None, _state(step - 1), TrainerControl())
    clock.now += work
    probe.on_step_end(None, _state(step), TrainerControl())


def test_evaluation_saving_and_logging_between_steps_are_no_steps_time():
    """Before, the 2 s evaluation after step 1 was the next step's data phase; now it is the
    step's ``between_ms`` (with the log before it and the save after it), and each step's phases
    still add up to its wall, which holds only its own time."""
    probe, events = _probe()
    clock = probe.clock
    _step(probe, clock, 1)
    clock.now += 0.005
    probe.on_log(None, _state(1), TrainerControl(), logs={"loss": 2.0, "learning_rate": 1e-4})
    for _ in range(3):  # the evaluation: its prediction steps, its metrics' log, then on_evaluate
        clock.now += 0.5
        probe.on_prediction_step(None, _state(1), TrainerControl())
    clock.now += 0.5
    probe.on_log(None, _state(1), TrainerControl(), logs={"eval_loss": 2.1, "eval_runtime": 2.0})
    probe.on_evaluate(None, _state(1), TrainerControl(), metrics={"eval_loss": 2.1})
    clock.now += 0.3
    probe.on_save(None, _state(1), TrainerControl())
    _step(probe, clock, 2, data=0.020)
    _step(probe, clock, 3)
    probe.on_log(None, _state(3), TrainerControl(), logs={"train_runtime": 9.0})  # the closing summary: not a log
    probe.on_train_end(None, _state(3), TrainerControl())
    steps = {e["step"]: e for e in events}
    assert sorted(steps) == [1, 2, 3]
    between = steps[1]["between_ms"]
    assert between == {"log": [pytest.approx(5.0)], "eval": [pytest.approx(2000.0)], "save": [pytest.approx(300.0)]}
    for e in steps.values():
        validate(e)
        # (the first step begins at its on_step_begin, the others where the step before ended)
        assert e["wall_ms"] == pytest.approx({1: 100.0, 2: 120.0, 3: 110.0}[e["step"]])
        assert sum(sum(e[f]) if isinstance(e[f], list) else e[f] for f in FIELDS) == pytest.approx(e["wall_ms"])
    assert steps[2]["data_ms"] == pytest.approx(20.0)  # the fetch after the save, and no more
    assert "between_ms" not in steps[2] and "between_ms" not in steps[3]


def test_a_summary_keeps_the_steps_free_of_evaluation_and_projects_it_where_the_real_run_does_it():
    """Synthetic runs: steps of 100 ms, an evaluation of 2 s after every second step. The median,
    p90 and the bound are the steps'; the row says 5 evaluations per run, 10 s; a projected run of
    1000 steps evaluating every 2 steps (the trainer's schedule) has 500 of them, and without a
    schedule (a log from a built-in sweep) none is projected."""
    def events(schedule):
        out = [make("run_started", "a", label="2x1", micro_batch=2, grad_accum=1, effective_batch=2, max_steps=10),
               make("run_settings", "a", settings={"between_every": schedule} if schedule else {})]
        for i in range(1, 11):
            extra = {"between_ms": {"eval": [2000.0]}} if i % 2 == 0 else {}
            out.append(make("step", "a", step=i, warmup=False, wall_ms=100.0 + i % 3, data_ms=2.0, forward_ms=[50.0],
                            backward_ms=[40.0], t_end=1000.0 + i, **extra))
        out.append(make("run_finished", "a", steps=10))
        return [validate(e) for e in out]

    (row,) = summarise(Results().extend(events({"eval": {"every": 2, "at_end": True}, "save": {"every": 0}})),
                       project_steps=1000)
    assert row["step_ms_p90"] < 103 and row["step_ms_median"] == pytest.approx(101.0)
    assert row["bound"] != "input-bound" and row["data_ms"] < 3
    assert (row["eval_n"], row["eval_s"], row["save_n"], row["log_n"]) == (5, pytest.approx(10.0), 0, 0)
    assert row["projected_between_s"] == pytest.approx(500 * 2.0)
    assert row["projected_s"] == pytest.approx(1000 * row["step_ms_median"] / 1000 + 1000.0)
    assert row["projected_note"] == "with 500 evaluations at 2.00 s each"
    (plain,) = summarise(Results().extend(events(None)), project_steps=1000)
    assert plain["projected_s"] == pytest.approx(1000 * plain["step_ms_median"] / 1000)
    assert plain["eval_n"] == 5 and plain.get("projected_between_s") is None


def test_how_often_a_run_of_any_length_evaluates_saves_and_logs():
    """As transformers' DefaultFlowCallback decides it: every N steps, once more at the end where
    the run's length is no multiple (evaluation, saving), the first step (logging_first_step), a
    share of the run (eval_steps=0.25), each epoch's end."""
    assert occurrences({"every": 2, "at_end": True}, 12) == 6
    assert occurrences({"every": 5, "at_end": True}, 12) == 3
    assert occurrences({"every": 5, "delay": 10, "at_end": True}, 12) == 2
    assert occurrences({"every": 10, "first": True}, 100) == 11
    assert occurrences({"every": 3, "ratio": 0.25, "at_end": True}, 1000) == 4
    assert occurrences({"every": 40, "epoch": True}, 100) == 3
    assert occurrences({"every": 0}, 100) == 0
    assert occurrences(None, 100) is None
    args = types.SimpleNamespace(gradient_accumulation_steps=2, eval_strategy="steps", eval_steps=0.25, eval_delay=0,
                                 save_strategy="epoch", save_steps=500, logging_strategy="steps", logging_steps=10,
                                 logging_first_step=True)
    state = types.SimpleNamespace(eval_steps=3, save_steps=500, logging_steps=10)
    assert between_schedule(args, state, loader=list(range(80))) == {
        "eval": {"every": 3, "ratio": 0.25, "delay": 0, "at_end": True}, "save": {"every": 40, "epoch": True},
        "log": {"every": 10, "first": True}}


class LossWatchdog(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        self._stop(control)

    def _stop(self, control):  # (a helper: the callback that called it is named)
        control.should_training_stop = True


class Loop(Trainer):
    """A trainer's own loop (no data in an epoch: it stops training itself)."""

    def _run_epoch(self, control):
        control.should_training_stop = True


def test_the_trainer_stopping_a_run_early_is_said_with_who_stopped_it():
    def stopped(setter, step=5):
        probe, _ = _probe()
        control = TrainerControl()
        assert watch_stops(control)
        if setter is not None:
            setter(control)
        probe._control = control
        return probe.trainer_stop(_state(step))

    assert stopped(lambda c: LossWatchdog().on_step_end(None, None, c)) == (
        "stopped by the trainer at step 5 of 12: LossWatchdog set should_training_stop in on_step_end")
    assert stopped(lambda c: LossWatchdog().on_step_end(None, None, c), step=12) is None  # it ran its steps
    assert stopped(None).endswith("its training loop ended with no callback setting should_training_stop "
                                  "(the training data ran out)")

    assert stopped(lambda c: Loop.__new__(Loop)._run_epoch(c)).endswith(
        "the trainer's own loop set should_training_stop (Loop._run_epoch)")
    # what the trainer saves of its control object is unchanged
    control = TrainerControl()
    watch_stops(control)
    control.should_training_stop = True
    assert control.state() == TrainerControl(should_training_stop=True).state()


def test_too_few_steps_names_the_trainers_reason():
    rows = [{"trial": "1x2", "steps_measured": 3, "too_few_steps": True,
             "trainer_stop": "stopped by the trainer at step 5 of 12: LossWatchdog set should_training_stop in on_step_end"},
            {"trial": "2x1", "steps_measured": 20}]
    assert held_back(rows) == ("too few steps for a verdict (1x2: 3 measured, 6 needed for an interval; stopped by "
                               "the trainer at step 5 of 12: LossWatchdog set should_training_stop in on_step_end)")


SCRIPT = '''
"""A TRL trainer that evaluates every 2 steps, slowly (compute_metrics sleeps 2 s, longer than any
step even on a loaded CPU), and whose own callback stops it at step 5 of its 12 (a loss watchdog would)."""
import sys
import time

from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, TrainerCallback, set_seed
from trl import SFTConfig, SFTTrainer

from tracetui.core.presets import build_config
from tracetui.runner.sources import byte_tokenizer


class StopAtFive(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= 5:
            control.should_training_stop = True


def slow_metrics(pred):
    time.sleep(2.0)
    return {"rows": float(len(pred.predictions))}


set_seed(0)
words = "the quick brown fox jumps over the lazy dog".split()
rows = [" ".join(words[(i + j) % len(words)] for j in range(12)) for i in range(64)]
args = SFTConfig(output_dir=sys.argv[1], max_steps=12, per_device_train_batch_size=2, eval_strategy="steps",
                 eval_steps=2, per_device_eval_batch_size=4, logging_steps=100, save_strategy="no",
                 report_to="none", max_length=32, use_cpu=True, disable_tqdm=True)
SFTTrainer(model=AutoModelForCausalLM.from_config(build_config("tiny")), args=args,
           train_dataset=Dataset.from_dict({"text": rows}), eval_dataset=Dataset.from_dict({"text": rows[:8]}),
           processing_class=byte_tokenizer(), compute_metrics=slow_metrics,
           peft_config=LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"),
           callbacks=[StopAtFive()]).train()
'''


def _evaluating_script_stopped_early(folder: Path) -> dict:
    script = folder / "evalstop.py"
    script.write_text(SCRIPT)
    out = folder / "out.csv"
    proc = run_cli("run", "--export", "csv", "-o", out, "--warmup", 1, "--runs-dir", folder / "runs", "--",
                   sys.executable, script, folder / "o", cwd=folder)
    return dict(proc=proc, out=out, runs=folder / "runs")


EVAL_MS = 2000  # the script's compute_metrics sleep: a step that held an evaluation would take longer


scenarios(__name__, {"evaluates and stops": _evaluating_script_stopped_early})


@pytest.mark.slow
def test_a_script_that_evaluates_slowly_and_stops_early(scenario_results):
    """Each 2 s evaluation (after steps 2 and 4) is timed as evaluation, in no step's data phase;
    the steps' statistics and bound are theirs alone; the row, the closing lines and run_finished
    say the trainer stopped the run at step 5 of 12 and which callback did; the projection of the
    script's own 12 steps counts its 6 evaluations."""
    got = outcome(scenario_results[__name__], "evaluates and stops")
    proc = got["proc"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = read_events(list(got["runs"].glob("*/events.jsonl"))).events
    steps = {e["step"]: e for e in events if e["type"] == "step"}
    assert sorted(steps) == [1, 2, 3, 4, 5]
    assert {s for s, e in steps.items() if "between_ms" in e} == {2, 4}
    for s in (2, 4):
        assert steps[s]["between_ms"].keys() == {"eval"} and steps[s]["between_ms"]["eval"][0] >= EVAL_MS
    assert max(e["data_ms"] for e in steps.values()) < EVAL_MS / 4  # (before, each evaluation was the next step's data)
    assert max(e["wall_ms"] for s, e in steps.items() if s > 1) < EVAL_MS
    (finished,) = [e for e in events if e["type"] == "run_finished"]
    why = "stopped by the trainer at step 5 of 12: StopAtFive set should_training_stop in on_step_end"
    assert finished["stopped_early"] is True and finished["trainer_stop"] == why and finished["stop_reason"] is None
    (row,) = read_csv(got["out"])
    assert row["trainer_stop"] == why and row["stopped_early"] == "True" and row["stop_reason"] == ""
    assert row["bound"] != "input-bound" and float(row["step_ms_p90"]) < EVAL_MS
    assert float(row["eval_n"]) == 2 and float(row["eval_s"]) >= 2 * EVAL_MS / 1000 and float(row["save_n"]) == 0
    assert row["projected_note"].startswith("with 6 evaluations at ")
    assert float(row["projected_s"]) >= 6 * EVAL_MS / 1000 + 12 * float(row["step_ms_median"]) / 1000
    assert f"note: 2x1: {why}" in proc.stderr
    assert "note: 2x1: between its steps, per run, 2 evaluations" in proc.stderr
