"""The launcher seam (tracetui.runner.launch): how a trial's split and settings reach each kind of
command (flags after the script, world size from the launcher, a per-trial copy of a config-file
trainer's YAML), and which commands start forked from tracetui's server."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

from tracetui.config import ConfigError
from tracetui.runner.launch import DROPPED, ConfigFile, Flags, fork_target, launcher_for, with_keys, world_size
from tracetui.trial import Trial

AXOLOTL = """\
base_model: ./model   # a local folder
datasets:
  - path: data/alpaca.jsonl
    type: alpaca
micro_batch_size: 2
gradient_accumulation_steps: 2  # effective 4
sequence_len: 64
output_dir: ./outputs/lora
"""

LLAMA_FACTORY = """\
model_name_or_path: ./model
stage: sft
finetuning_type: lora
dataset: tiny
per_device_train_batch_size: 1
output_dir: saves/tiny
max_steps: 6
"""


def _trial(mb: int, ga: int, **settings) -> Trial:
    return Trial(mb, ga, settings=tuple(sorted(settings.items())))


@pytest.mark.parametrize("cmd, expected", [
    (["python", "train.py", "--lr", "1"], (1, "")),
    (["accelerate", "launch", "--num_processes", "2", "train.py"], (2, "accelerate --num_processes 2")),
    (["torchrun", "--nproc-per-node=4", "train.py"], (4, "torchrun --nproc-per-node 4")),
    (["python", "-m", "torch.distributed.run", "--nproc_per_node", "2", "train.py"],
     (2, "torch.distributed.run --nproc-per-node 2")),
    (["trl", "sft", "--num_processes", "2", "--model_name_or_path", "m"], (2, "accelerate --num_processes 2")),
    (["torchrun", "--nproc-per-node", "gpu", "train.py"], (1, "")),  # left to the launcher: not guessed
])
def test_world_size_comes_from_the_launcher(cmd, expected):
    assert world_size(cmd) == expected


def test_flags_go_after_the_script_and_its_launcher():
    cmd = ["accelerate", "launch", "--num_processes", "2", "train.py", "--lr", "1"]
    got = launcher_for(cmd).trial_command(cmd, _trial(4, 1, activation_checkpointing=False))
    assert got.argv == cmd + ["--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1",
                              "--gradient_checkpointing", "false"]
    assert got.changed == [] and got.copy is None
    with pytest.raises(ConfigError, match="already sets --per-device-train-batch-size"):
        Flags().check(["python", "t.py", "--per-device-train-batch-size=2"], {})


def test_axolotl_copy_changes_the_split_keys_in_place_and_keeps_the_rest(tmp_path):
    (tmp_path / "cfg.yml").write_text(AXOLOTL)
    cmd = ["axolotl", "train", str(tmp_path / "cfg.yml")]
    launcher = launcher_for(cmd)
    assert isinstance(launcher, ConfigFile) and launcher.name == "axolotl"
    launcher.check(cmd, {"activation_checkpointing": [False, True]})
    run = tmp_path / "runs" / "sweep" / "4x1"
    got = launcher.trial_command(cmd, _trial(4, 1, activation_checkpointing=True), run)
    copy = run / "cfg.yml"
    assert got.argv == ["axolotl", "train", str(copy)]
    assert got.changed == [("micro_batch_size", 2, 4), ("gradient_accumulation_steps", 2, 1),
                           ("gradient_checkpointing", None, True), ("output_dir", "./outputs/lora", str(run / "output"))]
    assert not copy.exists()  # written when the run starts
    got.write()
    text = copy.read_text()
    # the user's lines, comments and order, with the keys changed where they were and added after
    assert text.splitlines() == [
        "base_model: ./model   # a local folder", "datasets:", "  - path: data/alpaca.jsonl", "    type: alpaca",
        "micro_batch_size: 4", "gradient_accumulation_steps: 1  # effective 4", "sequence_len: 64",
        f"output_dir: \"{run / 'output'}\"", "gradient_checkpointing: true"]
    assert yaml.safe_load(text) == {**yaml.safe_load(AXOLOTL), "micro_batch_size": 4, "gradient_accumulation_steps": 1,
                                    "gradient_checkpointing": True, "output_dir": str(run / "output")}
    assert (tmp_path / "cfg.yml").read_text() == AXOLOTL  # the user's file is never written
    assert "changes micro_batch_size 2 -> 4, gradient_accumulation_steps 2 -> 1" in got.described()


def test_llama_factory_names_and_dry_run_copy(tmp_path):
    (tmp_path / "lf.yaml").write_text(LLAMA_FACTORY)
    cmd = ["llamafactory-cli", "train", str(tmp_path / "lf.yaml")]
    launcher = launcher_for(cmd)
    assert launcher.name == "LLaMA-Factory"
    got = launcher.trial_command(cmd, _trial(2, 2, activation_checkpointing=False, attn_implementation="sdpa"))
    assert got.argv == ["llamafactory-cli", "train", f"{{copy of {tmp_path / 'lf.yaml'}}}"] and got.copy is None
    assert got.changed == [("per_device_train_batch_size", 1, 2), ("gradient_accumulation_steps", None, 2),
                           ("disable_gradient_checkpointing", None, True), ("flash_attn", None, "sdpa"),
                           ("output_dir", "saves/tiny", "{the run's folder}/output")]


@pytest.mark.parametrize("cmd_tail, varied, said", [
    (["--micro-batch-size", "2"], {}, "the command line already sets micro_batch_size"),
    ([], {"padding_free": [False, True]}, "padding_free has no key tracetui knows in a axolotl config"),
])
def test_config_file_refusals_are_one_line(tmp_path, cmd_tail, varied, said):
    (tmp_path / "cfg.yml").write_text(AXOLOTL)
    cmd = ["axolotl", "train", str(tmp_path / "cfg.yml"), *cmd_tail]
    with pytest.raises(ConfigError, match=said) as err:
        launcher_for(cmd).check(cmd, varied)
    assert "\n" not in str(err.value)


def test_llama_factory_override_and_broken_yaml_are_refused(tmp_path):
    (tmp_path / "lf.yaml").write_text(LLAMA_FACTORY)
    cmd = ["llamafactory-cli", "train", str(tmp_path / "lf.yaml"), "gradient_accumulation_steps=8"]
    with pytest.raises(ConfigError, match="already sets gradient_accumulation_steps"):
        launcher_for(cmd).check(cmd, {})
    (tmp_path / "bad.yaml").write_text("per_device_train_batch_size: [1\nstage: sft\n")
    with pytest.raises(ConfigError, match=r"bad.yaml is not valid YAML at line \d"):
        launcher_for(["lmf", "train", str(tmp_path / "bad.yaml")]).check(["lmf", "train", str(tmp_path / "bad.yaml")], {})
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="does not hold a mapping"):
        launcher_for(["lmf", "train", str(tmp_path / "list.yaml")]).check(["lmf", "train", str(tmp_path / "list.yaml")], {})


def test_a_key_set_to_a_block_is_written_out_whole():
    text = "micro_batch_size:\n  - 1\n  - 2\nlr: 0.1\n"
    out = with_keys(text, yaml.safe_load(text), {"micro_batch_size": 4})
    assert yaml.safe_load(out) == {"micro_batch_size": 4, "lr": 0.1}


# ---- which commands fork ------------------------------------------------------------------------

def test_scripts_and_modules_of_this_interpreter_fork(tmp_path):
    target, why = fork_target([sys.executable, "-u", "train.py", "--lr", "1"], cwd=str(tmp_path))
    assert why == "" and (target.kind, target.target, target.argv0, target.args) == (
        "path", "train.py", "train.py", ("--lr", "1"))
    assert target.path0 == str(tmp_path)
    target, _ = fork_target([sys.executable, "-m", "pkg.train", "x"], cwd=str(tmp_path))
    assert (target.kind, target.target, target.path0, target.args) == ("module", "pkg.train", str(tmp_path), ("x",))


@pytest.mark.parametrize("cmd, why", [
    ([sys.executable, "-c", "pass"], "the interpreter option -c"),
    ([sys.executable, "-m", "torch.distributed.run", "t.py"], "torch.distributed.run starts processes of its own"),
    (["accelerate", "launch", "t.py"], "accelerate starts processes of its own"),
    (["torchrun", "t.py"], "torchrun starts processes of its own"),
    (["/bin/sh", "-c", "true"], "sh is not a Python program"),
])
def test_launchers_and_other_programs_start_fresh(cmd, why):
    assert fork_target(cmd) == (None, why)


def test_console_scripts_fork_only_from_this_environment(tmp_path):
    mine = tmp_path / "mine"
    mine.write_text(f"#!{sys.executable}\nimport sys\nsys.exit(0)\n")
    target, why = fork_target([str(mine), "sft", "--x"])
    assert why == "" and (target.kind, target.target, target.args) == ("path", str(mine), ("sft", "--x"))
    # a virtual environment of its own (pyvenv.cfg beside its bin/): its interpreter is another
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    os.symlink(sys.executable, venv / "bin" / "python")
    theirs = venv / "bin" / "axolotl"
    theirs.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\n")
    assert fork_target([str(theirs), "train", "c.yml"]) == (
        None, f"axolotl runs in another Python environment ({venv / 'bin' / 'python'})")
    assert fork_target([str(venv / "bin" / "python"), "t.py"])[1].startswith(f"{venv / 'bin' / 'python'} is not")


def test_sweep_dry_run_shows_each_copy_and_writes_nothing(tmp_path, capsys):
    from tracetui.cli import main

    (tmp_path / "cfg.yml").write_text(AXOLOTL)
    assert main(["sweep", "--dry-run", "--splits", "1x4,4x1", "--repeats", "1", "--runs-dir", str(tmp_path / "runs"),
                 "--", "axolotl", "train", str(tmp_path / "cfg.yml")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [
        f"run 1: 1x4 (effective batch 4): axolotl train '{{copy of {tmp_path / 'cfg.yml'}}}'; changes "
        "micro_batch_size 2 -> 1, gradient_accumulation_steps 2 -> 4, output_dir ./outputs/lora -> {the run's folder}/output",
        f"run 2: 4x1 (effective batch 4): axolotl train '{{copy of {tmp_path / 'cfg.yml'}}}'; changes "
        "micro_batch_size 2 -> 4, gradient_accumulation_steps 2 -> 1, output_dir ./outputs/lora -> {the run's folder}/output"]
    assert out[2].startswith("each run starts as a fresh process (")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg.yml"] + (["runs"] if (tmp_path / "runs").exists() else [])


# ---- a forked run has what the command would have had -----------------------------------------

SEEN = """\
import atexit, json, os, sys
name = os.environ["TRACETUI_RUN_ID"].split("/")[1]
atexit.register(lambda: open(name + ".atexit", "w").write("ran"))
seen = dict(argv=sys.argv, name=__name__, main_file=sys.modules["__main__"].__file__, cwd=os.getcwd(),
            path0=sys.path[0], env=dict(os.environ), own_group=os.getpgrp() == os.getpid(),
            stdin=sys.stdin.read(), umask=os.umask(0o22), trainer_patched=False)
