"""The handoff for a script that sets its own split: where it sets each recommended value (file and
line, from its source), and ``--emit-patch FILE``: the change as a unified diff that ``patch -p1``
applies in the script's folder (:mod:`tracetui.outputs.script_patch`). The end-to-end check, a real sweep
of such a script whose patch is applied and the script run alone, is in tests/test_applied.py."""

import ast
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tracetui.analysis import Results
from tracetui.outputs.writer import Outputs
from tracetui.outputs.script_patch import (ADDED, ASSIGNED, ELSEWHERE, EXPRESSION, KWARGS, LITERAL, find_changes,
                                   recommended_changes)
from tracetui.events.log import read_events

from .conftest import run_main

DATA = Path(__file__).parent / "data"
SPLIT = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 1}

HARD = textwrap.dedent('''\
    import os
    from trl import SFTConfig  # the config

    args = SFTConfig(
        output_dir="/tmp/hardout",  # where it writes
        per_device_train_batch_size=1,  # the split, as written
        gradient_accumulation_steps=4,
        max_steps=10,
        use_cpu=True
    )
''')


def _apply(folder: Path, diff: str) -> None:
    """Apply ``diff`` as the user would: ``patch -p1`` in the folder (``git apply`` where there is
    no patch program)."""
    (folder / "change.diff").write_text(diff)
    if shutil.which("patch"):
        cmd = ["patch", "-p1", "--batch", "-F", "0", "-d", str(folder), "-i", str(folder / "change.diff")]
    else:
        cmd = ["git", "apply", "change.diff"]
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _keywords(path: Path, name: str = "SFTConfig") -> list[dict]:
    """The literal keywords of each call of ``name`` in ``path``, as Python reads them."""
    tree = ast.parse(path.read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == name]
    return [{k.arg: ast.literal_eval(k.value) for k in c.keywords if k.arg and _is_literal(k.value)}
            for c in sorted(calls, key=lambda c: c.lineno)]


def _is_literal(node) -> bool:
    try:
        ast.literal_eval(node)
    except ValueError:
        return False
    return True


def _changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    return [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]


def test_literal_keywords_of_a_multi_line_call_are_replaced_in_place(tmp_path):
    """A script like hard.py: each value is found on its own line (the args_origin line is the
    call's first), the diff replaces just the literal, comments and layout kept, and the patched
    file passes the recommended split."""
    script = tmp_path / "hard.py"
    script.write_text(HARD)
    found = find_changes(SPLIT, str(script), 4, "SFTConfig")
    assert [(c.field, c.kind, c.line, c.old) for c in found.changes] == [
        ("per_device_train_batch_size", LITERAL, 6, "1"), ("gradient_accumulation_steps", LITERAL, 7, "4")]
    assert [c.words() for c in found.changes] == [
        "hard.py:6: per_device_train_batch_size=1 in SFTConfig(...): make it 4",
        "hard.py:7: gradient_accumulation_steps=4 in SFTConfig(...): make it 1"]
    diff = found.diff(str(tmp_path))
    assert diff.startswith("--- a/hard.py\n+++ b/hard.py\n@@ ")
    _apply(tmp_path, diff)
    after = script.read_text()
    assert _keywords(script)[0] == {"output_dir": "/tmp/hardout", "per_device_train_batch_size": 4,
                                    "gradient_accumulation_steps": 1, "max_steps": 10, "use_cpu": True}
    assert _changed_lines(HARD, after) == [
        ("    per_device_train_batch_size=1,  # the split, as written",
         "    per_device_train_batch_size=4,  # the split, as written"),
        ("    gradient_accumulation_steps=4,", "    gradient_accumulation_steps=1,")]


