"""The launcher seam (tracetui.launch.dialects): how a trial's split and settings reach each kind of
command (flags after the script, world size from the launcher, a per-trial copy of a config-file
trainer's YAML), and which commands start forked from tracetui's server."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

from tracetui.core.config import ConfigError
from tracetui.launch.dialects import DROPPED, ConfigFile, Flags, launcher_for, world_size
from tracetui.launch.fork import fork_target
from tracetui.launch.yaml_edit import ADDED, edit
from tracetui.core.trial import Trial

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
        f"output_dir: {run / 'output'}", ADDED, "gradient_checkpointing: true"]
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
    ([], {"padding_free": [False, True]}, "padding_free has no key tracetui knows in axolotl's config"),
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


def test_a_key_set_to_a_block_is_changed_in_its_own_lines():
    text = "micro_batch_size:  # a list, by mistake\n  - 1\n  - 2\nlr: 0.1  # kept\n"
    assert edit(text, {"micro_batch_size": 4}).text == "micro_batch_size: 4\nlr: 0.1  # kept\n"


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


def test_a_script_that_imports_unsloth_starts_fresh(tmp_path):
    # Unsloth patches transformers, TRL and PEFT as it is imported, and warns that they were
    # imported before it: a forked run has them from the fork server
    (tmp_path / "u.py").write_text("import os\nfrom unsloth import FastLanguageModel\nfrom trl import SFTTrainer\n")
    (tmp_path / "v.py").write_text("import unsloth_like\n# from unsloth import nothing: a comment\n")
    assert fork_target([sys.executable, "u.py"], cwd=str(tmp_path)) == (
        None, "the script imports unsloth, which must come before transformers, TRL and PEFT, "
              "and the fork server has imported them")
    assert fork_target([sys.executable, "v.py"], cwd=str(tmp_path))[1] == ""


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
    from tracetui.cli.main import main

    (tmp_path / "cfg.yml").write_text(AXOLOTL)
    axolotl = _program(tmp_path / "bin", "axolotl")
    assert main(["sweep", "--dry-run", "--splits", "1x4,4x1", "--repeats", "1", "--runs-dir", str(tmp_path / "runs"),
                 "--", str(axolotl), "train", str(tmp_path / "cfg.yml")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [
        f"run 1: 1x4 (effective batch 4): {axolotl} train '{{copy of {tmp_path / 'cfg.yml'}}}'; changes "
        "micro_batch_size 2 -> 1, gradient_accumulation_steps 2 -> 4, output_dir ./outputs/lora -> {the run's folder}/output",
        f"run 2: 4x1 (effective batch 4): {axolotl} train '{{copy of {tmp_path / 'cfg.yml'}}}'; changes "
        "micro_batch_size 2 -> 4, gradient_accumulation_steps 2 -> 1, output_dir ./outputs/lora -> {the run's folder}/output"]
    assert out[2].startswith("each run starts ")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "cfg.yml"] + (["runs"] if (tmp_path / "runs").exists()
                                                                               else [])


# ---- a forked run has what the command would have had -----------------------------------------

SEEN = """\
import atexit, json, os, sys
name = os.environ["TRACETUI_RUN_ID"].split("/")[1]
atexit.register(lambda: open(name + ".atexit", "w").write("ran"))
seen = dict(argv=sys.argv, name=__name__, main_file=sys.modules["__main__"].__file__, cwd=os.getcwd(),
            path0=sys.path[0], env=dict(os.environ), own_group=os.getpgrp() == os.getpid(),
            stdin=sys.stdin.read(), umask=os.umask(0o22), trainer_patched=False,
            tmp=sorted(os.listdir(os.environ.get("TMPDIR", "."))),
            parent_stderr=os.readlink(f"/proc/{os.getppid()}/fd/2"))
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
    (folder / "tmp").mkdir()
    proc = run_cli("sweep", *(["--fresh"] if fresh else []), "--splits", "1x1", "--repeats", 1, "--export", "csv",
                   "-o", folder / "out.csv", "--runs-dir", folder / "runs", "--", sys.executable, "seen.py", "--x", "1",
                   cwd=folder, env={"TMPDIR": str(folder / "tmp")})
    log = next((folder / "runs").glob("*/1x1.log")).read_text()
    return dict(proc=proc, seen=__import__("json").loads((folder / "1x1.json").read_text()), log=log,
                atexit=(folder / "1x1.atexit").exists(), folder=folder,
                server_logs=sorted(p.name for p in (folder / "tmp").glob("tracetui-server-*")))


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
        assert got["server_logs"] == []  # the fork server's standard error (a file) went with it
    a, b = forked["seen"], fresh["seen"]
    # the fork server's standard error is a file whose name it removed once open (read by tracetui
    # through its own descriptor): nothing of it is left, however tracetui ends
    assert "/tracetui-server-" in a["parent_stderr"] and a["parent_stderr"].endswith(" (deleted)")
    assert not any(name.startswith("tracetui-server-") for name in a["tmp"])
    # the same argv, __main__, sys.path[0], process group, stdin and umask; the working directory
    # and the script's path are each sweep's own folder
    for key in ("argv", "name", "own_group", "stdin", "umask"):
        assert a[key] == b[key], key
    assert a["argv"] == ["seen.py", "--x", "1"]  # a script that parses no flags gets none: its split is applied in its trainer
    for got, seen in ((forked, a), (fresh, b)):
        assert seen["cwd"] == str(got["folder"]) == seen["path0"]
        assert seen["main_file"] in ("seen.py", str(got["folder"] / "seen.py"))
    # the same environment: what differs is each sweep's own (its socket, run, times, process, the
    # folder that holds tracetui for the script, the test's temporary folder) and the mark of a fork
    own = {"TRACETUI_SOCKET", "TRACETUI_RUN_ID", "TRACETUI_STARTED_AT", "TRACETUI_OWNER_PID", "PYTHONPATH",
           "TRACETUI_PLAN", "TRACETUI_RUN_TREE", "TMPDIR"}
    assert a["env"]["PYTHONPATH"].split(os.pathsep)[0] == b["env"]["PYTHONPATH"].split(os.pathsep)[0]
    assert set(a["env"]) - set(b["env"]) == {"TRACETUI_FORKED"}
    assert set(b["env"]) - set(a["env"]) == set()
    assert {k for k in b["env"] if a["env"][k] != b["env"][k]} <= own
    # the probe is attached either way: forked, to the Trainer the server imported
    assert a["trainer_patched"] and b["trainer_patched"]


