"""Scripts that set their own split: the plan reaches their trainer wherever they set it
(literals, their own YAML, ``trainer.args`` before ``train()``), and a run whose trainer trained
something else is said in its row, the closing lines and the exit status, never pooled and never
ranked (tracetui.probe.apply, tracetui.runner.supervise.as_planned)."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tracetui.analysis.answer import recommendation, verdict
from tracetui.analysis.applied import derived_note, split_applied
from tracetui.planning.plan import RunSpec
from tracetui.launch.dialects import takes_flags
from tracetui.runner.supervise import as_planned
from tracetui.session.exits import exit_status
from tracetui.events.log import read_events
from tracetui.core.trial import Trial

from .conftest import in_turn, outcome, read_csv, run_main

#: a training script as people write them: no command-line parsing; what it does with its split
#: is chosen by TT_MODE (set in the test's environment, which the sweep's runs inherit)
SCRIPT = textwrap.dedent('''
    import os, sys
    import yaml
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, TrainingArguments, set_seed
    from trl import SFTConfig, SFTTrainer

    from tracetui.core.presets import build_config
    from tracetui.runner.sources import byte_tokenizer

    MODE = os.environ["TT_MODE"]
    set_seed(0)
    model = AutoModelForCausalLM.from_config(build_config("tiny"))
    words = "the quick brown fox jumps over the lazy dog".split()
    ds = Dataset.from_dict({"text": [" ".join(words[(i + j) % 9] for j in range(16)) for i in range(64)]})
    common = dict(use_cpu=True, report_to="none", save_strategy="no", disable_tqdm=True, logging_steps=50)
    if MODE == "yaml":  # its own config file, read into TrainingArguments(**cfg)
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "own.yaml")) as fh:
            cfg = yaml.safe_load(fh)
        args = TrainingArguments(**cfg, **common)
        model.gradient_checkpointing_enable()  # its own choice, whatever a sweep varies
    else:
        args = SFTConfig(output_dir=os.environ["TT_OWN_OUT"], per_device_train_batch_size=1,
                         gradient_accumulation_steps=4, max_steps=int(os.environ["TT_STEPS"]),
                         max_length=32, **common)


    class FixedLoader(SFTTrainer):
        """A trainer whose data loader keeps one row per micro-batch, whatever its arguments say."""

        def get_train_dataloader(self):
            self._train_batch_size = 1
            return super().get_train_dataloader()


    def trainer(cls=SFTTrainer):
        return cls(model=model, args=args, train_dataset=ds, processing_class=byte_tokenizer(),
                   peft_config=LoraConfig(r=4, task_type="CAUSAL_LM"))


    if MODE == "late":  # changes trainer.args once the trainer is built; then a second trainer
        t = trainer()
        t.args.per_device_train_batch_size = 2
        t.args.gradient_accumulation_steps = 2
        t.train()
        trainer().train()
        print("both trainers done")
    else:
        t = trainer(FixedLoader if MODE == "fixed" else SFTTrainer)
        t.train()
        print(f"trained {t._train_batch_size}x{t.args.gradient_accumulation_steps}")  # what its data loader took
''')

OWN_YAML = "output_dir: {out}\nper_device_train_batch_size: 1\ngradient_accumulation_steps: 4\nmax_steps: 3\n"


def _sweep(folder: Path, mode: str, *flags, steps: int = 3) -> dict:
    script = folder / "own.py"
    script.write_text(SCRIPT)
    own_out = folder / "own_output"
    (folder / "own.yaml").write_text(OWN_YAML.format(out=own_out))
    out, runs = folder / "out.csv", folder / "runs"
    proc = run_main("sweep", "--export", "csv", "-o", out, "--runs-dir", runs, "--allow-busy", *flags,
                    "--", sys.executable, script, cwd=folder,
                    env={"TT_MODE": mode, "TT_OWN_OUT": str(own_out), "TT_STEPS": str(steps)})
    log = next(runs.glob("*/events.jsonl"), None)
    return dict(proc=proc, out=out, runs=runs, own_out=own_out, folder=folder,
                events=read_events([log]).events if log else [], script=script)


def _literal(folder):
    return _sweep(folder, "literal", "--splits", "1x4,4x1", "--warmup", 1, "--emit-patch", folder / "p.diff", steps=8)


def _yaml_vary(folder):
    return _sweep(folder, "yaml", "--splits", "4x1", "--vary", "ckpt=off,on", "--warmup", 1)


def _late(folder):
    return _sweep(folder, "late", "--splits", "4x1", "--warmup", 1)


def _fixed(folder):
    got = _sweep(folder, "fixed", "--splits", "1x4,4x1", "--warmup", 1)
    log = next(got["runs"].glob("*/events.jsonl"))
    got["show"] = run_main("show", log, "--export", "csv", "-o", folder / "show.csv", "--allow-busy")
    return got


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The four sweeps, run in this process one after another (their runs forked from its fork
    server), for the tests below to read."""
    return in_turn(tmp_path_factory, {"literal": _literal, "yaml vary": _yaml_vary, "late": _late, "fixed": _fixed})