@pytest.mark.parametrize("call, expect", [
    # one argument a line, the last without a trailing comma: a comma added, a line of its own
    ('args = SFTConfig(\n    output_dir="o",\n    per_device_train_batch_size=1  # mb\n)\n',
     'args = SFTConfig(\n    output_dir="o",\n    per_device_train_batch_size=4,  # mb\n'
     '    gradient_accumulation_steps=1,\n    gradient_checkpointing=True,\n)\n'),
    # on one line: after the last argument
    ('args = SFTConfig(output_dir="o", per_device_train_batch_size=1)\n',
     'args = SFTConfig(output_dir="o", per_device_train_batch_size=4, gradient_accumulation_steps=1, '
     'gradient_checkpointing=True)\n'),
    # no argument at all; no newline at the end of the file
    ("args = SFTConfig()", "args = SFTConfig(per_device_train_batch_size=4, gradient_accumulation_steps=1, "
                           "gradient_checkpointing=True)"),
])
def test_a_field_not_passed_is_added_to_the_call(tmp_path, call, expect):
    script = tmp_path / "t.py"
    script.write_text("from trl import SFTConfig\n" + call)
    values = {**SPLIT, "gradient_checkpointing": True}
    found = find_changes(values, str(script), 2, "SFTConfig")
    added = [c for c in found.changes if c.kind == ADDED]
    assert {c.field for c in added} == ({"gradient_accumulation_steps", "gradient_checkpointing"}
                                        if "per_device" in call else set(values))
    assert added[0].words() == f"SFTConfig(...) at t.py:2: {added[0].field} not passed (its default): add " \
                               f"{added[0].field}={values[added[0].field]!r}"
    _apply(tmp_path, found.diff(str(tmp_path)))
    assert script.read_text() == "from trl import SFTConfig\n" + expect
    assert values.items() <= _keywords(script)[0].items()


def test_values_from_cfg_or_a_variable_are_named_not_guessed(tmp_path):
    """``TrainingArguments(**cfg)`` from the script's own YAML, a split from a variable: no edit
    (which line makes cfg or bs is the script's business); the words name the call and the value."""
    script = tmp_path / "t.py"
    script.write_text("import yaml\nfrom transformers import TrainingArguments\ncfg = yaml.safe_load(open('c.yaml'))\n"
                      "bs = 1\nargs = TrainingArguments(per_device_train_batch_size=bs, **cfg)\n")
    found = find_changes(SPLIT, str(script), 5, "TrainingArguments")
    assert not found.patchable and found.diff(str(tmp_path)) == ""
    by = {c.field: c for c in found.changes}
    assert (by["per_device_train_batch_size"].kind, by["gradient_accumulation_steps"].kind) == (EXPRESSION, KWARGS)
    assert by["per_device_train_batch_size"].words() == (
        "t.py:5: per_device_train_batch_size=bs in TrainingArguments(...) at t.py:5: change bs where it comes "
        "from to give 4")
    assert by["gradient_accumulation_steps"].words() == (
        "gradient_accumulation_steps: set through **cfg in TrainingArguments(...) at t.py:5: change it where cfg "
        "comes from, to 1")


def test_a_value_assigned_after_the_call_is_changed_too(tmp_path):
    """``args.per_device_train_batch_size = 2`` after building them (or on ``trainer.args``): that
    is what the trainer gets, so it is changed with the call's literal."""
    script = tmp_path / "t.py"
    text = "args = SFTConfig(per_device_train_batch_size=1, gradient_accumulation_steps=4)\n" \
           "args.per_device_train_batch_size = 2\ntrainer.args.gradient_accumulation_steps = n\n"
    script.write_text(text)
    found = find_changes(SPLIT, str(script), 1, "SFTConfig")
    kinds = sorted((c.line, c.field, c.kind) for c in found.changes)
    assert kinds == [(1, "gradient_accumulation_steps", LITERAL), (1, "per_device_train_batch_size", LITERAL),
                     (2, "per_device_train_batch_size", ASSIGNED), (3, "gradient_accumulation_steps", EXPRESSION)]
    _apply(tmp_path, found.diff(str(tmp_path)))
    assert script.read_text().splitlines()[:2] == [
        "args = SFTConfig(per_device_train_batch_size=4, gradient_accumulation_steps=1)",
        "args.per_device_train_batch_size = 4"]


def test_an_assignment_is_changed_only_where_the_trainer_got_its_value(tmp_path):
    """A literal assigned in a branch the measured run did not take is not what the trainer got
    (the run's read-back says which value it had): left alone; where the run took it, changed."""
    script = tmp_path / "t.py"
    text = "args = SFTConfig(per_device_train_batch_size=1, gradient_accumulation_steps=4)\n" \
           "if LATE:\n    args.per_device_train_batch_size = 2\n"
    origin = {"file": str(script), "line": 1, "call": "SFTConfig"}
    for had, patched in ((1, [1]), (2, [1, 3])):
        script.write_text(text)
        applied = _applied({"per_device_train_batch_size": had, "gradient_accumulation_steps": 4}, SPLIT)
        found, _ = recommended_changes({"applied": applied, "args_origin": origin}, SPLIT)
        assert sorted({c.line for c in found.changes if c.field == "per_device_train_batch_size"}) == patched
        _apply(tmp_path, found.diff(str(tmp_path)))
        assert ("args.per_device_train_batch_size = 4" in script.read_text()) == (had == 2)