def test_a_config_trainers_recommendation_is_its_own_config_with_the_keys(tmp_path):
    """The handoff of an axolotl sweep: the keys said in one line, and --emit-config writes the
    user's config (comments kept) with them, which the trainer's own command then takes."""
    from tracetui.core.config import SweepConfig
    from tracetui.outputs.emit import winning_line, write_config

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
    with pytest.raises(OSError, match="is a symbolic link"):
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


# ---- a config as its user wrote it: anchors, aliases, comments, flow style, quotes ---------------

ANCHORED = """\
# axolotl config, as its user wrote it
base_model: "./model"          # quoted
defaults: &opt {optimizer: adamw_torch, lr: 2.0e-4}
datasets:
  - path: data/alpaca.jsonl
    type: alpaca
micro_batch_size: &mb 2   # per device
eval_batch_size: *mb      # the same as training
gradient_accumulation_steps: 4  # effective 8
lora_target_modules: [q_proj, v_proj]
output_dir: './outputs/lora'
optimizer_settings: *opt
"""


def _diff(before: str, after: str) -> tuple[list[str], list[str]]:
    """The lines ``after`` lost and gained against ``before`` (difflib)."""
    import difflib

    lines = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0))[2:]
    return ([x[1:] for x in lines if x.startswith("-")], [x[1:] for x in lines if x.startswith("+")])


