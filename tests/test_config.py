"""Every bad value is refused before training, on one line, with exit status 2."""

import pytest

from tracetui.cli.main import main
from tracetui.core.checks import validate
from tracetui.core.coerce import from_mapping
from tracetui.core.config import ConfigError, SweepConfig

from .conftest import run_cli


def _err(capsys, *argv):
    code = main(list(argv))
    err = capsys.readouterr().err
    return code, err


@pytest.mark.parametrize("argv, needle", [
    (["--splits", "3x2", "--effective-batch", "4"], "--splits: 3x2 multiplies to 6, not an effective batch (4)"),
    (["--splits", "2y2"], "--splits: '2y2' is not MICROxACCUM"),
    (["--splits", "0x4"], "zero factor"),
    (["--splits", "1x4,1x4"], "listed twice"),
    (["--model", "no-such-preset"], "--model: 'no-such-preset' is not a preset"),
    (["--dataset", "missing.jsonl"], "--dataset: missing.jsonl does not exist"),
    (["--warmup", "5", "--steps", "5"], "--warmup: 5 leaves no measured step"),
    (["--steps", "0"], "--steps: must be at least 1"),
    (["--steps", "many"], "--steps: 'many' is not a valid int"),
    (["--effective-batch", "4,x"], "--effective-batch: 'x' is not a whole number"),
    (["--precision", "fp8"], "--precision: 'fp8' is not one of"),
    (["--device", "tpu"], "--device: 'tpu' is not auto"),
    (["--lora-dropout", "1.5"], "--lora-dropout"),
    (["--lr", "-1"], "--lr: must be positive"),
    (["--memory-limit", "0"], "--memory-limit: must be a positive"),
    (["--max-micro-batch", "1", "--splits", "2x2"], "above --max-micro-batch"),
    (["--bogus"], "unrecognized arguments: --bogus; see"),  # nothing close: no guess
    (["--grid", "--run-unfit"], "--run-unfit: is for the search, and --grid runs every split anyway"),
    (["--stepz", "5"], "unrecognized arguments: --stepz 5 (did you mean --steps?)"),
    (["--stepz", "5", "--memory-limt", "3"], "(did you mean: --stepz -> --steps, --memory-limt -> --memory-limit?)"),
    (["--vary", "liger=off,on", "--liger"], "--vary: liger is varied, and also fixed to on on the command line"),
    (["--vary", "attn_implementation=sdpa,eager", "--attn-implementation", "eager"],
     "attn_implementation is varied, and also fixed to eager on the command line; drop one of the two"),
    (["--config", "nope.toml"], "--config: nope.toml does not exist"),
    (["--model", "./nope-model"], "--model: folder ./nope-model does not exist; give a model folder"),
    # a flag cut short is not taken for the one it begins
    (["--effective-batc", "8"], "unrecognized arguments: --effective-batc 8 (did you mean --effective-batch?)"),
])
def test_bad_flag_is_one_line_exit_2(capsys, argv, needle):
    code, err = _err(capsys, "--export", "csv", *argv)
    assert code == 2
    assert needle in err
    assert err.count("\n") == 1 and err.startswith("tracetui: error: ")
    assert "Traceback" not in err


