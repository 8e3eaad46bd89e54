"""What is refused before anything runs, and what cannot hang or end in a traceback later: outputs
that are no regular file (a FIFO, a device, a folder, a socket) in every subcommand and for every
output flag; values the installed libraries refuse (the optimizer, the loss, a script's
scheduler), quotes in ``--vary``; names made from long values; step times no step takes; a
command that cannot start, a misspelt subcommand, data files that are not UTF-8 or empty; a
write that fails late (a full disk), and a wait after a stop signal that would never end."""

import contextlib
import json
import math
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tracetui.core.accepted import OPTIMIZERS, SCHEDULERS, SFT_LOSSES, accepted
from tracetui.core.config import SweepConfig, output_settings
from tracetui.events.schema import MAX_STEP_MS, OUT_OF_BOUNDS, make, parse_line
from tracetui.outputs.writer import Outputs
from tracetui.runner.runlog import make_log
from tracetui.events.log import read_events
from tracetui.core.trial import SLUG_CHARS, Trial
from tracetui.events.wire import SocketListener

from .conftest import CPU_TINY, ROOT, read_csv, run_main, wait_until


def _one_line(proc) -> str:
    """The one line a refusal is: exit 2, no traceback, nothing on stdout."""
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("tracetui: error: ")
    return proc.stderr.strip()


# ---------------------------------------------------------------------------------------------
# Outputs: nothing there but a regular file, and nothing that can hang


@contextlib.contextmanager
def _targets(folder: Path):
    """Every kind of thing at an output's path that is no regular file, made for real."""
    fifo = folder / "pipe.csv"
    os.mkfifo(fifo)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(folder / "s.sock"))
    try:
        yield {"a FIFO (named pipe)": fifo, "a device": Path("/dev/full"), "a folder": folder / "dir",
               "a socket": folder / "s.sock"}
    finally:
        sock.close()


#: every subcommand, each as far as its outputs are checked (nothing runs: they are refused first)
COMMANDS = {
    "the headless sweep": ["--export", "csv", "--splits", "2x2", "--steps", "3", "--warmup", "1"],
    "the monitor": ["--splits", "2x2", "--steps", "3", "--warmup", "1"],
    "sweep": ["sweep", "--export", "csv", "--splits", "2x2", "--", sys.executable, "train.py"],
    "run": ["run", "--export", "csv", "--", sys.executable, "train.py"],
    "show": ["show", str(CPU_TINY), "--export", "csv"],
    "watch": ["watch", "--export", "csv"],
}
#: the output flags each takes: -o, --steps-csv, and every setting declared an output
FLAGS = ["--output", "--steps-csv"] + [flag for _name, flag in output_settings()]


def _flags_of(command: str) -> list[str]:
    return FLAGS if command in ("the headless sweep", "the monitor", "sweep") else ["--output", "--steps-csv"]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_output_that_is_no_regular_file_is_refused_before_anything_runs(command, short_tmp):
    """A FIFO as ``-o`` ran the whole sweep and then waited on the FIFO for ever, deaf to SIGTERM;
    ``--emit-config /dev/full`` was a traceback after the sweep. Every kind of non-file, for every
    output flag, in every subcommand: one line naming the flag and what the path is, exit 2,
    before anything runs (no runs folder holds a log)."""
    (short_tmp / "dir").mkdir()
    (short_tmp / "train.py").write_text("print('never run')\n")
    assert "--emit-config" in FLAGS  # (declared an output in config.py)
    with _targets(short_tmp) as targets:
        for flag in _flags_of(command):
            for kind, target in targets.items():
                runs = short_tmp / "runs"
                args = COMMANDS[command]
                cut = args.index("--") if "--" in args else len(args)
                own = [flag, str(target)] + (["--runs-dir", str(runs)] if command != "show" else [])
                args = args[:cut] + own + args[cut:]
                line = _one_line(run_main(*args, cwd=short_tmp))
                assert line == f"tracetui: error: {flag}: {target} is {kind}, not a file; give the path of a file" + (
                    " (- for stdout)" if flag in ("--output", "--steps-csv") else ""), (command, flag, kind)
                assert not list(runs.glob("**/*.jsonl")) and not list(runs.glob("**/*.log"))
        assert targets["a FIFO (named pipe)"].is_fifo()  # left as it was