def test_a_copy_changes_only_the_planned_lines_and_writes_an_alias_of_a_changed_value_out(tmp_path):
    """micro_batch_size carries the anchor &mb, and eval_batch_size is *mb: the copy changes the
    value in place (anchor and comment kept) and writes eval_batch_size out as the 2 it was, so
    that the run differs from the user's file in its split alone, and says so; every other line is
    the user's, byte for byte. The recommendation's file (--emit-config) is made the same way."""
    from tracetui.core.config import SweepConfig
    from tracetui.outputs.emit import write_config

    (tmp_path / "cfg.yml").write_text(ANCHORED)
    cmd = ["axolotl", "train", str(tmp_path / "cfg.yml")]
    launcher = launcher_for(cmd)
    launcher.check(cmd, {"activation_checkpointing": [True]})
    run = tmp_path / "run"
    got = launcher.trial_command(cmd, _trial(4, 1, activation_checkpointing=True), run)
    got.write()
    copy = (run / "cfg.yml").read_text()
    lost, gained = _diff(ANCHORED, copy)
    assert lost == ["micro_batch_size: &mb 2   # per device", "eval_batch_size: *mb      # the same as training",
                    "gradient_accumulation_steps: 4  # effective 8", "output_dir: './outputs/lora'"]
    assert gained == ["micro_batch_size: &mb 4   # per device", "eval_batch_size: 2      # the same as training",
                      "gradient_accumulation_steps: 1  # effective 8", f"output_dir: '{run / 'output'}'",
                      ADDED, "gradient_checkpointing: true"]
    user = yaml.safe_load(ANCHORED)
    assert yaml.safe_load(copy) == {**user, "micro_batch_size": 4, "gradient_accumulation_steps": 1,
                                    "output_dir": str(run / "output"), "gradient_checkpointing": True}
    said = "eval_batch_size keeps 2: it was *mb, an alias of micro_batch_size's value, written out"
    assert got.said == [said + " so that it does not change with it"] and said in got.described()
    # the recommendation's file: the same edit, the user's output_dir, and the same said
    row = {**_trial(4, 1, activation_checkpointing=True).fields(), "trial": "4x1 ckpt=on"}
    _wrote, notes = write_config(str(tmp_path / "best.yml"), row, SweepConfig(), cmd)
    best = (tmp_path / "best.yml").read_text()
    assert _diff(ANCHORED, best) == (lost[:3], gained[:3] + gained[4:])
    assert yaml.safe_load(best) == {**user, "micro_batch_size": 4, "gradient_accumulation_steps": 1,
                                    "gradient_checkpointing": True}
    assert any(n.startswith(said) for n in notes)
    assert (tmp_path / "cfg.yml").read_text() == ANCHORED


def test_a_split_key_that_is_an_alias_and_a_left_out_key_that_is_an_anchor(tmp_path):
    """micro_batch_size: *two takes the planned value itself (the anchor keeps its own); axolotl's
    batch_size, left out of the copy, carries &bs: its alias is written out as its value."""
    text = "base: &two 2  # shared\nmicro_batch_size: *two\nbatch_size: &bs 8  # total\nlimit: *bs\n"
    (tmp_path / "cfg.yml").write_text(text)
    cmd = ["axolotl", "train", str(tmp_path / "cfg.yml")]
    got = launcher_for(cmd).trial_command(cmd, _trial(4, 2), tmp_path / "run")
    got.write()
    copy = (tmp_path / "run" / "cfg.yml").read_text()
    assert copy.splitlines()[:3] == ["base: &two 2  # shared", "micro_batch_size: 4", "limit: 8"]
    assert yaml.safe_load(copy) == {"base": 2, "micro_batch_size": 4, "limit": 8, "gradient_accumulation_steps": 2,
                                    "output_dir": str(tmp_path / "run" / "output")}
    assert got.said == ["micro_batch_size was *two: it now holds 4 itself (the anchor &two and its other uses "
                        "keep their value)",
                        "limit keeps 8: it was *bs, an alias of batch_size's value, written out so that it does not "
                        "change with it"]


def test_an_alias_of_a_block_that_would_change_is_refused_in_one_line(tmp_path):
    (tmp_path / "cfg.yml").write_text("micro_batch_size: &blk\n  - 1\n  - 2\nother: *blk\n")
    cmd = ["axolotl", "train", str(tmp_path / "cfg.yml")]
    with pytest.raises(ConfigError, match=r"\*blk in other is an alias of a block under micro_batch_size") as err:
        launcher_for(cmd).check(cmd, {})
    assert "\n" not in str(err.value)


