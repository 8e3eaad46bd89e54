"""``--emit-config``: the recommendation reaches the training.

The unit tests read commands with TRL's own parser and check the file against the installed
TRL's own reading of it (no key it would hand on to ``accelerate launch``). The end-to-end tests
(slow) sweep a tiny local model, with ``trl sft`` and with tracetui's own trainer, then train from
the emitted file with ``trl sft --config`` and read back what its trainer saved.
"""

from __future__ import annotations

import glob
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import ROOT, in_turn, outcome, run_main
from tracetui.core.config import KNOB_DEFAULTS, SweepConfig
from tracetui.outputs.emit import installed_fields, trl_config, winning_command, write_trl_config
from tracetui.core.knobs import SHORT
from tracetui.core.trial import Trial

CKPT_NAMES = {"activation_checkpointing", "gradient_checkpointing"}


def row_of(trial: Trial, ms: float = 12.5) -> dict:
    """A summary row's identity and timing, as :func:`tracetui.analysis.summarise` writes them."""
    return dict(trial.fields(), trial=trial.label(SHORT),
                split=trial.split, machine="CPU", step_ms_median=ms, status="ok", knob_values={})


def trl_reads(path, *extra) -> tuple:
    """``trl sft``'s own parser on ``--config path``: its dataclasses, and what it would hand on
    to ``accelerate launch`` from the file (``config_remaining``), which refuses unknown keys."""
    from trl.scripts.sft import make_parser

    *parsed, config_remaining, cli_remaining = make_parser().parse_args_and_config(
        ["--config", str(path), *extra], return_remaining_strings=True, separate_remaining_strings=True)
    return parsed, config_remaining, cli_remaining


def ckpt_name() -> str:
    """The name the installed transformers reads checkpointing under first."""
    return "activation_checkpointing" if "activation_checkpointing" in installed_fields() else "gradient_checkpointing"


def test_trl_sft_command_gives_the_file_its_arguments(tmp_path, monkeypatch):
    """A ``trl sft`` sweep's file holds the command's model, data, LoRA, schedule, length, seed
    and precision (its --config file under its flags), the measured split and checkpointing over
    them, nothing of tracetui's own defaults; TRL's parser reads every key back."""
    user = tmp_path / "user.yaml"
    user.write_text("lora_alpha: 16\nlearning_rate: 5.0e-4\nper_device_train_batch_size: 16\n"
                    "env:\n  TRACETUI_TEST_EMIT: 'from the file'\n")
    monkeypatch.setenv("TRACETUI_TEST_EMIT", "before")  # restored after the test
    cmd = ["trl", "sft", "--config", str(user), "--model_name_or_path", "org/base-1b", "--dataset_name",
           "org/chat", "--max_length", "1024", "--use_peft", "--lora_r", "8", "--lora_target_modules", "q_proj",
           "v_proj", "--learning_rate", "1e-4", "--lr_scheduler_type", "cosine", "--seed", "7", "--bf16", "false",
           "--fp16", "true", "--output_dir", "runs/ft", "--max_steps", "50"]
    row = row_of(Trial(4, 2, settings={"activation_checkpointing": False}))
    # tracetui's own values of the settings it did not vary never reached the script
    row["knob_values"] = dict(KNOB_DEFAULTS, activation_checkpointing=True)
    data, notes = trl_config(row, SweepConfig(), cmd, path="best.yaml")
    assert {k: data[k] for k in ("model_name_or_path", "dataset_name", "max_length", "use_peft", "lora_r",
                                 "lora_target_modules", "lora_alpha", "learning_rate", "lr_scheduler_type", "seed",
                                 "bf16", "fp16", "output_dir", "max_steps")} == {
        "model_name_or_path": "org/base-1b", "dataset_name": "org/chat", "max_length": 1024, "use_peft": True,
        "lora_r": 8, "lora_target_modules": ["q_proj", "v_proj"], "lora_alpha": 16,
        "learning_rate": 1e-4,  # the flag over the command's config file, as TrlParser reads them
        "lr_scheduler_type": "cosine", "seed": 7, "bf16": False, "fp16": True, "output_dir": "runs/ft",
        "max_steps": 50}
    assert data["env"] == {"TRACETUI_TEST_EMIT": "from the file"}
    # the measured split over the one in the command's config file (the sweep's flags won there)
    assert (data["per_device_train_batch_size"], data["gradient_accumulation_steps"]) == (4, 2)
    assert data[ckpt_name()] is False and not (CKPT_NAMES - {ckpt_name()}) & set(data)  # one name, the installed one
    # none of tracetui's own settings: they never reached the script
    assert not {"lora_dropout", "use_cpu", "attn_implementation", "optim", "datasets", "dataset_text_field"} & set(data)
    assert "SET-ME" not in yaml.safe_dump(data)
    assert set(data) <= installed_fields()
    assert not any(n.startswith("could not map") for n in notes)
    assert any("max_steps=50 is the measured command's" in n for n in notes)

    path = tmp_path / "best.yaml"
    assert write_trl_config(str(path), row, SweepConfig(), cmd) == trl_config(row, SweepConfig(), cmd, path=str(path))[1]
    (script, sft, model, _mix), from_file, _ = trl_reads(path)
    assert from_file == []  # nothing handed on to accelerate launch, which would refuse it
    assert (sft.per_device_train_batch_size, sft.gradient_accumulation_steps) == (4, 2)
    assert sft.gradient_checkpointing is False and getattr(sft, "activation_checkpointing", False) is False
    assert (sft.learning_rate, str(getattr(sft.lr_scheduler_type, "value", sft.lr_scheduler_type))) == (1e-4, "cosine")
    assert (sft.max_length, sft.seed, sft.bf16, sft.fp16) == (1024, 7, False, True)
    assert (model.model_name_or_path, model.lora_r, model.lora_alpha, model.lora_target_modules) == (
        "org/base-1b", 8, 16, ["q_proj", "v_proj"])
    assert script.dataset_name == "org/chat"
    assert os.environ["TRACETUI_TEST_EMIT"] == "from the file"  # TrlParser set the file's env