def test_a_fifo_put_at_an_output_later_is_never_opened(tmp_path):
    """A FIFO made at an output's path after the checks (while a sweep ran): the write refuses it
    in one line and never opens it (a reader is held open here, so a write into it would not
    wait but would arrive), and the answer is still said."""
    out, steps = tmp_path / "summary.csv", tmp_path / "steps.csv"
    outputs = Outputs(str(out), steps=str(steps))
    os.mkfifo(out)
    reader = os.open(out, os.O_RDONLY | os.O_NONBLOCK)
    try:
        done = outputs.write(_results())
        assert os.read(reader, 1024) == b""  # nothing was written into it
    finally:
        os.close(reader)
    assert out.is_fifo() and steps.is_file()
    lines = done.closing_lines()
    assert lines[0] == f"error: not written: {out} is a FIFO (named pipe), not a file"
    assert done.answer.verdict and done.answer.verdict in lines and done.answer.recommendation in lines


def _results():
    from tracetui.analysis import Results

    return Results(budget=None).extend(read_events([CPU_TINY]).events)


def test_a_write_that_fails_late_is_one_line_and_the_answer_is_still_said(full_disk, tmp_path):
    """Outputs on a disk that is full when they are written (the checks before found it
    writable): one line per output that failed, no traceback, and the verdict and the
    recommendation said as when the outputs are written; exit 1. The config of the
    recommendation (``--emit-config``) likewise, the summary written beside it."""
    proc = run_main("show", CPU_TINY, "--export", "csv", "-o", full_disk / "s.csv", "--steps-csv", full_disk / "t.csv")
    good = run_main("show", CPU_TINY, "--export", "csv", "-o", tmp_path / "s.csv")
    assert proc.returncode == 1 and good.returncode == 0 and "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("tracetui: error:")]
    assert errors == [f"tracetui: error: cannot write {full_disk / name} (No space left on device)"
                      for name in ("s.csv", "t.csv")]
    answer = [line for line in good.stderr.splitlines() if not line.startswith("tracetui: summary in")]
    assert answer and all(line in proc.stderr.splitlines() for line in answer)
    assert not [n for n in os.listdir(full_disk) if n.endswith(".tmp")]  # no temporary file left

    outputs = Outputs(str(tmp_path / "again.csv"), emit_config=str(full_disk / "best.yaml"), cfg=SweepConfig())
    done = outputs.write(_results())
    lines = done.closing_lines()
    assert f"error: cannot write {full_disk / 'best.yaml'} (No space left on device); the summary is written" in lines
    assert done.answer.recommendation in lines and read_csv(tmp_path / "again.csv")