def test_positions_count_characters_not_bytes_and_quotes_are_kept(tmp_path):
    """ast counts UTF-8 bytes within a line: a literal after non-ASCII text is still replaced
    exactly; a string in double quotes stays in double quotes."""
    script = tmp_path / "t.py"
    script.write_text('args = SFTConfig(output_dir="ünïcödé", optim="adamw_torch", per_device_train_batch_size=1)\n')
    found = find_changes({"optim": "adamw_torch_fused", **SPLIT}, str(script), 1, "SFTConfig")
    _apply(tmp_path, found.diff(str(tmp_path)))
    assert script.read_text() == ('args = SFTConfig(output_dir="ünïcödé", optim="adamw_torch_fused", '
                                  'per_device_train_batch_size=4, gradient_accumulation_steps=1)\n')


def test_without_args_origin_the_one_call_passing_the_split_is_taken(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("a = SFTConfig(per_device_train_batch_size=1)\n")
    found = find_changes(SPLIT, None, script=str(script))
    assert [c.kind for c in found.changes] == [LITERAL, ADDED]
    script.write_text("a = SFTConfig(per_device_train_batch_size=1)\nb = SFTConfig(per_device_train_batch_size=2)\n")
    found = find_changes(SPLIT, None, script=str(script))
    assert not found.patchable and {c.kind for c in found.changes} == {ELSEWHERE}
    assert found.changes[0].words() == ("per_device_train_batch_size: 2 calls in t.py pass per_device_train_batch_size "
                                        "(line 1, line 2): which one the trainer received is not known: set it to 4 "
                                        "there")


def test_arguments_a_parser_built_are_named_at_its_call(tmp_path):
    """The arguments' origin is a parser's call (HfArgumentParser.parse_yaml_file): nothing is
    added to it; the words say where they were built."""
    script = tmp_path / "t.py"
    script.write_text("(args,) = HfArgumentParser(TrainingArguments).parse_yaml_file('own.yaml')\n")
    found = find_changes(SPLIT, str(script), 1, "TrainingArguments")
    assert not found.patchable
    assert found.changes[0].words() == (
        "per_device_train_batch_size: TrainingArguments built at t.py:1, by parse_yaml_file(...) at t.py:1, which "
        "does not pass per_device_train_batch_size: set it to 4 there")


def _applied(script_values: dict, planned: dict, how: str = "Trainer(args=...)") -> dict:
    return {k: {"script": script_values[k], "planned": v, "how": how if script_values[k] != v else
                "the script's own value", "replaced": script_values[k] != v} for k, v in planned.items()}


def test_which_fields_change_comes_from_what_the_runs_read_back(tmp_path):
    script = tmp_path / "hard.py"
    script.write_text(HARD)
    origin = {"file": str(script), "line": 4, "call": "SFTConfig"}
    planned = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2, "use_liger_kernel": False}
    own = {"per_device_train_batch_size": 1, "gradient_accumulation_steps": 4, "use_liger_kernel": False}
    found, why = recommended_changes({"applied": _applied(own, planned), "args_origin": origin}, planned)
    assert why == "" and [c.field for c in found.changes] == ["per_device_train_batch_size",
                                                             "gradient_accumulation_steps"]
    flags = {k: {"script": v, "planned": v, "how": "command line", "replaced": False} for k, v in planned.items()}
    assert recommended_changes({"applied": flags}, planned) == (
        None, "the script takes them from its command line: the recommendation's command is the handoff")
    same = {"applied": _applied(planned, planned), "args_origin": origin}
    assert recommended_changes(same, planned) == (None, "the script's own values are the recommendation's")
    # a run that says nothing of how its values arrived: the script's source alone
    found, _ = recommended_changes({}, planned, script=str(script))
    assert {c.field for c in found.changes} == {"per_device_train_batch_size", "gradient_accumulation_steps"}
    assert recommended_changes({}, {"per_device_train_batch_size": 1, "gradient_accumulation_steps": 4},
                               script=str(script)) == (None, "the script's own values are the recommendation's")


def _swept(folder: Path, script: Path, line: int = 4) -> Results:
    """A real CPU sweep's log (1x4, 2x2, 4x1), each run's read-back saying it swept ``script``
    whose own split is 1x4, built at ``line``: what the probe reports of such a script."""
    events = read_events([DATA / "cpu_tiny_sweep.jsonl"]).events
    for e in events:
        if e["type"] == "run_settings":
            mb, ga = e["settings"]["per_device_train_batch_size"], e["settings"]["gradient_accumulation_steps"]
            e["settings"]["applied"] = _applied({"per_device_train_batch_size": 1, "gradient_accumulation_steps": 4},
                                                {"per_device_train_batch_size": mb, "gradient_accumulation_steps": ga})
            e["settings"]["args_origin"] = {"file": str(script), "line": line, "call": "SFTConfig"}
    return Results(budget=None).extend(events)