def test_python_script_flags_the_parser_does_not_know_are_reported(tmp_path):
    """``accelerate launch train.py``: flags of TRL's dataclasses are written, the script's own
    (and an ambiguous abbreviation) are named with where to set them; the launcher is said."""
    cmd = ["accelerate", "launch", "--num_processes", "2", str(ROOT / "examples" / "train_lora.py"), "stray",
           "--model_name_or_path", "org/base", "--dataset_path", "d.jsonl", "--rows", "64", "--no_trace",
           "--lora_r", "4", "--lr", "3e-5", "--learning_rate", "2e-5", "--lr_scheduler_type", "linear",
           "--max_length", "128", "--seed", "3", "--bf16", "true"]
    row = row_of(Trial(2, 2))
    data, notes = trl_config(row, SweepConfig(), cmd, path="best.yaml")
    assert {k: data[k] for k in ("model_name_or_path", "lora_r", "learning_rate", "lr_scheduler_type",
                                 "max_length", "seed", "bf16", "per_device_train_batch_size",
                                 "gradient_accumulation_steps")} == {
        "model_name_or_path": "org/base", "lora_r": 4, "learning_rate": 2e-5, "lr_scheduler_type": "linear",
        "max_length": 128, "seed": 3, "bf16": True, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 2}
    assert not {"dataset_path", "rows", "trace", "lr", "num_processes"} & set(data)
    unmapped = next(n for n in notes if n.startswith("could not map: "))
    for said in ("--dataset_path d.jsonl (unknown)", "--rows 64 (unknown)", "--no_trace (unknown)",
                 "--lr 3e-5 (ambiguous option: --lr could match", "stray (not a flag)",
                 "trl sft --config best.yaml stray --dataset_path d.jsonl --rows 64 --no_trace --lr 3e-5"):
        assert said in unmapped, (said, unmapped)
    assert any(n.startswith("launched with accelerate launch --num_processes 2:") for n in notes)
    assert any(f"{cmd[4]} --config best.yaml where the script reads --config" in n for n in notes)
    assert f"the measured command: {shlex.join(winning_command(cmd, row))}" in notes