def test_a_wait_that_never_ends_after_a_stop_signal_ends_all_the_same(tmp_path):
    """Whatever a command waits in after SIGTERM (here a read of a pipe nobody writes, as a
    write into a pipe nobody reads would), it ends: one line, exit 128 + the signal, once the
    backstop's time has passed (shortened here from its 60 s)."""
    code = textwrap.dedent("""
        import os
        from tracetui.session.signals import StopSignals

        r, w = os.pipe()
        signals = StopSignals(stop=lambda: None, backstop_s=0.5)
        print("waiting", flush=True)
        os.read(r, 1)  # never returns; each signal's handler runs, and it is retried
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "waiting"
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143
    assert err.startswith("tracetui: error: still not ended 0 s after SIGTERM") and err.count("\n") == 1, err


# ---------------------------------------------------------------------------------------------
# Values the installed libraries refuse, found before the first run


VALUE_CASES = [
    (["--optim", "bogus"], "--optim: 'bogus' is not an optimizer the installed transformers", OPTIMIZERS),
    (["--vary", "optim=adamw_torch,bogus_opt"], "--vary: optim: 'bogus_opt' is not an optimizer", OPTIMIZERS),
    (["--vary", "loss=nll,bogus"], "--vary: loss_type: 'bogus' is not a loss type the installed trl", SFT_LOSSES),
    (["--vary", "optim=adamw_torch," + "o" * 300], "--vary: optim: 'ooooooooo", OPTIMIZERS),
]


@pytest.mark.parametrize("args,said,declared,how", [
    (*case, how) for case in VALUE_CASES for how in ("headless", "dry run", "sweep", "sweep dry run")
    if case[0][0] == "--vary" or not how.startswith("sweep")])  # (a script gets the varied settings only)
def test_a_value_the_library_refuses_is_one_line_listing_what_it_takes(args, said, declared, how, tmp_path):
    """``--vary optim=adamw_torch,bogus_opt`` ran a whole trial before transformers refused it;
    ``--dry-run`` listed it with exit 0. Now it is one line naming the flag and listing every
    value the installed library takes, headless, in a dry run, and for a script's sweep; a
    300-character value is quoted cut short, and the line says it is no optimizer (it was "File
    name too long", blamed on the runs folder)."""
    (tmp_path / "train.py").write_text("from transformers import HfArgumentParser\n")
    head = ["sweep"] if how.startswith("sweep") else []
    tail = ["--", sys.executable, "train.py"] if how.startswith("sweep") else []
    dry = ["--dry-run"] if "dry" in how else []
    line = _one_line(run_main(*head, "--export", "csv", "--splits", "1x1", *args, *dry, "--runs-dir", tmp_path / "r",
                              *tail, cwd=tmp_path))
    assert said in line and len(line) < 200 + sum(len(v) + 2 for v in accepted(declared))
    assert line.endswith("; give one of " + ", ".join(accepted(declared)))
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").iterdir())


def test_the_attention_kernel_and_the_precision_are_one_list_each_and_refused_with_it(tmp_path):
    """The attention kernels are declared once (the knob's values; --help lists the same), and a
    kernel or a precision not among them, fixed or varied, is one line listing them."""
    from tracetui.cli.main import build_parser
    from tracetui.core.config import PRECISIONS
    from tracetui.core.knobs import KNOBS

    kernels = ", ".join(KNOBS["attn_implementation"].values)
    assert kernels in " ".join(build_parser().format_help().split())
    for args, listed in ((["--attn-implementation", "flash"], kernels), (["--vary", "attn=sdpa,flash"], kernels),
                         (["--precision", "bf8"], ", ".join(PRECISIONS))):
        line = _one_line(run_main("--export", "csv", *args, "--dry-run", cwd=tmp_path))
        assert f"is not one of {listed};" in line, line


@pytest.mark.slow
@pytest.mark.anywhere
def test_the_values_read_from_the_libraries_sources_are_what_the_libraries_take():
    """What tracetui reads from the installed sources without importing them is what the
    imported libraries themselves hold (the enum's values, the field's choices)."""
    import dataclasses

    from transformers.trainer_utils import SchedulerType
    from transformers.training_args import OptimizerNames
    from trl import SFTConfig

    assert accepted(OPTIMIZERS) == tuple(m.value for m in OptimizerNames)
    assert accepted(SCHEDULERS) == tuple(m.value for m in SchedulerType)
    loss = next(f for f in dataclasses.fields(SFTConfig) if f.name == "loss_type")
    assert accepted(SFT_LOSSES) == tuple(loss.metadata["choices"])


def test_a_scripts_own_optimizer_or_scheduler_is_checked_where_its_trainer_takes_them(tmp_path):
    """A script that parses its trainer's flags (``HfArgumentParser``), given ``--lr_scheduler_type
    cosin``: refused before any run (``sweep``, a dry run, ``run``), with the values and the
    near one; a script of its own flags is left alone."""
    hf, own = tmp_path / "hf.py", tmp_path / "own.py"
    hf.write_text("from transformers import HfArgumentParser\n")
    own.write_text("import argparse\n")
    for args in (["sweep", "--dry-run", "--", sys.executable, hf, "--lr_scheduler_type", "cosin"],
                 ["run", "--export", "csv", "--", sys.executable, hf, "--lr-scheduler-type=cosin"]):
        line = _one_line(run_main(*args, cwd=tmp_path))
        assert "--lr_scheduler_type: 'cosin' is not a scheduler the installed transformers" in line
        assert "(did you mean cosine?)" in line and line.endswith(", ".join(accepted(SCHEDULERS)))
    line = _one_line(run_main("sweep", "--dry-run", "--", sys.executable, hf, "--optim", "adamw_torh", cwd=tmp_path))
    assert "--optim: 'adamw_torh' is not an optimizer" in line
    proc = run_main("sweep", "--dry-run", "--splits", "1x1", "--", sys.executable, own, "--optim", "mine", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("args", [["--vary", 'optim="adamw_torch,sgd",adamw_torch_fused'],
                                  ["--vary", "attn=sdpa,'eager'"], ["--config", "vary.toml"]])
def test_quotes_in_vary_are_refused_not_split_inside(args, tmp_path):
    """``--vary 'optim="a,b",c'`` started runs named ``"a``, ``b"`` and ``c``; a TOML value holding
    a comma was split at it. No value of a setting holds a quote or a comma: refused, in one line."""
    (tmp_path / "vary.toml").write_text('[sweep.vary]\noptim = ["adamw_torch,sgd", "adamw_torch_fused"]\n')
    for dry in ([], ["--dry-run"]):
        line = _one_line(run_main("--export", "csv", *args, *dry, cwd=tmp_path))
        assert "quote" in line or "comma" in line, line


def test_names_made_of_long_values_are_bounded_and_kept_apart(tmp_path):
    """A run's id and file names are made of its trial: however long its values, at most
    SLUG_CHARS characters that any file system takes, and two trials that differ only past the
    cut still get names of their own. A log whose name is too long anyway is said as such, not
    as a runs folder that cannot be written."""
    a, b = (Trial(1, 1, settings={"optim": "x" * 300 + end}) for end in "ab")
    assert len(a.slug()) == len(b.slug()) == SLUG_CHARS and a.slug() != b.slug()
    assert Trial(4, 1, settings={"attn_implementation": "eager"}).slug() == "4x1_attn_implementation-eager"
    (tmp_path / (a.slug() + "#10.log")).write_text("")  # (as a run's log is named)
    why = make_log(tmp_path / ("y" * 300 + ".log"))
    assert why.startswith("its log's path is longer than the file system takes (304 bytes of name")
    assert "runs folder" not in why


def test_every_trial_the_checks_let_through_has_an_id_and_label_the_schema_takes():
    """The longest trial there can be (each speed setting varied, at its longest value the checks
    take) on the largest split: its run's events are not refused by the schema (its id once grew
    past the 200 characters a run id may have, its label past the 120 a label had)."""
    from tracetui.core.knobs import KNOBS, SHORT
    from tracetui.runner.sweep import new_sweep_id

    longest = {}
    for name, knob in KNOBS.items():
        values = knob.values or (accepted(knob.accepts) if knob.accepts else None) or (1024,)
        longest[name] = max(values, key=lambda v: len(str(v)))
    trial = Trial(65536, 1, 1024, tuple(longest.items()))
    event = make("run_started", f"{new_sweep_id()}/{trial.slug(SHORT)}#1000", label=trial.label(SHORT, "1000"),
                 **trial.fields())
    assert parse_line(json.dumps(event)) == (event, None)


# ---------------------------------------------------------------------------------------------
# Step times within what a step can take


def _bad_steps(rid: str) -> list[dict]:
    base = dict(step=5, warmup=False, wall_ms=100.0, data_ms=1.0, forward_ms=[40.0], backward_ms=[50.0])
    return [make("step", rid, **dict(base, **change)) for change in (
        {"wall_ms": 1e308}, {"wall_ms": -5.0}, {"wall_ms": 0.0}, {"wall_ms": MAX_STEP_MS * 1.01},
        {"forward_ms": [40.0, -1.0]}, {"data_ms": 1e300}, {"host_ms": 1e200}, {"t_end": 1e300})]


def test_step_times_no_step_takes_are_counted_as_bad_events(tmp_path):
    """A step of ``wall_ms`` 1e308 gave a 309-digit p90 in the CSV and a time before the first
    step of -1e305 s in the JSON; one of -5 was dropped uncounted. Every step time not above 0
    (the wall time), below 0 (a phase) or over a day is a bad event: skipped and counted by
    name, and every number written is finite and of a real step's size."""
    log = tmp_path / "events.jsonl"
    good = CPU_TINY.read_text()
    rid = next(json.loads(line)["run_id"] for line in good.splitlines() if '"step"' in line)
    bad = _bad_steps(rid) + [dict(make("notice", rid, message="m"), t=1e300)]
    log.write_text(good + "".join(json.dumps(e) + "\n" for e in bad))
    proc = run_main("show", log, "--export", "json", "-o", tmp_path / "s.json", "--steps-csv", tmp_path / "steps.csv")
    assert proc.returncode == 0, proc.stderr
    assert f"skipped {len(bad)} bad line(s): {len(bad) - 1} {OUT_OF_BOUNDS}, 1 schema mismatch" in proc.stderr
    data = json.loads((tmp_path / "s.json").read_text())

    def numbers(x):
        if isinstance(x, dict):
            return [n for v in x.values() for n in numbers(v)]
        if isinstance(x, list):
            return [n for v in x for n in numbers(v)]
        return [x] if isinstance(x, (int, float)) and not isinstance(x, bool) else []

    assert all(math.isfinite(n) and abs(n) < 1e12 for n in numbers(data))
    assert all(-1e6 < v < 1e6 for t in data["time"] for k, v in t.items() if k.endswith("_s") and v is not None)
    for row in read_csv(tmp_path / "steps.csv"):
        assert 0 < float(row["wall_ms"]) <= MAX_STEP_MS


def test_a_step_time_out_of_bounds_is_dropped_and_named_by_the_listener(short_tmp):
    """Over the attach socket (``watch``, a script's sweep) the same steps are dropped and
    counted under the same name, and the good ones around them still arrive."""
    got = []
    listener = SocketListener(str(short_tmp / "l.sock"), got.append).start()
    try:
        client = socket.socket(socket.AF_UNIX)
        client.connect(str(short_tmp / "l.sock"))
        steps = _bad_steps("r") + [make("step", "r", step=6, warmup=False, wall_ms=99.0)]
        client.sendall(b"".join(json.dumps(e).encode() + b"\n" for e in steps))
        client.close()
        wait_until(lambda: got and listener.dropped.get(OUT_OF_BOUNDS) == len(steps) - 1, 10)
    finally:
        listener.close()
    assert [e["wall_ms"] for e in got] == [99.0]
    assert parse_line(json.dumps(_bad_steps("r")[0]))[1] == OUT_OF_BOUNDS


# ---------------------------------------------------------------------------------------------
# Late tracebacks and wrong words


def test_a_command_that_cannot_start_is_one_line_up_front(tmp_path):
    """``tracetui sweep -- nonexistent-cmd`` was a 40-line FileNotFoundError, exit 1. A program
    that is not there, a file that is not executable, a folder: one line each, for ``sweep`` and
    ``run``, before anything runs."""
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    for name in ("sweep", "run"):
        for program, said in (("nonexistent-cmd", "nonexistent-cmd is not a command here"),
                              (str(script), f"{script} is not executable; make it so (chmod +x {script}), "
                                            f"or put its interpreter before it (sh {script})"),
                              (str(tmp_path), f"{tmp_path} is a folder, not a program")):
            line = _one_line(run_main(name, "--export", "csv", "--", program, cwd=tmp_path))
            assert line.startswith(f"tracetui: error: {name}: {said}"), line


def test_a_program_gone_after_the_checks_is_that_runs_failure_in_one_line(tmp_path):
    """A script's program removed while the sweep runs (it passed the checks): its next run
    fails with one line saying so, under its trial's name; nothing is raised out of the sweep."""
    import queue
    import threading

    from tracetui.planning.plan import RunSpec
    from tracetui.runner.supervise import CommandChild, supervise

    gone = tmp_path / "train.sh"
    spec = RunSpec("s/4x1", Trial(4, 1), 0)
    seen: list[dict] = []
    child = CommandChild([str(gone), "--steps", "3"], {}, queue.Queue(), tmp_path / "run.log")
    status = supervise(spec, child, seen.append, threading.Event(), None)
    assert status == ("error", f"could not start {gone} (No such file or directory)")
    assert [e["type"] for e in seen] == ["run_started", "run_failed"] and seen[0]["label"] == "4x1"


@pytest.mark.parametrize("word,near", [("swep", "sweep"), ("shwo", "show"), ("wach", "watch"), ("rn", "run"),
                                       ("train", None)])
def test_a_misspelt_command_says_what_it_is_closest_to(word, near):
    line = _one_line(run_main(word, "--export", "csv", "--steps", "3"))
    assert line.startswith(f"tracetui: error: {word} is not a command" + (f" (did you mean {near}?)" if near else ";"))


@pytest.mark.parametrize("name,data,said", [
    ("bad.jsonl", b'{"text": "fine"}\n{"text": "bad \xff\xfe here"}\n', "is not valid UTF-8: row 2 has byte 0xff at byte 15"),
    ("bad.csv", b"text\nfine\nnot \xc3( fine\n", "is not valid UTF-8: line 3 has byte 0xc3 at byte 5"),
    ("cut.txt", b"fine\nends in half a character \xe2\x82", "is not valid UTF-8: line 2 has byte 0xe2"),
    ("empty.jsonl", b"", "is empty; give a data file with rows of text in it"),
    ("blank.json", b"\n  \n", "is empty (blank lines alone)"),
    ("empty.parquet", b"", "is empty"),
])
def test_a_data_file_that_is_not_utf8_or_is_empty_is_one_line_naming_it(name, data, said, tmp_path):
    """A JSONL data set with invalid UTF-8 in a string was a 38-line pyarrow traceback, an empty
    one "(StopIteration)": one line naming the file and where, before any library loads it."""
    (tmp_path / name).write_bytes(data)
    line = _one_line(run_main("--export", "csv", "--dataset", name, "--dry-run", cwd=tmp_path))
    assert line.startswith(f"tracetui: error: --dataset: {name} {said}"), line


def test_invalid_utf8_is_found_across_the_reads_of_a_large_file(tmp_path):
    """The check reads a megabyte at a time: a character cut by a read's end is no fault, a bad
    byte past the first megabyte is found on its own line."""
    from tracetui.core.paths import data_file_problem

    row = '{"text": "' + "é" * 1000 + '"}\n'
    good = (row * 700).encode()  # 1.4 MB: reads end inside characters
    path = tmp_path / "d.jsonl"
    path.write_bytes(good)
    assert data_file_problem(str(path), rows=True) is None
    path.write_bytes(good + b'{"text": "\xff"}\n')
    assert data_file_problem(str(path), rows=True) == "is not valid UTF-8: row 701 has byte 0xff at byte 11 of the line"


@pytest.mark.slow
@pytest.mark.anywhere
def test_a_parquet_row_that_is_not_utf8_is_named(tmp_path):
    """Parquet is read by the loader, not scanned: a string column with bytes that are not
    UTF-8 is found as the rows are checked, and named, not a pyarrow traceback."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tracetui.core.config import ConfigError
    from tracetui.runner.sources import load_text_dataset

    texts = pa.array([b"fine", b"also fine", b"bad \xff"], type=pa.binary()).cast(pa.string(), safe=False)
    pq.write_table(pa.table({"text": texts}), tmp_path / "d.parquet")
    with pytest.raises(ConfigError, match=r"^--dataset: .*d\.parquet: row 3 is not valid UTF-8; save it as UTF-8$"):
        load_text_dataset(SweepConfig(dataset=str(tmp_path / "d.parquet")))