def _program(folder: Path, name: str, body: str = "import sys\nsys.exit(0)\n") -> Path:
    """An executable ``name`` (a Python program of this interpreter) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return path


def test_a_dry_run_refuses_a_setting_the_trainer_lacks_in_the_real_runs_one_line(tmp_path):
    from .conftest import run_main

    (tmp_path / "cfg.yml").write_text(AXOLOTL)
    axolotl = _program(tmp_path / "bin", "axolotl")
    said = []
    for how in (["--dry-run"], ["--export", "csv", "-o", tmp_path / "out.csv"]):
        proc = run_main("sweep", *how, "--splits", "1x4,4x1", "--vary", "padding_free=off,on", "--runs-dir",
                        tmp_path / "runs", "--", axolotl, "train", tmp_path / "cfg.yml")
        assert proc.returncode == 2 and proc.stdout == "", proc
        said.append(proc.stderr)
    assert said[0] == said[1] == ("tracetui: error: --vary: padding_free has no key tracetui knows in axolotl's "
                                  "config; set it in the config and compare it in two sweeps, or vary one of "
                                  "activation_checkpointing, dataloader_workers, optim, pin_memory, torch_compile\n")


def _rows(varied: bool) -> list[dict]:
    """Summary rows of a sweep of 1x4 and 4x1 (with checkpointing on, when ``varied``), on
    synthetic steps: 4x1 the faster, clearly."""
    from tracetui.analysis import Results, summarise
    from tracetui.events.schema import make

    events = []
    for mb, ga, per in ((1, 4, 40.0), (4, 1, 17.0)):
        trial = _trial(mb, ga, **({"activation_checkpointing": True} if varied else {}))
        rid = f"s/{trial.slug()}"
        events.append(make("run_started", rid, label=trial.label(), **trial.fields(), repeat=0, env={"device": "cpu"}))
        for k in range(1, 13):
            wall = per * (1 + 0.01 * (k % 3))
            events.append(make("step", rid, step=k, warmup=k <= 3, wall_ms=wall, forward_ms=[wall / 2],
                               backward_ms=[wall / 2]))
        events.append(make("run_finished", rid))
    return summarise(Results().extend(events))


@pytest.mark.parametrize("trainer, name, keys, own", ids=["llama-factory", "axolotl"], argvalues=[
    ("llamafactory-cli", "lf.yaml", "per_device_train_batch_size: 4, gradient_accumulation_steps: 1, "
     "disable_gradient_checkpointing: false",
     "your config trains effective batch 1: per_device_train_batch_size 1 x gradient_accumulation_steps 1 "
     "(its default); this answer is for 4"),
    ("axolotl", "cfg.yml", "micro_batch_size: 4, gradient_accumulation_steps: 1, gradient_checkpointing: true", None),
])
def test_a_config_trainers_recommendation_speaks_its_own_keys(tmp_path, trainer, name, keys, own):
    """LLaMA-Factory turns checkpointing off with disable_gradient_checkpointing (its
    gradient_checkpointing, a TrainingArguments field, leaves its own on); axolotl's split is
    micro_batch_size. Where the config's own effective batch differs, the recommendation says so."""
    from tracetui.outputs.writer import Outputs

    (tmp_path / name).write_text(LLAMA_FACTORY if name == "lf.yaml" else AXOLOTL)
    cmd = [trainer, "train", str(tmp_path / name)]
    rec = Outputs(str(tmp_path / "out.csv"), cmd=cmd).answer(_rows(varied=True)).recommendation
    assert rec.startswith(f"use 4x1 ckpt=on for effective batch 4; in {name}: {keys}"), rec
    assert "SFTConfig" not in rec and "=" not in rec.replace("ckpt=on", "")
    assert (own in rec) if own else "your config" not in rec  # the axolotl config's own split is 2x2
    # with no setting compared, the split alone; without a config trainer, SFTConfig's words
    assert Outputs(str(tmp_path / "out.csv"), cmd=cmd).answer(_rows(varied=False)).recommendation.startswith(
        "use 4x1 for effective batch 4" + (f" ({own})" if own else ""))
    assert "; in SFTConfig: per_device_train_batch_size=4, gradient_accumulation_steps=1, " \
           "gradient_checkpointing=True" in Outputs(str(tmp_path / "out.csv")).answer(_rows(varied=True)).recommendation