def test_keys_follow_the_installed_field_names():
    """An older field set (transformers 5.17: no ``activation_*``) gets checkpointing under
    ``gradient_*``, a newer one under ``activation_*``, whichever name the setting came by; one
    without a setting's field at all gets a note, never the key."""
    every = installed_fields()
    older = every - {"activation_checkpointing", "activation_checkpointing_kwargs"}
    newer = every - {"gradient_checkpointing", "gradient_checkpointing_kwargs"} | {"activation_checkpointing",
                                                                                "activation_checkpointing_kwargs"}
    cmd = ["trl", "sft", "--model_name_or_path", "m"]
    row = row_of(Trial(1, 4, settings={"activation_checkpointing": True, "liger": False}))
    data, notes = trl_config(row, SweepConfig(), cmd, fields=older)
    assert data["gradient_checkpointing"] is True and data["gradient_checkpointing_kwargs"] == {"use_reentrant": False}
    assert set(data) <= older and data["use_liger_kernel"] is False
    assert not any(n.startswith("not written") for n in notes)
    data, _ = trl_config(row, SweepConfig(), cmd, fields=newer)
    assert data["activation_checkpointing"] is True and data["activation_checkpointing_kwargs"] == {
        "use_reentrant": False} and set(data) <= newer
    # the user's own flag, under the old name, written under the new one
    plain = row_of(Trial(1, 4))
    data, _ = trl_config(plain, SweepConfig(), cmd + ["--gradient_checkpointing", "false"], fields=newer)
    assert data["activation_checkpointing"] is False and not {"gradient_checkpointing"} & set(data)
    lacking = older - {"use_liger_kernel"}
    data, notes = trl_config(row, SweepConfig(), cmd, fields=lacking)
    assert "use_liger_kernel" not in data and set(data) <= lacking and data["gradient_checkpointing"] is True
    assert any(n.startswith("not written: use_liger_kernel=False has no field in TRL ") for n in notes), notes
    # both names of one setting are said once
    none = lacking - {"gradient_checkpointing", "gradient_checkpointing_kwargs"}
    data, notes = trl_config(row, SweepConfig(), cmd, fields=none)
    assert not CKPT_NAMES & set(data)
    assert sum("checkpointing=True has no field" in n for n in notes) == 1, notes
    assert sum("checkpointing_kwargs={'use_reentrant': False} has no field" in n for n in notes) == 1, notes


def test_winning_command_is_the_trial_the_sweep_ran():
    """The recommendation's command is the one ``tracetui sweep`` gives that trial (its dry run)."""
    cmd = ["python", str(ROOT / "examples" / "train_lora.py"), "--max_steps", "5"]
    proc = run_main("sweep", "--effective-batch", 4, "--splits", "1x4,4x1", "--vary", "ckpt=off,on",
                    "--dry-run", "--", *cmd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    planned = {line.split(": ", 1)[1].split(" (effective batch")[0]: shlex.split(line.split("): ", 1)[1])
               for line in proc.stdout.splitlines() if line.startswith("run ")}
    assert len(planned) == 4, proc.stdout
    for label, argv in planned.items():
        split, ckpt = label.split(" ")
        mb, ga = map(int, split.split("x"))
        row = row_of(Trial(mb, ga, settings={"activation_checkpointing": ckpt == "ckpt=on"}))
        assert winning_command(cmd, row) == argv


def test_write_refuses_links_and_non_files_and_replaces_whole(tmp_path):
    row = row_of(Trial(4, 1))
    target = tmp_path / "precious.yaml"
    target.write_text("keep: me\n")
    link = tmp_path / "best.yaml"
    link.symlink_to(target)
    with pytest.raises(OSError, match="symbolic link"):
        write_trl_config(str(link), row, SweepConfig(), ["trl", "sft", "--model_name_or_path", "m"])
    assert target.read_text() == "keep: me\n" and link.is_symlink()
    with pytest.raises(OSError, match="is a folder, not a file"):
        write_trl_config(str(tmp_path), row, SweepConfig())
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)  # (opened for writing, it would wait for a reader for ever)
    with pytest.raises(OSError, match="is a FIFO"):
        write_trl_config(str(fifo), row, SweepConfig())
    out = tmp_path / "sub" / "r.yaml"
    out.parent.mkdir()
    out.write_text("old: 1\n")
    notes = write_trl_config(str(out), row, SweepConfig(), ["trl", "sft", "--model_name_or_path", "m"])
    text = out.read_text()
    assert text.startswith("".join(f"# {n}\n" for n in notes)) and "old" not in text
    assert yaml.safe_load(text)["model_name_or_path"] == "m"
    assert os.listdir(out.parent) == ["r.yaml"]  # the temporary file is gone