def _settings(events) -> dict:
    return {e["run_id"].split("/", 1)[1]: e["settings"] for e in events if e["type"] == "run_settings"}


@pytest.mark.slow
def test_a_script_with_a_literal_split_is_measured_at_every_planned_split(swept):
    """A script like hard.py: SFTConfig(per_device_train_batch_size=1, gradient_accumulation_steps=4)
    and no flags parsed. Both splits train as planned, read back from the trainer, with a verdict
    between them; the script's own output folder is never written."""
    got = outcome(swept, "literal")
    proc = got["proc"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {r["split"]: r for r in read_csv(got["out"])}
    assert sorted(rows) == ["1x4", "4x1"] and all(r["status"] == "ok" for r in rows.values()), rows
    started = {e["label"]: (e["micro_batch"], e["grad_accum"]) for e in got["events"] if e["type"] == "run_started"}
    assert started == {"1x4": (1, 4), "4x1": (4, 1)}
    applied = _settings(got["events"])
    assert applied["4x1"]["applied"]["per_device_train_batch_size"] == {
        "script": 1, "planned": 4, "how": "Trainer(args=...)", "replaced": True}
    assert applied["1x4"]["applied"]["gradient_accumulation_steps"]["how"] == "the script's own value"
    origin = applied["4x1"]["args_origin"]
    assert origin["file"] == str(got["script"]) and origin["call"] == "SFTConfig"
    assert "per_device_train_batch_size=1" in got["script"].read_text().splitlines()[origin["line"] - 1] + \
        got["script"].read_text().splitlines()[origin["line"]]
    assert rows["4x1"]["split_applied"] == "Trainer(args=...): the script's 1x4"
    # a verdict between the two splits, each measured
    assert "faster than" in proc.stderr or "no clear difference" in proc.stderr, proc.stderr[-2000:]
    assert "note: the script sets per_device_train_batch_size and gradient_accumulation_steps itself" in proc.stderr
    # the command passed no flags to a script that parses none
    assert "--per_device_train_batch_size" not in (got["runs"] / next(got["runs"].iterdir()).name / "4x1.log").read_text()
    assert not got["own_out"].exists()  # its checkpoints went to the run's folder
    assert all((e["settings"]["applied"]["output_dir"]["planned"]).startswith(str(got["runs"]))
               for e in got["events"] if e["type"] == "run_settings")


@pytest.mark.slow
def test_the_emitted_patch_makes_the_script_alone_train_the_recommended_split(swept, tmp_path):
    """The handoff of a script like hard.py: the closing lines say where the script sets its split,
    --emit-patch writes the change, and the script, patched as they say (a copy: the other tests
    read the original) and run alone with plain Python, trains the recommended split, read back
    from its trainer. Where the script's own 1x4 won, there is nothing to change, and it says so."""
    got = outcome(swept, "literal")
    proc, patch = got["proc"], got["folder"] / "p.diff"
    [best] = [r["split"] for r in read_csv(got["out"]) if r["recommended"] == "True"]
    shutil.copy(got["script"], tmp_path / "own.py")
    if best == "1x4":
        assert f"no patch: the script's own values are the recommendation's, so {patch} was not written" \
            in proc.stderr and not patch.exists()
    else:
        mb, ga = best.split("x")
        for said in (f"own.py:{n}: {k}={v} in SFTConfig(...): make it {to}"
                     for n, k, v, to in _split_lines(got["script"], mb, ga)):
            assert said in proc.stderr, proc.stderr[-3000:]
        assert f"the change as a patch in {patch}: patch -p1 -d " in proc.stderr
        subprocess.run(["patch", "-p1", "--batch", "-F", "0", "-d", tmp_path, "-i", patch], check=True,
                       capture_output=True)
        assert tmp_path.joinpath("own.py").read_text() != got["script"].read_text()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACETUI_")}
    env.update(TT_MODE="literal", TT_OWN_OUT=str(tmp_path / "out"), TT_STEPS="1")
    alone = subprocess.run([sys.executable, tmp_path / "own.py"], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300)
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert f"trained {best}" in alone.stdout.splitlines(), alone.stdout[-2000:]


def _split_lines(script, mb, ga):
    """(line, field, the script's value, the recommended one) of the split's literals in ``script``."""
    lines = script.read_text().splitlines()
    for field, own, to in (("per_device_train_batch_size", 1, mb), ("gradient_accumulation_steps", 4, ga)):
        yield next(n for n, line in enumerate(lines, 1) if f"{field}={own}" in line), field, own, to


@pytest.mark.slow
def test_a_script_reading_its_own_yaml_is_measured_as_planned_and_one_ignoring_a_setting_is_named(swept):
    """TrainingArguments(**cfg) from the script's own YAML: the split is applied in its trainer.
    The same script turns checkpointing on itself: the run planned with it off trained with it
    on, and says so: its row keeps the plan's name, it is not ranked, and the command exits 1."""
    got = outcome(swept, "yaml vary")
    proc = got["proc"]
    assert proc.returncode == 1, proc.stderr[-3000:]
    rows = {r["trial"]: r for r in read_csv(got["out"])}
    assert rows["4x1 ckpt=on"]["status"] == "ok", rows
    off = rows["4x1 ckpt=off"]
    assert off["status"] == "mismatch" and off["trained"] == "4x1 ckpt=on", off
    assert "planned 4x1 ckpt=off, trained 4x1 ckpt=on" in off["message"]
    assert "warning: 4x1 ckpt=off: planned 4x1 ckpt=off, trained 4x1 ckpt=on" in proc.stderr
    assert "no verdict (4x1 ckpt=off (trained 4x1 ckpt=on) did not train what was planned" in proc.stderr
    assert "no recommendation (4x1 ckpt=off" in proc.stderr
    started = [e for e in got["events"] if e["type"] == "run_started"]
    assert all((e["micro_batch"], e["grad_accum"]) == (4, 1) for e in started)
    on = _settings(got["events"])["4x1_ckpt-on"]
    assert on["applied"]["per_device_train_batch_size"]["script"] == 1 and on["per_device_train_batch_size"] == 4


@pytest.mark.slow
def test_a_script_that_changes_trainer_args_before_train_is_measured_as_planned(swept):
    """trainer.args changed once the trainer exists: set back to the plan as train() starts (the
    trainer's own copy of the batch size too); a second trainer in the same process is stopped
    and named, the first one measured."""
    got = outcome(swept, "late")
    proc = got["proc"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    [row] = read_csv(got["out"])
    assert (row["split"], row["status"]) == ("4x1", "ok"), row
    assert row["split_applied"] == "trainer.args before train(): the script's 2x2"
    started = [e for e in got["events"] if e["type"] == "run_started"]
    assert [(e["micro_batch"], e["grad_accum"]) for e in started] == [(4, 1)]
    steps = [e for e in got["events"] if e["type"] == "step"]
    assert steps and all(max(r for r, _ in e["micro_shapes"]) == 4 and len(e["micro_shapes"]) == 1 for e in steps)
    notices = [e["message"] for e in got["events"] if e["type"] == "notice"]
    assert any("only the first is measured" in n for n in notices), notices
    assert "both trainers done" in next(got["runs"].glob("*/4x1.log")).read_text()


@pytest.mark.slow
def test_a_run_that_trained_another_split_keeps_its_plan_and_fails_in_every_mode(swept):
    """A trainer whose data loader keeps its own batch size: the planned 4x1 trained 1x1. It is
    not relabelled and pooled with 1x4 (the old answer: "use 1x4", from one split); its row, the
    closing lines and the exit status say so, headless and in `show` of the log."""
    got = outcome(swept, "fixed")
    proc, show = got["proc"], got["show"]
    assert proc.returncode == 1, proc.stderr[-3000:]
    rows = {r["split"]: r for r in read_csv(got["out"])}
    assert sorted(rows) == ["1x4", "4x1"], rows
    assert rows["1x4"]["status"] == "ok" and rows["1x4"]["runs"] == "1"
    assert rows["4x1"]["status"] == "mismatch" and rows["4x1"]["trained"] == "1x1"
    for text in (proc.stderr, show.stderr):
        assert "warning: 4x1: planned 4x1, trained 1x1" in text, text[-2000:]
        assert "effective batch 4: no verdict (4x1 (trained 1x1) did not train what was planned" in text
        assert "use 1x4" not in text
    assert show.returncode == 1
    assert read_csv(got["folder"] / "show.csv")[1]["status"] == "mismatch"


# ---- the parts, without training ---------------------------------------------------------------

def test_a_run_started_unlike_its_plan_keeps_the_plan_and_says_what_trained():
    spec = RunSpec("s/4x1", Trial(4, 1, 1, {"activation_checkpointing": False}), "4x1 ckpt=off")
    same, said = as_planned(spec, {"type": "run_started", "run_id": "s/4x1", "label": "4x1 ckpt=off",
                                   **spec.trial.fields()})
    assert said is None and same["label"] == "4x1 ckpt=off"
    trained = Trial(1, 4, 1, {"activation_checkpointing": True})
    event, said = as_planned(spec, {"type": "run_started", "run_id": "s/4x1", "label": "1x4", **trained.fields()})
    assert (event["micro_batch"], event["grad_accum"], event["label"]) == (4, 1, "4x1 ckpt=off")
    assert event["varied"] == {"activation_checkpointing": False} and event["trained"] == "1x4 ckpt=on"
    assert said.startswith("planned 4x1 ckpt=off, trained 1x4 ckpt=on (its trainer read back split 1x4, "
                           "activation_checkpointing=True)")
    event, said = as_planned(RunSpec("s/2x2x2", Trial(2, 2, 2), "2x2x2"),
                             {"type": "run_started", "run_id": "s/2x2x2", "label": "2x2", **Trial(2, 2, 1).fields()})
    assert event["world_size"] == 2 and "1 processes" in said


def _row(trial, status="ok", eb=4, **kw):
    return dict(machine="CPU", effective_batch=eb, world_size=1, trial=trial, split=trial, status=status,
                step_ms_median=10.0, failed_kinds=[status] if status != "ok" else [], **kw)


def test_no_answer_for_an_effective_batch_with_a_split_not_trained_as_planned():
    rows = [_row("1x4"), _row("4x1", "mismatch", trained="1x1"), _row("8x1", eb=8), _row("4x2", eb=8)]
    said = verdict(rows)
    assert "effective batch 4: no verdict (4x1 (trained 1x1) did not train what was planned" in said
    assert "1x4: 10.0 ms/step" not in said
    assert "effective batch 4: no recommendation (4x1 (trained 1x1)" in recommendation(rows)
    assert exit_status(rows, need_ok=False) == 1 and exit_status(rows) == 1
    assert exit_status([_row("1x4")], need_ok=False) == 0


def test_how_the_split_reached_the_trainer_in_words():
    own = {"applied": {"per_device_train_batch_size": {"script": 1, "planned": 4, "how": "Trainer(args=...)",
                                                       "replaced": True},
                       "gradient_accumulation_steps": {"script": 4, "planned": 1, "how": "Trainer(args=...)",
                                                       "replaced": True},
                       "output_dir": {"script": "/x", "planned": "/runs/o", "how": "Trainer(args=...)",
                                      "replaced": True}},
           "args_origin": {"file": "/s/hard.py", "line": 12, "call": "SFTConfig"}}
    assert split_applied(own) == "Trainer(args=...): the script's 1x4"
    note = derived_note(own)
    assert "(SFTConfig at /s/hard.py:12)" in note and "stayed as for 1x4" in note and "output_dir" not in note
    flags = {"applied": {k: {"script": 4, "planned": 4, "how": "command line", "replaced": False}
                         for k in ("per_device_train_batch_size", "gradient_accumulation_steps")}}
    assert split_applied(flags) == "command line" and derived_note(flags) == ""
    assert split_applied({}) is None


def test_where_the_arguments_were_built_is_the_scripts_line_not_unsloths_generated_config(tmp_path, monkeypatch):
    # Unsloth generates its SFTConfig subclass into unsloth_compiled_cache/ in the script's working
    # folder; its __init__ builds the TrainingArguments, so the first frame outside the libraries
    # was that generated file (seen on the H200), not the script's own SFTConfig(...) line
    import runpy

    from tracetui.probe import apply

    cache = tmp_path / "unsloth_compiled_cache"
    cache.mkdir()
    (cache / "UnslothSFTTrainer.py").write_text(
        "from tracetui.probe import apply\n\nclass UnslothSFTConfig:\n    def __init__(self):\n"
        "        apply.note_origin(self)\n")
    (tmp_path / "train.py").write_text(
        "from unsloth_compiled_cache.UnslothSFTTrainer import UnslothSFTConfig\n\nargs = UnslothSFTConfig()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "unsloth_compiled_cache", raising=False)
    args = runpy.run_path(str(tmp_path / "train.py"))["args"]
    try:
        assert apply._ORIGINS[id(args)] == {"file": str(tmp_path / "train.py"), "line": 3, "call": "UnslothSFTConfig"}
    finally:
        apply._ORIGINS.pop(id(args), None)
        for name in [n for n in sys.modules if n.startswith("unsloth_compiled_cache")]:
            del sys.modules[name]


def test_a_setting_that_would_not_reach_a_swept_script_is_refused(tmp_path):
    """--model, --steps or --lora-r given to a script sweep used to be ignored without a word."""
    from .conftest import run_main

    script = tmp_path / "own.py"
    script.write_text("print('never run')\n")
    for flags, said in ((("--model", "qwen3-0.6b"), "--model: is for tracetui's built-in sweep: a swept script uses "
                                                    "its own model"),
                        (("--steps", "30"), "--steps: is for tracetui's built-in sweep: a swept script uses its own "
                                            "max_steps"),
                        (("--optim", "adamw_torch"), "--optim: does not reach a swept script's runs")):
        proc = run_main("sweep", "--dry-run", "--splits", "1x4", *flags, "--", sys.executable, script)
        assert proc.returncode == 2 and said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    proc = run_main("sweep", "--dry-run", "--splits", "1x4,4x1", "--", sys.executable, script)
    assert proc.returncode == 0, proc.stderr
    assert "the script parses no HfArgumentParser flags: the split and settings are applied inside its trainer" \
        in proc.stdout


def test_flags_go_only_to_a_script_that_parses_them(tmp_path):
    parses = tmp_path / "parses.py"
    parses.write_text("from transformers import HfArgumentParser\n")
    own = tmp_path / "own.py"
    own.write_text("args = SFTConfig(per_device_train_batch_size=1)\n")
    assert takes_flags(["python", str(parses)]) and not takes_flags(["python", str(own)])
    assert takes_flags(["trl", "sft", "--model_name_or_path", "x"]) and takes_flags(["python", "-m", "pkg.train"])
    assert json.dumps(takes_flags(["python", str(tmp_path / "missing.py")])) == "true"