def test_a_sweep_of_a_config_trainer_keeps_its_file_and_says_its_own_effective_batch(tmp_path):
    """A stand-in axolotl (tests/stubs/trainer.py's steps, its split read from the YAML it is
    given) swept at 1x4 and 4x1 from a config that trains 2x4: each run trains its copy's split
    (the copy, and best.yml, differ from the file in the planned lines alone), and the closing
    lines say that the config's own effective batch is 8 where the answer is for 4."""
    from .conftest import read_csv, run_main

    stubs = Path(__file__).parent / "stubs"
    axolotl = _program(tmp_path / "bin", "axolotl", (
        f"import sys, yaml\nsys.path.insert(0, {str(stubs)!r})\nimport trainer\n"
        "cfg = yaml.safe_load(open(sys.argv[2]))\n"
        "sys.argv[1:] = ['--per_device_train_batch_size', str(cfg['micro_batch_size']),\n"
        "                '--gradient_accumulation_steps', str(cfg['gradient_accumulation_steps']), '--max_steps', '12']\n"
        "trainer.main()\n"))
    (tmp_path / "cfg.yml").write_text(ANCHORED)
    proc = run_main("sweep", "--fresh", "--splits", "1x4,4x1", "--export", "csv", "-o", tmp_path / "out.csv",
                    "--emit-config", tmp_path / "best.yml", "--runs-dir", tmp_path / "runs",
                    "--", axolotl, "train", tmp_path / "cfg.yml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = {r["trial"]: r for r in read_csv(tmp_path / "out.csv")}
    assert set(rows) == {"1x4", "4x1"} and all(r["status"] == "ok" for r in rows.values())
    for split, mb, ga in (("1x4", 1, 4), ("4x1", 4, 1)):
        [copy] = (tmp_path / "runs").glob(f"*/{split}/cfg.yml")
        lost, gained = _diff(ANCHORED, copy.read_text())
        assert [x.split(":")[0] for x in lost] == ["micro_batch_size", "eval_batch_size"] + (
            ["gradient_accumulation_steps"] if ga != 4 else []) + ["output_dir"]
        assert yaml.safe_load(copy.read_text())["eval_batch_size"] == 2
        assert (rows[split]["micro_batch"], rows[split]["grad_accum"]) == (str(mb), str(ga))
    own = ("(your config trains effective batch 8: micro_batch_size 2 x gradient_accumulation_steps 4; "
           "this answer is for 4)")
    assert f"tracetui: use 4x1 for effective batch 4 {own}" in proc.stderr
    assert "eval_batch_size keeps 2: it was *mb" in proc.stderr  # the emitted file's notes
    assert _diff(ANCHORED, (tmp_path / "best.yml").read_text())[0] == [
        "micro_batch_size: &mb 2   # per device", "eval_batch_size: *mb      # the same as training",
        "gradient_accumulation_steps: 4  # effective 8"]
    assert (tmp_path / "cfg.yml").read_text() == ANCHORED


def test_a_kind_of_launcher_is_one_entry_that_the_handoff_reads(tmp_path, monkeypatch):
    """A new kind of command (here a toy trainer given its split as ``mb=N ga=N`` and run on a
    config of its own) is one class in :data:`KINDS`: the trial's command, the recommendation's
    line, its JSON, the emitted config and the patch's refusal all come from its methods."""
    from tracetui.analysis import Policy
    from tracetui.core.config import SweepConfig
    from tracetui.launch import dialects
    from tracetui.launch.dialects import TrialCommand
    from tracetui.launch.plan import script_command
    from tracetui.outputs.emit import check_patch_target, script_changes, winning_line, write_config
    from tracetui.outputs.writer import Answer, Outputs

    class Toy(Flags):
        name = "toytrain"
        own_code = False

        @classmethod
        def recognise(cls, cmd):
            return cls() if cmd and cmd[0] == "toytrain" else None

        def trial_command(self, cmd, trial, folder=None):
            return TrialCommand(cmd + [f"mb={trial.micro_batch}", f"ga={trial.grad_accum}"])

        def own_config(self, cmd, trial, path):
            return f"mb = {trial.micro_batch}\nga = {trial.grad_accum}\n", cmd + ["--config", path], ["toy note"]

        def check_patch(self, cmd):
            raise ConfigError("--emit-patch", "toytrain has no script", "drop it")

    monkeypatch.setattr(dialects, "KINDS", [*dialects.KINDS, Toy])
    cmd = ["toytrain", "--steps", "3"]
    row = {**Trial(4, 2).fields(), "trial": "4x2"}
    assert isinstance(launcher_for(cmd), Toy)
    assert script_command(cmd, Trial(4, 2)) == cmd + ["mb=4", "ga=2"]
    assert winning_line(cmd, row) == "the recommendation's command: toytrain --steps 3 mb=4 ga=2"
    out = tmp_path / "best.toml"
    assert write_config(str(out), row, SweepConfig(), cmd) == (
        f"toytrain config for 4x2 in {out}: toytrain --steps 3 --config {out}", ["toy note"])
    assert out.read_text() == "mb = 4\nga = 2\n"
    with pytest.raises(ConfigError, match="toytrain has no script"):
        check_patch_target(cmd)
    assert script_changes(row, cmd) == (None, "not a swept script")
    data = Outputs("-", cmd=cmd).handoff_data(Answer("", "", "", (row,), Policy()))
    assert data["command"] == "toytrain --steps 3 mb=4 ga=2"
    # without the entry, the same command is a script given flags
    monkeypatch.setattr(dialects, "KINDS", [k for k in dialects.KINDS if k is not Toy])
    assert type(launcher_for(cmd)) is Flags