def test_builtin_sweep_file_keeps_its_settings_and_installed_keys(tmp_path):
    """A built-in sweep (no command): today's file (preset and data to set, the sweep's LoRA,
    length, precision and every speed setting), only with keys TRL reads here."""
    from tracetui.analysis import Policy, Results, recommended_rows, summarise
    from tracetui.events.log import read_events

    rows = summarise(Results().extend(read_events([ROOT / "tests" / "data" / "cpu_vary_liger.jsonl"]).events))
    best = recommended_rows(rows, Policy(allow_busy=True))[0]
    path = tmp_path / "f.yaml"
    notes = write_trl_config(str(path), best, SweepConfig(lora_r=8))
    data = yaml.safe_load(path.read_text())
    assert (data["per_device_train_batch_size"], data["gradient_accumulation_steps"]) == (best["micro_batch"],
                                                                                          best["grad_accum"])
    assert data["model_name_or_path"] == "SET-ME" and data["dataset_name"] == "SET-ME"
    assert (data["lora_r"], data["lora_alpha"], data["learning_rate"], data["lr_scheduler_type"]) == (8, 32, 2e-4,
                                                                                                        "constant")
    assert data[ckpt_name()] is False and data["use_liger_kernel"] is False and data["use_cpu"] is True
    assert set(data) <= installed_fields()
    assert any("set output_dir" in n for n in notes)
    _, from_file, _ = trl_reads(path)
    assert from_file == []


# ---- end to end -----------------------------------------------------------------------------

WORDS = ("the quick brown fox jumps over the lazy dog while a model learns to split its batch into "
         "micro batches and accumulates gradients").split()


_TINY_LOCAL: list[Path] = []


def tiny_local(beside: Path) -> Path:
    """A tiny Qwen2 with random weights and a word-level tokenizer trained on the data's own
    text, saved as a model folder; the data as a folder ``trl sft --dataset_name`` loads and the
    same rows as a .jsonl file tracetui's ``--dataset`` reads. Made once (beside the folder of
    the sweep that asks first), for both sweeps below."""
    if not _TINY_LOCAL:
        _TINY_LOCAL.append(_make_tiny_local(beside.parent / "tiny-local"))
    return _TINY_LOCAL[0]