def test_the_closing_lines_say_where_and_emit_patch_writes_the_diff(tmp_path, monkeypatch):
    """The closing lines of a script sweep name the file and line of each recommended value; the
    patch they point to, applied as they say, makes the script pass the recommended split; the
    JSON says the same."""
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "hard.py"
    script.write_text(HARD)
    patch = tmp_path / "p.diff"
    outputs = Outputs(str(tmp_path / "s.json"), "json", emit_patch=str(patch), cmd=["python", "hard.py"])
    done = outputs.write(_swept(tmp_path, script))
    best = done.answer.best[0]
    lines = done.closing_lines()
    assert (best["micro_batch"], best["grad_accum"]) != (1, 4)  # (so there is something to change)
    at = lines.index("where the script sets the recommendation's values itself (the sweep applied them inside its "
                     "trainer; the script as it is trains its own):")
    assert lines[at + 1:at + 4] == [
        f"  hard.py:6: per_device_train_batch_size=1 in SFTConfig(...): make it {best['micro_batch']}",
        f"  hard.py:7: gradient_accumulation_steps=4 in SFTConfig(...): make it {best['grad_accum']}",
        f"the change as a patch in {patch}: patch -p1 -d . -i {patch}"]
    subprocess.run(["patch", "-p1", "-d", ".", "-i", str(patch)], cwd=tmp_path, check=True, capture_output=True)
    kw = _keywords(script)[0]
    assert (kw["per_device_train_batch_size"], kw["gradient_accumulation_steps"]) == (best["micro_batch"],
                                                                                       best["grad_accum"])
    handoff = json.loads((tmp_path / "s.json").read_text())
    assert handoff["emitted_patch"] == str(patch)
    assert [(c["field"], c["line"], c["source"], c["in_patch"]) for c in handoff["script_changes"]] == [
        ("per_device_train_batch_size", 6, "1", True), ("gradient_accumulation_steps", 7, "4", True)]


def test_no_patch_where_there_is_nothing_a_patch_can_change(tmp_path, monkeypatch):
    """The script builds its arguments from **cfg: the lines say where, and no file is written;
    the same where the script parsed the flags (its command is the handoff)."""
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "own.py"
    script.write_text("cfg = load()\nargs = TrainingArguments(**cfg)\n")
    patch = tmp_path / "p.diff"
    outputs = Outputs(str(tmp_path / "s.csv"), emit_patch=str(patch), cmd=["python", "own.py"])
    lines = outputs.write(_swept(tmp_path, script, line=2)).closing_lines()
    assert lines[-1] == f"no patch: none of these is a literal in the source, so {patch} was not written"
    assert "  per_device_train_batch_size: set through **cfg in TrainingArguments(...) at own.py:2: change it " \
           "where cfg comes from, to 2" in lines
    assert not patch.exists()


@pytest.mark.parametrize("args, said", [
    ([], "--emit-patch: patches a swept script (tracetui sweep --emit-patch FILE -- python train.py): a built-in "
         "sweep has no script"),
    (["sweep", "--splits", "1x4", "--", "trl", "sft", "--model_name_or_path", "m"],
     "--emit-patch: trl sft takes the split on its command line: the recommendation's command is the handoff"),
])
def test_emit_patch_without_a_script_is_refused_in_one_line(tmp_path, args, said):
    cut = args.index("--") if "--" in args else len(args)
    argv = args[:cut] + ["--dry-run", "--emit-patch", tmp_path / "p.diff"] + args[cut:]
    proc = run_main(*argv, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and said in proc.stderr, proc.stderr
    assert not (tmp_path / "p.diff").exists()


def test_emit_patch_for_a_config_file_trainer_is_refused(tmp_path):
    (tmp_path / "lora.yml").write_text("base_model: m\nmicro_batch_size: 1\ngradient_accumulation_steps: 4\n")
    proc = run_main("sweep", "--dry-run", "--splits", "1x4", "--emit-patch", tmp_path / "p.diff", "--",
                    sys.executable, "-m", "axolotl.cli.train", tmp_path / "lora.yml", cwd=tmp_path)
    assert proc.returncode == 2 and "--emit-patch: axolotl takes the split from its config file" in proc.stderr, \
        proc.stderr
