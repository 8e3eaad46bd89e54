"""Trials beyond the split: --vary, the knob registry, unavailable settings, settings that change
the result, and the recommendation as SFTConfig arguments and a TRL config file."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tracetui.core.checks import validate
from tracetui.core.coerce import from_mapping
from tracetui.core.config import ConfigError, SweepConfig
from tracetui.core.tomlfile import load_toml
from tracetui.core.knobs import KNOBS, SHORT, result_changing, script_args
from tracetui.core.trial import Trial

from .conftest import busy_marked, read_csv, run_main


def test_a_trial_is_a_value_whose_label_is_never_parsed():
    t = Trial(4, 1, 1, {"attn_implementation": "eager", "activation_checkpointing": True})
    assert t == Trial(4, 1, 1, (("activation_checkpointing", True), ("attn_implementation", "eager")))
    assert hash(t) == hash(Trial(4, 1, 1, {"attn_implementation": "eager", "activation_checkpointing": True}))
    assert t.label(SHORT) == "4x1 ckpt=on attn=eager"
    assert t.slug(SHORT) == "4x1_ckpt-on_attn-eager"
    assert t != Trial(4, 1)  # another setting is another trial, never a repeat of the split
    # it travels as fields: the same trial comes back whatever its label says
    fields = dict(t.fields(), label="anything at all")
    assert Trial.from_fields(fields) == t
    assert Trial(2, 2, 2).effective_batch == 8 and Trial(2, 2, 2).split == "2x2x2"


def test_vary_crosses_the_splits_with_every_combination():
    cfg = from_mapping({"splits": "1x2,2x1", "effective_batch": "2",
                        "vary": ["attn=sdpa,eager", "activation_checkpointing=off,on"]})
    trials = validate(cfg)
    assert len(trials) == 8
    assert {t.split for t in trials} == {"1x2", "2x1"}
    assert {t.settings for t in trials if t.split == "1x2"} == {
        (("activation_checkpointing", a), ("attn_implementation", b)) for a in (False, True) for b in ("sdpa", "eager")}
    # the trial's run trains with its settings
    eager_on = next(t for t in trials if t.setting("attn_implementation") == "eager" and t.setting("activation_checkpointing"))
    run_cfg = cfg.for_trial(eager_on)
    assert run_cfg.attn_implementation == "eager" and run_cfg.activation_checkpointing is True and run_cfg.vary == []


@pytest.mark.parametrize("vary, says", [
    (["attention_kernel=sdpa,eager"], "is not NAME=V1,V2 with a setting tracetui can vary"),
    (["attn=sdpa"], "needs at least two different values"),
    (["attn=sdpa,warp"], "'warp' is not one of"),
    (["liger=on,maybe"], "'maybe' is not on/off"),
    (["attn=sdpa,eager", "attn_implementation=eager,sdpa"], "is varied twice"),
    (["dataloader_workers=0,-2"], "is negative"),
])
def test_bad_vary_is_one_line_naming_the_fix(vary, says):
    with pytest.raises(ConfigError) as err:
        validate(from_mapping({"vary": vary}))
    assert says in str(err.value) and "\n" not in str(err.value)


def test_vary_from_a_toml_table(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[sweep]\nsplits = ["1x2", "2x1"]\neffective_batch = 2\n'
                    '[sweep.vary]\nattn_implementation = ["sdpa", "eager"]\nliger = [false, true]\n')
    cfg = from_mapping(load_toml(str(path)))
    assert cfg.varied() == {"attn_implementation": ["sdpa", "eager"], "liger": [False, True]}
    assert len(validate(cfg)) == 8


def test_every_knob_is_a_setting_passed_to_the_trainer():
    names = {f.name for f in dataclasses.fields(SweepConfig)}
    from trl import SFTConfig

    known = {f.name for f in dataclasses.fields(SFTConfig)}
    for name, knob in KNOBS.items():
        assert name in names, f"{name} has no sweep setting"
        default = getattr(SweepConfig(), name)
        knob.coerce(default)  # the default is a value of the knob
        args = knob.sft(default)
        assert args or knob.model(default) or name == "qlora", f"{name} says nothing to the trainer at its default"
        # what it sets, the installed TRL knows (but for both checkpointing names, one per release)
        assert set(args) - {"activation_checkpointing", "activation_checkpointing_kwargs"} <= known
    assert result_changing({"qlora": True, "loss_type": "dft", "attn_implementation": "eager"}) == [
        "qlora=on", "loss_type=dft"]


def test_a_knob_s_values_are_declared_once():
    """The values of a setting that can be varied are those of its knob (:data:`KNOBS`), wherever
    they show: the setting's type and default, its ``--help``, and what the checks take, for the
    setting and for ``--vary`` (a second list of attention kernels in the settings had one fewer
    than the knob's)."""
    settings = SweepConfig.__dataclass_fields__
    for name, knob in KNOBS.items():
        meta = settings[name].metadata
        assert meta["kind"] is knob.kind, f"{name}: the setting's type is not the knob's"
        if knob.values is None:
            continue
        assert getattr(SweepConfig(), name) in knob.values, f"{name}: its default is no value of its knob"
        for value in knob.values:
            if knob.kind is str:
                assert value in meta["help"], f"{name}: --help does not name {value}"
            cfg = from_mapping({name: value, "nproc_per_node": 2, "effective_batch": 4})
            assert getattr(cfg, name) == value
            validate(cfg)  # taken as the setting
            others = [v for v in knob.values if v != value]
            validate(from_mapping({"vary": {name: [value, others[0]]}, "nproc_per_node": 2, "effective_batch": 4}))


def test_script_flags_for_a_varied_setting():
    assert script_args({"activation_checkpointing": False, "liger": True}) == [
        "--gradient_checkpointing", "false", "--use_liger_kernel", "true"]
    from tracetui.runner.script import check_command

    with pytest.raises(ConfigError, match="already sets --gradient_checkpointing"):
        check_command(["python", "train.py", "--gradient_checkpointing", "true"],
                      {"activation_checkpointing": [False, True]})


@pytest.mark.slow
def test_vary_sweep_end_to_end(tmp_path):
    """A real sweep over settings: liger cannot run here (no package, no GPU) and is reported
    ``unavailable`` without starting; dft is a different loss and is flagged as changing the
    result; the eager kernel really ran (read back from the model); the recommendation is a
    result-preserving trial, written as a TRL config file that TRL's own parser reads."""
    out = tmp_path / "r.csv"
    emitted = tmp_path / "best.yaml"
    proc = run_main("--export", "csv", "-o", out, "--splits", "2x1", "--effective-batch", 2, "--steps", 8,
                    "--warmup", 1, "--seq-len", 32, "--vary", "attn_implementation=sdpa,eager", "--vary",
                    "loss_type=nll,dft", "--vary", "liger=off,on", "--emit-config", emitted, "--allow-busy",
                    "--runs-dir", tmp_path / "runs")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {r["trial"]: r for r in read_csv(out)}
    assert len(rows) == 8
    liger = [r for t, r in rows.items() if "liger=on" in t]
    assert len(liger) == 4 and all(r["status"] == "unavailable" for r in liger)
    assert all("liger=on needs a CUDA GPU" in r["message"] for r in liger)  # a package would not help here
    ran = {t: r for t, r in rows.items() if "liger=off" in t}
    assert all(r["status"] == "ok" for r in ran.values()), ran
    for t, r in ran.items():  # where each run's start went: its parts add up to it
        parts = [float(r[k]) for k in ("start_imports_s", "start_model_s", "start_data_s", "start_trainer_s")]
        assert float(r["start_s"]) > 0 and abs(sum(parts) - float(r["start_s"])) < 0.01, r
    for t, r in ran.items():  # what the model really ran with, read back
        assert r["attn_implementation"] == ("eager" if "attn=eager" in t else "sdpa"), (t, r["attn_implementation"])
        assert r["loss_type"] == ("dft" if "loss=dft" in t else "nll")
        assert bool(r["changes_result"]) == ("loss=dft" in t), (t, r["changes_result"])
    # the recommendation (asked for on a busy machine too: --allow-busy), marked when measured busy
    (rec,) = [line for line in proc.stderr.splitlines() if line.startswith("tracetui: use ")]
    assert busy_marked(rec, rows.values()), (rec, [r["busy"] for r in rows.values()])
    assert "loss=dft" not in rec.split(" for effective batch")[0]
    assert "per_device_train_batch_size=2" in rec
    from trl import ModelConfig, ScriptArguments, SFTConfig, TrlParser

    script, sft, model = TrlParser((ScriptArguments, SFTConfig, ModelConfig)).parse_args_and_config(
        args=["--config", str(emitted)])
    assert sft.per_device_train_batch_size == 2 and sft.gradient_accumulation_steps == 1
    assert sft.gradient_checkpointing is False and sft.loss_type == "nll" and sft.use_liger_kernel is False
    assert model.attn_implementation in ("sdpa", "eager") and model.use_peft and model.lora_r == 16
    chosen = rec.split("tracetui: use ")[1].split(" for effective batch")[0]
    assert model.attn_implementation == ("eager" if "attn=eager" in chosen else "sdpa")
    events = [json.loads(line) for line in next((tmp_path / "runs").iterdir()).joinpath("events.jsonl").open()]
    # before its first step a run says what it is doing, in order
    stages = [e["stage"] for e in events if e["type"] == "run_stage" and "2x1_attn-eager_liger-off_loss-nll" in e["run_id"]]
    assert stages[:2] in (["importing torch", "importing transformers and TRL"],  # a fresh interpreter
                          ["starting the device", "reading the environment"])  # forked: imported already
    assert stages[-1] == "first step"


def test_the_monitor_groups_and_filters_trials_by_a_varied_setting():
    """A replay of a real H200 sweep over checkpointing x Liger: the table groups the trials of
    one combination together; ``f`` shows only one value of a setting, then the next, then all."""
    from pathlib import Path

    from tracetui.tui.app import TraceApp
    from tracetui.tui.sources import ReplaySource
    from tracetui.tui.widgets import StatusLine, SummaryTable

    from .test_monitor_layout import drive, load

    events = load(Path(__file__).resolve().parent.parent / "docs" / "results" / "h200_knobs" / "knobs2_events.jsonl.gz")
    app = TraceApp(ReplaySource(events))

    def shown(pilot):
        return [r["trial"] for r in pilot.app.shown_rows()], len(pilot.app.query_one(SummaryTable).rows)

    async def steps(pilot):
        seen = [shown(pilot)]
        for _ in range(5):
            await pilot.press("f")
            await pilot.pause()
            seen.append((shown(pilot), str(pilot.app.query_one(StatusLine).render())))
        return seen

    first, *after = drive(app, (120, 36), steps)
    trials, in_table = first
    assert in_table == 8 and len(trials) == 8
    # grouped: the two splits of each combination side by side
    assert [t.split(" ", 1)[1] for t in trials[::2]] == [t.split(" ", 1)[1] for t in trials[1::2]]
    values = [((t, n), line) for (t, n), line in after]
    (only_a, line_a), (only_b, line_b) = values[0], values[1]
    assert only_a[1] == 4 and all("ckpt=off" in t for t in only_a[0]) and "only activation_checkpointing=off" in line_a
    assert only_b[1] == 4 and all("ckpt=on" in t for t in only_b[0]) and "only activation_checkpointing=on" in line_b
    liger = [v for v in values[2:4]]
    assert [n for (_t, n), _line in liger] == [4, 4]
    assert values[4][0][1] == 8 and "every trial" in values[4][1]


@pytest.mark.slow  # (a script sweep of a Python script starts the fork server)
def test_a_script_sweep_sets_the_varied_settings_on_the_command_line(tmp_path):
    """``tracetui sweep --vary ... -- python train.py``: each trial's command carries its split and
    its varied values as the flags HfArgumentParser reads; the trial's settings reach the script's
    callback through the environment (its run_started names the trial)."""
    from tracetui.planning.plan import RunSpec
    from tracetui.runner.script import ScriptSweep

    cfg = from_mapping({"splits": "2x1", "effective_batch": 2, "runs_dir": str(tmp_path),
                        "vary": ["activation_checkpointing=off,on", "liger=off,on"]})
    trials = validate(cfg)
    sweep = ScriptSweep(cfg, trials, ["python", "train.py", "--max_steps", "5"])
    try:
        assert sweep.warnings == []  # both are SFTConfig flags: nothing to warn about
        t = next(t for t in trials if t.setting("activation_checkpointing") and not t.setting("liger"))
        cmd = sweep.trial_command(RunSpec("x/1", t, 0), tmp_path / "x").argv
        assert cmd == ["python", "train.py", "--max_steps", "5", "--per_device_train_batch_size", "2",
                       "--gradient_accumulation_steps", "1", "--gradient_checkpointing", "true",
                       "--use_liger_kernel", "false"]
    finally:
        sweep.close()
    # a flag the sweep sets per trial may not be on the command line already
    with pytest.raises(ConfigError, match="already sets --load_in_4bit"):
        ScriptSweep(from_mapping({"vary": ["qlora=off,on"], "runs_dir": str(tmp_path)}), [], ["python", "t.py",
                                                                                           "--load_in_4bit"])


def test_compile_time_is_apart_from_the_step_and_charged_in_the_projection():
    """With torch.compile varied on, the first (warm-up) step compiles: what it took beyond an
    ordinary step is compile_s, not in the step column, and in the projected full run."""
    from tracetui.analysis import Results, summarise
    from tracetui.events.schema import make

    events = []
    for compiled, first in ((False, 130.0), (True, 9130.0)):
        trial = Trial(2, 1, 1, {"torch_compile": compiled})
        rid = trial.slug(SHORT)
        events.append(make("run_started", rid, label=trial.label(SHORT), **trial.fields(),
                           config={"torch_compile": compiled}))
        events.append(make("step", rid, step=1, warmup=True, wall_ms=first, forward_ms=[first / 2],
                           backward_ms=[first / 2]))
        for i in range(2, 12):
            wall = (100.0 if compiled else 120.0) + i % 3
            events.append(make("step", rid, step=i, warmup=False, wall_ms=wall, forward_ms=[wall / 2],
                               backward_ms=[wall / 2]))
        events.append(make("run_finished", rid))
    rows = {r["trial"]: r for r in summarise(Results().extend(events), project_steps=1000)}
    on, off = rows["2x1 compile=on"], rows["2x1 compile=off"]
    assert on["step_ms_median"] == pytest.approx(101.0) and on["first_step_ms"] == 9130.0
    assert on["compile_s"] == pytest.approx((9130.0 - 101.0) / 1000)
    assert off.get("compile_s") is None
    assert on["projected_s"] == pytest.approx(1000 * 0.101 + on["compile_s"])


def test_synthetic_ragged_rows_have_chat_like_lengths():
    """The built-in ragged data set: the same rows for every trial, most short, a long tail cut
    at --seq-len, none under 8 tokens; real token rows the trainer pads per micro-batch."""
    import statistics

    from tracetui.runner.sources import ragged_lengths, synthetic_dataset

    lengths = ragged_lengths(4000, 1024, 42)
    assert lengths == ragged_lengths(4000, 1024, 42)  # the same rows for every trial
    assert min(lengths) >= 8 and max(lengths) == 1024
    assert 200 <= statistics.median(lengths) <= 320  # a quarter of seq-len, give or take the draw
    assert 0.03 <= sum(n == 1024 for n in lengths) / len(lengths) <= 0.15
    cfg = from_mapping({"dataset": "synthetic-ragged", "seq_len": 64, "effective_batch": 4, "steps": 5})
    ds = synthetic_dataset(cfg, vocab_size=300)
    sizes = [len(r) for r in ds["input_ids"]]
    assert len(sizes) == 20 and len(set(sizes)) > 3 and max(sizes) <= 64