def _make_tiny_local(d: Path) -> Path:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    d.mkdir()
    rows = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(12 + i % 20)) for i in range(64)]
    (d / "data").mkdir()
    with open(d / "data" / "train.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps({"text": r}) + "\n" for r in rows)
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(rows, trainers.WordLevelTrainer(special_tokens=["<pad>", "<unk>", "<eos>"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         pad_token_id=fast.pad_token_id, eos_token_id=fast.eos_token_id, tie_word_embeddings=True)
    Qwen2ForCausalLM(config).save_pretrained(d / "model")
    fast.save_pretrained(d / "model")
    return d


def trl_cli() -> str:
    """TRL's own command, of this interpreter's installation."""
    beside = Path(sys.executable).with_name("trl")
    return str(beside) if beside.exists() else "trl"


def recommended(runs_dir: Path) -> dict:
    """The recommended row of the one sweep in ``runs_dir``, from its events (the summary rows
    with the trial's settings, as the sweep computed them)."""
    from tracetui.analysis import Policy, Results, recommended_rows, summarise
    from tracetui.events.log import read_events

    logs = glob.glob(str(runs_dir / "*" / "events.jsonl"))
    assert len(logs) == 1, logs
    best = recommended_rows(summarise(Results().extend(read_events(logs).events)), Policy(allow_busy=True))
    assert len(best) == 1
    return best[0]


def train_from(config: Path, cwd: Path, out: Path) -> tuple:
    """``trl sft --config FILE`` plus what the file says to fill, a few steps; what its trainer
    saved: its arguments and the adapter's config."""
    import torch

    proc = subprocess.run([trl_cli(), "sft", "--config", str(config), "--output_dir", str(out), "--max_steps", "3"],
                          cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    args = torch.load(out / "training_args.bin", weights_only=False)
    adapter = json.loads((out / "adapter_config.json").read_text())
    return args, adapter


def assert_as_measured(args, adapter, row: dict) -> None:
    """What the emitted file trained with is the recommendation's and its measured run's."""
    measured = row["settings"]  # read back from the measured run's own trainer and model
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (
        row["micro_batch"], row["grad_accum"]) == (measured["per_device_train_batch_size"],
                                                   measured["gradient_accumulation_steps"])
    ckpt = getattr(args, "activation_checkpointing", args.gradient_checkpointing)
    assert ckpt is measured["activation_checkpointing"] is measured["checkpointing_asked"]
    assert adapter["r"] == measured["lora_r_used"]
    assert ",".join(sorted(adapter["target_modules"])) == measured["lora_targets_resolved"]
    assert args.learning_rate == measured["learning_rate"]
    assert args.max_length == measured["max_length"]
    assert str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)) == measured["lr_scheduler_type"]


def _script_sweep(d: Path, tmp_path: Path) -> dict:
    """``tracetui sweep -- trl sft ...`` on the tiny local model, then ``trl sft --config`` on the
    file it emitted."""
    (tmp_path / "user.yaml").write_text("lora_alpha: 16\nlearning_rate: 5.0e-4\n")
    cmd = [trl_cli(), "sft", "--config", str(tmp_path / "user.yaml"), "--model_name_or_path", str(d / "model"), "--dataset_name",
           str(d / "data"), "--max_length", "64", "--use_peft", "--lora_r", "8", "--lora_target_modules", "q_proj",
           "v_proj", "--learning_rate", "1e-4", "--lr_scheduler_type", "cosine", "--max_steps", "8", "--output_dir",
           "sweep_out", "--save_strategy", "no", "--report_to", "none", "--use_cpu", "--bf16", "false",
           "--gradient_checkpointing", "false"]
    proc = run_main("sweep", "--effective-batch", 4, "--splits", "1x4,4x1", "--warmup", 2, "--allow-busy",
                    "--runs-dir", tmp_path / "runs", "--export", "csv", "-o", tmp_path / "out.csv",
                    "--emit-config", tmp_path / "sweep.yaml", "--", *cmd, cwd=tmp_path)
    trained = (train_from(tmp_path / "sweep.yaml", tmp_path, tmp_path / "emitted") if proc.returncode == 0
               else None)
    return dict(proc=proc, cmd=cmd, trained=trained, folder=tmp_path)


def _builtin_sweep(d: Path, tmp_path: Path) -> dict:
    """``tracetui --model DIR --dataset FILE.jsonl --emit-config`` on the tiny local model, then
    ``trl sft --config`` on the file."""
    path = tmp_path / "f.yaml"
    proc = run_main("--model", d / "model", "--dataset", d / "data" / "train.jsonl", "--effective-batch", 4,
                    "--splits", "1x4,4x1", "--seq-len", 64, "--lora-r", 8, "--lora-targets", "q_proj,v_proj",
                    "--lr", "1e-4", "--steps", 8, "--warmup", 2, "--allow-busy", "--runs-dir", tmp_path / "runs",
                    "--export", "csv", "-o", tmp_path / "out.csv", "--emit-config", path, cwd=tmp_path)
    trained = train_from(path, tmp_path, tmp_path / "emitted") if proc.returncode == 0 else None
    return dict(proc=proc, path=path, trained=trained, model=d)


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    """Both sweeps above, run in this process one after another (their runs forked from its fork
    server), and their trainings from the emitted files (TRL's command line, fresh processes);
    what is checked is what each recommended and what its training saved, not how long anything
    took (--allow-busy: a recommendation even on a busy machine)."""
    return in_turn(tmp_path_factory, {"script": lambda t: _script_sweep(tiny_local(t), t),
                                      "builtin": lambda t: _builtin_sweep(tiny_local(t), t)})


@pytest.mark.slow
def test_script_sweep_file_trains_as_measured(emitted):
    """``tracetui sweep -- trl sft ...`` on a tiny local model; the recommendation's file, run with
    ``trl sft --config``, trains with the command's LoRA, rate, schedule and length (not
    tracetui's defaults) and the recommended split. The sweep's runs started forked from
    tracetui's server (TRL's launcher resolved in them), and what their trainers read back is what
    plain ``trl sft`` trains with."""
    got = outcome(emitted, "script")
    proc, cmd, tmp_path = got["proc"], got["cmd"], got["folder"]
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "each run starts forked from tracetui's server" in proc.stderr
    best = recommended(tmp_path / "runs")
    assert f"tracetui: use {best['trial']} for effective batch 4" in proc.stderr
    path = tmp_path / "best.yaml"
    notes = write_trl_config(str(path), best, SweepConfig(), cmd)
    data = yaml.safe_load(path.read_text())
    assert set(data) <= installed_fields()
    assert any(n.startswith("the measured command: ") for n in notes)
    swept = yaml.safe_load((tmp_path / "sweep.yaml").read_text())
    assert swept == data  # the sweep's own file is the script's arguments, the recommendation over them
    assert f"tracetui: the recommendation's command: {shlex.join(winning_command(cmd, best))}" in proc.stderr

    args, adapter = got["trained"]
    assert_as_measured(args, adapter, best)
    assert (adapter["r"], sorted(adapter["target_modules"]), adapter["lora_alpha"]) == (8, ["q_proj", "v_proj"], 16)
    assert (args.learning_rate, args.max_length) == (1e-4, 64)  # the command's, over its config file's
    assert str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)) == "cosine"
    assert args.bf16 is False and args.max_steps == 3