@pytest.mark.slow  # (the device is checked with the model and data, in a process forked from the fork server)
def test_cuda_where_there_is_none(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code, err = _err(capsys, "--export", "csv", "--device", "cuda")
    assert code == 2 and "--device: cuda asked for, but this machine has no usable CUDA GPU" in err


@pytest.mark.slow  # (the data set is read in a process forked from the fork server)
def test_text_field_absent(tmp_path):
    """The refusal is the command's one line on the terminal: nothing the check process's
    libraries print (the data set loader's progress bar, as it reads a file its cache has not
    seen: hence rows of this test's own) reaches the terminal (the same terminal a monitor draws
    on)."""
    data = tmp_path / "d.jsonl"
    data.write_text(f'{{"body": "hello {tmp_path.name}"}}\n{{"body": "world"}}\n')
    proc = run_cli("--export", "csv", "--dataset", data, "--text-field", "text", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("tracetui: error: --text-field: 'text' is not a column") and "body" in proc.stderr


def test_unwritable_output(capsys, tmp_path):
    code, err = _err(capsys, "--export", "csv", "-o", str(tmp_path / "no" / "dir" / "x.csv"))
    assert code == 2 and "--output: folder" in err and "does not exist" in err


def test_toml_and_flags_override(tmp_path):
    from tracetui.cli.main import build_parser
    from tracetui.core.flags import from_args

    cfg_file = tmp_path / "s.toml"
    cfg_file.write_text('[sweep]\nsteps = 12\nwarmup = 2\nsplits = ["1x8", "8x1"]\neffective-batch = 8\n')
    ns = build_parser().parse_args(["--config", str(cfg_file), "--steps", "20"])
    cfg = from_args(ns)
    assert cfg.steps == 20 and cfg.warmup == 2 and cfg.effective_batch == [8]
    assert [s.split for s in validate(cfg)] == ["1x8", "8x1"]


def test_until_confident_alone_asks_for_five_percent():
    """A run's median to within 5%: fresh processes of one split differ by more than that."""
    from tracetui.cli.main import build_parser
    from tracetui.core.flags import from_args

    assert from_args(build_parser().parse_args(["--until-confident"])).until_confident == 5.0
    assert from_args(build_parser().parse_args(["--until-confident", "2"])).until_confident == 2.0
    assert from_args(build_parser().parse_args([])).until_confident is None


def test_bad_toml_key_and_syntax(capsys, tmp_path):
    bad = tmp_path / "b.toml"
    bad.write_text("stepz = 3\n")
    code, err = _err(capsys, "--export", "csv", "--config", str(bad))
    assert code == 2 and "stepz: is not a tracetui setting" in err
    bad.write_text("steps = [\n")
    code, err = _err(capsys, "--export", "csv", "--config", str(bad))
    assert code == 2 and "is not valid TOML" in err


def test_auto_splits():
    cfg = from_mapping({"effective_batch": "4,6", "max_micro_batch": 4})
    assert [s.split for s in validate(cfg)] == ["1x4", "2x2", "4x1", "1x6", "2x3", "3x2"]


def test_error_names_field():
    with pytest.raises(ConfigError) as exc:
        validate(SweepConfig(steps=3, warmup=3))
    assert exc.value.field == "--warmup"


def test_splits_without_an_effective_batch_set_it():
    """``--splits 1x8,8x1`` alone compares at 8 (the splits' own), two products give two."""
    from tracetui.cli.main import build_parser
    from tracetui.core.flags import from_args

    def effective(*argv):
        return from_args(build_parser().parse_args(list(argv))).effective_batch

    assert effective("--splits", "1x8,8x1") == [8]
    assert effective("--splits", "1x8,2x2,8x1") == [8, 4]
    assert effective("--splits", "1x8,8x1", "--effective-batch", "8,16") == [8, 16]
    assert effective() == [4]  # no splits given: the default


def test_cli_subprocess_no_traceback():
    proc = run_cli("--export", "csv", "--splits", "3x3", "--effective-batch", "4")
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("tracetui: error: --splits")
    assert "Traceback" not in proc.stderr


def test_help_is_fast_and_light():
    proc = run_cli("--help")
    assert proc.returncode == 0 and "--effective-batch" in proc.stdout
    import subprocess
    import sys

    code = "import sys, tracetui.cli.main; print('torch' in sys.modules, 'textual' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert out.strip() == "False False"


def test_every_setting_is_declared_once_and_reaches_flag_toml_and_help():
    """One declaration per setting gives its flag, TOML key, type, default and help."""
    from dataclasses import fields

    from tracetui.cli.main import build_parser
    from tracetui.core.coerce import from_mapping
    from tracetui.core.config import SweepConfig

    parser = build_parser()
    dests = {a.dest: a for a in parser._actions}
    help_text = parser.format_help()
    for f in fields(SweepConfig):
        assert f.name in dests, f.name  # a flag
        assert f.metadata["help"].split()[0] in help_text  # its help
        default = getattr(SweepConfig(), f.name)
        assert getattr(from_mapping({f.name.replace("_", "-"): default}), f.name) == default  # a TOML key


@pytest.mark.slow  # (checked in a process forked from the fork server)
def test_lora_targets_that_name_no_layer_are_refused_up_front(capsys):
    """They would fail in every run, minutes in: refused before any run with the names to use."""
    from tracetui.cli.main import main

    assert main(["--dry-run", "--lora-targets", "q_proj,qkv"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--lora-targets: 'qkv' names no linear layer of tiny" in err and "q_proj" in err
    assert main(["--dry-run", "--lora-targets", "q_proj,v_proj", "--repeats", "1"]) == 0


def test_a_setting_fixed_in_the_config_file_and_varied_is_refused(capsys, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[sweep]\nliger = true\n")
    code, err = _err(capsys, "--export", "csv", "--config", str(cfg), "--vary", "liger=off,on")
    assert code == 2 and f"liger is varied, and also fixed to on in {cfg}" in err
    cfg.write_text('[sweep]\nvary = ["liger=off,on"]\n')  # varied alone: fine
    assert main(["--config", str(cfg), "--dry-run"]) == 0


def test_a_misspelt_start_method_is_refused_before_any_run(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("TRACETUI_START", "forksever")
    code, err = _err(capsys, "--export", "csv", "--steps", "2", "--warmup", "1", "--runs-dir", str(tmp_path))
    assert code == 2 and err == ("tracetui: error: TRACETUI_START: 'forksever' is neither forkserver nor spawn; "
                                 "unset it (the fork server, on Linux), or set spawn for fresh interpreters\n")
    assert not list(tmp_path.glob("*/events.jsonl"))  # nothing ran


def test_a_model_path_with_a_tilde_is_named_and_spelt_out(capsys, monkeypatch, tmp_path):
    """``--model "~/models/x"`` (quoted: the shell left the ~): the folder exists once expanded,
    and the line gives the path to write instead."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "mdl").mkdir()
    code, err = _err(capsys, "--dry-run", "--model", "~/mdl")
    assert code == 2 and err == (f"tracetui: error: --model: ~/mdl: a ~ in a quoted path is not expanded; "
                                 f"give it as {tmp_path / 'mdl'}\n")


def test_subcommand_help_prints_help():
    for sub in ("sweep", "run"):
        proc = run_cli(sub, "--help")
        assert proc.returncode == 0 and f"usage: tracetui {sub}" in proc.stdout, proc.stderr