try:
    import transformers.trainer
    seen["trainer_patched"] = bool(getattr(transformers.trainer.Trainer, "_tracetui_patched", False))
except ImportError:
    pass
print("to the log")
json.dump(seen, open(name + ".json", "w"))
sys.exit(3)
"""


def _seen(folder: Path, fresh: bool) -> dict:
    from .conftest import run_cli

    (folder / "seen.py").write_text(SEEN)
    proc = run_cli("sweep", *(["--fresh"] if fresh else []), "--splits", "1x1", "--repeats", 1, "--export", "csv",
                   "-o", folder / "out.csv", "--runs-dir", folder / "runs", "--", sys.executable, "seen.py", "--x", "1",
                   cwd=folder)
    log = next((folder / "runs").glob("*/1x1.log")).read_text()
    return dict(proc=proc, seen=__import__("json").loads((folder / "1x1.json").read_text()), log=log,
                atexit=(folder / "1x1.atexit").exists(), folder=folder)


@pytest.fixture(scope="module")
def forked_and_fresh(tmp_path_factory):
    from .conftest import side_by_side

    return side_by_side(tmp_path_factory, {"forked": lambda d: _seen(d, False), "fresh": lambda d: _seen(d, True)})


@pytest.mark.slow
def test_a_forked_run_has_what_the_command_would_have_had(forked_and_fresh):
    from .conftest import outcome

    forked, fresh = outcome(forked_and_fresh, "forked"), outcome(forked_and_fresh, "fresh")
    assert "each run starts forked from tracetui's server" in forked["proc"].stderr
    assert "each run starts as a fresh process (--fresh)" in fresh["proc"].stderr
    for got in (forked, fresh):
        # its status is the script's own, said as such; its output went to its log
        assert got["proc"].returncode == 1 and "exited with status 3 without reporting" in got["proc"].stderr
        assert "to the log" in got["log"] and got["atexit"]
    a, b = forked["seen"], fresh["seen"]
    # the same argv, __main__, sys.path[0], process group, stdin and umask; the working directory
    # and the script's path are each sweep's own folder
    for key in ("argv", "name", "own_group", "stdin", "umask"):
        assert a[key] == b[key], key
    assert a["argv"] == ["seen.py", "--x", "1", "--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "1"]
    for got, seen in ((forked, a), (fresh, b)):
        assert seen["cwd"] == str(got["folder"]) == seen["path0"]
        assert seen["main_file"] in ("seen.py", str(got["folder"] / "seen.py"))
    # the same environment: what differs is each sweep's own (its socket, run, times, process, the
    # folder that holds tracetui for the script) and the mark of a fork
    own = {"TRACETUI_SOCKET", "TRACETUI_RUN_ID", "TRACETUI_STARTED_AT", "TRACETUI_OWNER_PID", "PYTHONPATH"}
    assert a["env"]["PYTHONPATH"].split(os.pathsep)[0] == b["env"]["PYTHONPATH"].split(os.pathsep)[0]
    assert set(a["env"]) - set(b["env"]) == {"TRACETUI_FORKED"}
    assert set(b["env"]) - set(a["env"]) == set()
    assert {k for k in b["env"] if a["env"][k] != b["env"][k]} <= own
    # the probe is attached either way: forked, to the Trainer the server imported
    assert a["trainer_patched"] and b["trainer_patched"]


def test_a_config_trainers_recommendation_is_its_own_config_with_the_keys(tmp_path):
    """The handoff of an axolotl sweep: the keys said in one line, and --emit-config writes the
    user's config (comments kept) with them, which the trainer's own command then takes."""
    from tracetui.config import SweepConfig
    from tracetui.emit import winning_line, write_config

    (tmp_path / "cfg.yml").write_text(AXOLOTL)
    cmd = ["axolotl", "train", str(tmp_path / "cfg.yml")]
    row = {**Trial(4, 1).fields(), "trial": "4x1"}
    assert winning_line(cmd, row) == (f"the recommendation's keys for {tmp_path / 'cfg.yml'}: "
                                      "micro_batch_size: 4, gradient_accumulation_steps: 1")
    out = tmp_path / "best.yml"
    wrote, notes = write_config(str(out), row, SweepConfig(), cmd)
    assert wrote == f"axolotl config for 4x1 in {out}: axolotl train {out}"
    assert notes == ["micro_batch_size: 2 -> 4", "gradient_accumulation_steps: 2 -> 1"]
    assert out.read_text() == AXOLOTL.replace("micro_batch_size: 2", "micro_batch_size: 4").replace(
        "gradient_accumulation_steps: 2  #", "gradient_accumulation_steps: 1  #")
    os.symlink(out, tmp_path / "link.yml")
    with pytest.raises(ValueError, match="is a symbolic link"):
        write_config(str(tmp_path / "link.yml"), row, SweepConfig(), cmd)


def test_in_a_foreign_environment_a_probe_that_cannot_attach_says_so_in_one_line(tmp_path):
    """A command of another virtual environment (here one whose ``transformers`` has a Trainer
    but no TrainerCallback) starts fresh, with the probe injected; the probe cannot attach there:
    one line in the run's log and as the run's failure, no traceback, and the script runs to its
    end."""
    import subprocess
    import venv

    from .conftest import read_csv, run_cli

    venv.EnvBuilder(with_pip=False).create(tmp_path / "venv")
    fake = tmp_path / "transformers"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "trainer.py").write_text("class Trainer:\n    def __init__(self, **kw):\n        self.callback_handler = None\n")
    (tmp_path / "train.py").write_text("import os\nprint('PATH starts with', os.environ['PATH'].split(os.pathsep)[0])\n"
                                       "from transformers.trainer import Trainer\nTrainer()\nprint('trained to the end')\n")
    python = str(tmp_path / "venv" / "bin" / "python")
    proc = run_cli("sweep", "--splits", "1x1", "--repeats", 1, "--export", "csv", "-o", tmp_path / "out.csv",
                   "--runs-dir", tmp_path / "runs", "--", python, "train.py", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert f"each run starts as a fresh process in the Python environment {tmp_path / 'venv'} (as if activated)" \
        in proc.stderr
    said = ("tracetui: could not attach the probe (ImportError: cannot import name 'TrainerCallback' from "
            "'transformers'")
    [row] = read_csv(tmp_path / "out.csv")
    assert row["status"] == "error" and said in row["message"], row
    log = next((tmp_path / "runs").glob("*/1x1.log")).read_text()
    assert said in log and "trained to the end" in log and "Traceback" not in log
    # run as if its environment were activated: what it starts by name is its own
    assert f"PATH starts with {tmp_path / 'venv' / 'bin'}" in log
    assert subprocess.run([python, "-c", "import textual"], capture_output=True).returncode != 0  # foreign indeed


def test_axolotl_copy_leaves_out_batch_size_and_runs_untracked_unless_asked(tmp_path, monkeypatch):
    """axolotl refuses ``batch_size`` beside ``gradient_accumulation_steps``: the copy leaves it
    out (and says so). Offline, axolotl's usage reporting holds a finished run open for minutes:
    measured runs get AXOLOTL_DO_NOT_TRACK=1, unless the user set it."""
    (tmp_path / "cfg.yml").write_text("base_model: m\nbatch_size: 8  # per device, over the accumulation\n"
                                      "micro_batch_size: 2\n")
    cmd = ["axolotl", "train", str(tmp_path / "cfg.yml")]
    launcher = launcher_for(cmd)
    got = launcher.trial_command(cmd, _trial(4, 2), tmp_path / "run")
    assert ("batch_size", 8, DROPPED) in got.changed and "batch_size 8 -> (left out)" in got.described()
    got.write()
    assert yaml.safe_load((tmp_path / "run" / "cfg.yml").read_text()) == {
        "base_model": "m", "micro_batch_size": 4, "gradient_accumulation_steps": 2, "output_dir": str(tmp_path / "run" / "output")}
    monkeypatch.delenv("AXOLOTL_DO_NOT_TRACK", raising=False)
    assert launcher.environment(cmd, {"PATH": "/usr/bin"})["AXOLOTL_DO_NOT_TRACK"] == "1"
    assert launcher.notes() == ["AXOLOTL_DO_NOT_TRACK=1 unless set: its usage reporting off for measured runs"]
    assert launcher.environment(cmd, {"AXOLOTL_DO_NOT_TRACK": "0"})["AXOLOTL_DO_NOT_TRACK"] == "0"


def test_a_program_of_another_environment_runs_as_if_it_were_activated(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    env = Flags().environment([str(venv / "bin" / "axolotl"), "train"], {"PATH": f"/usr/bin{os.pathsep}{venv / 'bin'}"})
    assert env["PATH"].split(os.pathsep) == [str(venv / "bin"), "/usr/bin"] and env["VIRTUAL_ENV"] == str(venv)
    # this environment's own programs, and programs of no Python environment, are left as they are
    assert Flags().environment([sys.executable, "t.py"], {"PATH": "/x"}) == {"PATH": "/x"}
    assert Flags().environment(["/bin/sh"], {"PATH": "/x"}) == {"PATH": "/x"}