@pytest.mark.slow
def test_builtin_sweep_file_trains_as_measured(emitted):
    """``tracetui --model DIR --dataset FILE.jsonl --emit-config``: the file loads the same model
    and data file in ``trl sft`` and trains with the sweep's LoRA, rate, length and the split."""
    got = outcome(emitted, "builtin")
    d = got["model"]
    proc, path = got["proc"], got["path"]
    assert proc.returncode == 0, proc.stderr[-4000:]
    best = recommended(path.parent / "runs")
    assert f"TRL config for {best['trial']} in {path}" in proc.stderr
    data = yaml.safe_load(path.read_text())
    assert data["model_name_or_path"] == str(d / "model") and data["output_dir"] == "SET-ME"
    assert data["datasets"][0]["data_files"] == str(d / "data" / "train.jsonl")
    assert set(data) <= installed_fields()
    args, adapter = got["trained"]
    assert_as_measured(args, adapter, best)
    assert (adapter["r"], adapter["lora_alpha"], args.learning_rate, args.max_length) == (8, 32, 1e-4, 64)
    assert str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)) == "constant"


@pytest.mark.slow
def test_what_the_file_needs_of_trl_is_read_forked_from_the_fork_server(monkeypatch):
    """Where the sweep's fork server runs, the read of TRL's parser, fields and releases that
    ``--emit-config`` starts with the sweep is a process forked from it (TRL imported already),
    not a fresh interpreter importing TRL beside the runs being measured; without a server
    (``TRACETUI_START=spawn``), a fresh interpreter. The same facts either way, and as read here."""
    from tracetui.outputs import trl_facts
    from tracetui.runner.lifetime import trial_context

    args = ["--model_name_or_path", "m", "--per_device_train_batch_size", "2", "--learning_rate", "3e-5"]
    here = trl_facts.read_facts("trl sft", tuple(args)).to_json()
    started = []
    spawn = subprocess.Popen

    def interpreter(*a, **k):
        started.append(a[0])
        return spawn(*a, **k)

    monkeypatch.setattr(trl_facts.subprocess, "Popen", interpreter)
    for start in ("forkserver", "spawn"):
        monkeypatch.setenv("TRACETUI_START", start)
        monkeypatch.setattr(trl_facts, "_prepared", {})
        if start == "forkserver":
            trial_context()  # (the sweep's server)
        trl_facts.prepare("trl sft", args)
        got = trl_facts._prepared[trl_facts._key("trl sft", args)].result()  # (None: it failed, read again)
        assert got is not None and got.to_json() == here, start
        assert len(started) == (start == "spawn"), (start, started)
