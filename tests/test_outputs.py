"""One writer of every output, for every mode: each output flag honoured in each mode, the format
from the flag or the file's extension, and the answer (verdict, recommendation, what
--allow-result-changes and --allow-busy allow) the same on stderr, in the JSON, in the CSV and on
screen."""

import asyncio
import contextlib
import json
import os
import pty
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tracetui.analysis import Policy, Results, recommendation, summarise, verdict
from tracetui.outputs.writer import Answer, Outputs
from tracetui.events.log import read_events
from tracetui.tui.app import TraceApp
from tracetui.tui.sources import ReplaySource
from tracetui.tui.widgets import Verdict

from .conftest import ROOT, outcome, read_csv, run_cli, run_main, scenarios, wait_until

DATA = Path(__file__).parent / "data" / "h200_sweep.jsonl"


def _closing(stderr: str) -> list[str]:
    return [line[len("tracetui: "):] for line in stderr.splitlines() if line.startswith("tracetui: ")]


def _agrees(stderr: str, summary_json: Path, csv_path: Path | None = None) -> dict:
    """The closing lines, the JSON and the CSV say the same answer; returns the JSON."""
    data = json.loads(summary_json.read_text())
    lines = _closing(stderr)
    assert data["verdict"] and data["verdict"] in lines, (data["verdict"], lines)
    assert data["recommendation"] in lines, (data["recommendation"], lines)
    if csv_path is not None:
        rows = read_csv(csv_path)
        marked = [r["trial"] for r in rows if r["recommended"] == "True"]
        assert marked == [r["trial"] for r in data["splits"] if r["recommended"]]
        assert all(f"use {t} " in data["recommendation"] for t in marked)
    return data


def test_show_headless_honours_every_output_flag_and_says_the_answer_it_writes(tmp_path):
    out, steps = tmp_path / "s.json", tmp_path / "steps.csv"
    proc = run_main("show", DATA, "--export", "json", "-o", out, "--steps-csv", steps)
    assert proc.returncode == 0, proc.stderr
    data = _agrees(proc.stderr, out)
    assert data["splits"] and read_csv(steps), "the steps CSV holds every measured step"
    assert f"summary in {out}" in _closing(proc.stderr) and f"steps in {steps}" in _closing(proc.stderr)
    # the format follows the file's extension when --export is not given: JSON into .json ...
    (tmp_path / "again.json").unlink(missing_ok=True)
    proc = run_main("show", DATA, "--export", "csv", "-o", tmp_path / "plain.csv")
    assert proc.returncode == 0 and (tmp_path / "plain.csv").read_text().startswith("machine,")
    # ... and an existing output is refused (one line, exit 2) unless --force
    proc = run_main("show", DATA, "--export", "json", "-o", out)
    assert proc.returncode == 2 and "--output" in proc.stderr and "already exists" in proc.stderr
    assert run_main("show", DATA, "--export", "json", "-o", out, "--force").returncode == 0


def test_a_summary_format_is_one_entry_in_the_registry(tmp_path, monkeypatch):
    """A format registered once is an --export choice, the format of a file with its extension,
    and what the writer writes."""
    from tracetui.outputs import export

    def tsv(summary):
        return "".join("\t".join(str(r.get(k, "")) for k in ("trial", "recommended")) + "\n" for r in summary.rows)

    monkeypatch.setitem(export.FORMATS, "tsv", export.Format("tsv", (".tsv",), tsv))
    out = tmp_path / "x.tsv"
    proc = run_main("show", DATA, "--export", "tsv", "-o", out)
    assert proc.returncode == 0, proc.stderr
    lines = out.read_text().splitlines()
    assert lines and all(len(line.split("\t")) == 2 for line in lines) and any(line.endswith("\tTrue") for line in lines)
    assert f"summary in {out}" in _closing(proc.stderr)
    # the extension alone chooses it, as .json chooses JSON
    from tracetui.outputs.writer import output_format
    assert output_format(type("ns", (), {"output": str(out), "export": None})) == "tsv"
    monkeypatch.delitem(export.FORMATS, "tsv")
    assert run_main("show", DATA, "--export", "tsv", "-o", tmp_path / "y.tsv").returncode == 2


def test_a_symbolic_link_is_never_written_through(tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("mine")
    link = tmp_path / "out.csv"
    link.symlink_to(target)
    for flag in ("-o", "--steps-csv"):
        proc = run_main("show", DATA, "--export", "csv", flag, link, "--force",
                        *(() if flag == "-o" else ("-o", tmp_path / "x.csv")))
        assert proc.returncode == 2 and "symbolic link" in proc.stderr, proc.stderr
    assert target.read_text() == "mine" and link.is_symlink()


def test_two_flags_on_one_file_are_refused(tmp_path):
    proc = run_main("show", DATA, "--export", "csv", "-o", tmp_path / "a.csv", "--steps-csv", tmp_path / "a.csv")
    assert proc.returncode == 2 and "is also given to --output" in proc.stderr


def _busy_rows():
    rows = summarise(Results().extend(read_events([DATA]).events), None)
    for r in rows:
        r["busy"] = f"{r['trial']}: other processes used 1.5 CPU cores"
    return rows


def test_a_busy_machine_holds_the_answer_back_unless_allowed_and_then_says_so():
    rows = _busy_rows()
    assert "held back: the machine was busy" in verdict(rows)
    assert "no recommendation (held back" in recommendation(rows)
    allowed = Policy(allow_busy=True)
    line, rec = verdict(rows, allowed), recommendation(rows, allowed)
    assert "faster than" in line and "[measured on a busy machine: " in line
    assert rec.startswith("use ") and "[measured on a busy machine: " in rec


def test_the_monitor_writes_every_output_asked_for_and_shows_the_answer_it_writes(tmp_path):
    """Textual's pilot: the monitor on a recorded sweep with -o .json, --steps-csv and
    --allow-busy over rows measured busy: the JSON, the CSV of steps and the screen agree."""
    out, steps = tmp_path / "m.json", tmp_path / "steps.csv"
    events = read_events([DATA]).events
    busy = [dict(e, quiet=dict(e.get("quiet") or {}, other_cpu_cores=1.5)) if e["type"] == "run_finished" else e
            for e in events]

    class Live(ReplaySource):
        live = True  # a sweep's monitor: it writes as it closes

    outputs = Outputs(str(out), "json", steps=str(steps), policy=Policy(allow_busy=True))
    app = TraceApp(Live(busy), outputs=outputs)
    shown = []

    async def drive():
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.pause()
            app.redraw()
            shown.append(str(app.query_one(Verdict).full))
            await pilot.press("q")
            await pilot.pause()

    asyncio.run(drive())
    shown = shown[0]
    assert "[measured on a busy machine: " in shown
    data = json.loads(out.read_text())
    assert data["policy"] == {"allow_result_changes": False, "allow_busy": True}
    assert data["verdict"] in shown and data["recommendation"] in shown
    assert read_csv(steps)
    assert app.written is not None and data["verdict"] in app.written.closing_lines()


def _pty_command(args, cwd, size=(36, 120)):
    import fcntl
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "tracetui", *map(str, args)], cwd=cwd, stdin=slave, stdout=slave,
                            stderr=slave, close_fds=True, start_new_session=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT), TERM="xterm-256color"))
    os.close(slave)
    screen = bytearray()

    def drain():  # the terminal's reader: Textual blocks on a full pty otherwise
        while True:
            try:
                ready, _, _ = select.select([master], [], [], 0.5)
                if ready:
                    chunk = os.read(master, 65536)
                    if not chunk:
                        return
                    screen.extend(chunk)
                elif proc.poll() is not None:
                    return
            except OSError:
                return

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    return proc, master, screen, reader


@contextlib.contextmanager
def _terminal(args, cwd):
    """``tracetui ARGS`` in a pty: yields the process, the terminal's master end and what it
    has drawn so far; waits for the process to end (killed if the test failed first)."""
    proc, master, screen, reader = _pty_command(args, cwd)
    try:
        yield proc, master, screen
        proc.wait(timeout=300)
        reader.join(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(master)


def _monitor_in_a_terminal(folder: Path) -> dict:
    """The monitor of a real sweep in a pty, quit with q once it has given its answer."""
    runs = folder / "runs"
    args = ["--effective-batch", 2, "--splits", "1x2,2x1", "--steps", 8, "--warmup", 2, "--repeats", 1,
            "--seq-len", 32, "--runs-dir", runs, "-o", folder / "out.json", "--steps-csv", folder / "steps.csv",
            "--emit-config", folder / "best.yaml", "--allow-busy"]
    started = time.time()
    with _terminal(args, folder) as (proc, master, screen):
        def ended():
            logs = list(runs.glob("*/events.jsonl"))
            return proc.poll() is not None or (logs and '"ended"' in logs[0].read_text())
        wait_until(ended, timeout=600)
        assert proc.poll() is None, bytes(screen)[-2000:]
        wait_until(lambda: b"use " in screen or b"no clear difference" in screen or b"faster" in screen, timeout=60)
        time.sleep(2.0)  # the answer read on the screen: the time after the sweep is the monitor's, to its quit
        os.write(master, b"q")
        wait_until(lambda: proc.poll() is not None, timeout=120, interval=0.02)
        ended = time.time()
    tail = ended - (folder / "out.json").stat().st_mtime  # from the summary written to the process's end
    return dict(code=proc.returncode, text=bytes(screen).decode(errors="replace"), folder=folder,
                outside=ended - started, tail=tail)


def _run_one_command(folder: Path) -> dict:
    """``tracetui run -- python train_lora.py ...`` (its own split, 2x2)."""
    out = folder / "r.json"
    proc = run_cli("run", "--export", "json", "-o", out, "--warmup", 2, "--runs-dir", folder / "runs", "--",
                   sys.executable, ROOT / "examples" / "train_lora.py", "--no_trace", "--rows", 64,
                   "--per_device_train_batch_size", 2, "--gradient_accumulation_steps", 2, "--max_steps", 8,
                   "--output_dir", folder / "o", "--report_to", "none", "--use_cpu", "true")
    return dict(proc=proc, out=out, runs=folder / "runs")


scenarios(__name__, {"monitor": _monitor_in_a_terminal, "run": _run_one_command}, first=["monitor"])


@pytest.fixture(scope="module")
def commands(scenario_results):
    """The real commands above, as the session ran them: side by side, what each wrote and said
    is checked, not how long it took (--allow-busy: an answer even on a busy machine)."""
    return scenario_results[__name__]


@pytest.mark.slow
def test_the_monitor_of_a_real_sweep_in_a_terminal_writes_json_steps_and_config(commands):
    """The monitor, tracetui's default mode, in a real terminal (a pty): -o out.json is JSON,
    --steps-csv and --emit-config are written, and as it ends the command prints the answer."""
    got = outcome(commands, "monitor")
    text, folder = got["text"], got["folder"]
    assert got["code"] == 0, text[-3000:]
    data = json.loads((folder / "out.json").read_text())
    assert data["verdict"] and data["verdict"] in text.replace("\r", "")
    assert data["recommendation"].startswith("use ") and data["recommendation"] in text.replace("\r", "")
    assert read_csv(folder / "steps.csv")
    config = (folder / "best.yaml").read_text()
    assert "per_device_train_batch_size:" in config and data["emitted_config"] == str(folder / "best.yaml")
    # the account runs from the process's start to its quit, the monitor's time after the sweep
    # named as such (an account that ended with the sweep would be 2 s short): its total is the
    # command's time measured from outside but for what follows the summary written (Textual
    # giving the terminal back, the interpreter's exit: 0.3-0.5 s on a quiet 2-core machine, over
    # a second on a loaded one, so measured here, not assumed); a replay gives the same
    (spent,) = data["time"]
    assert spent["monitor_open_s"] >= 2.0 and "outputs_s" not in spent
    assert spent["command_s"] == pytest.approx(got["outside"] - got["tail"], abs=0.5)
    assert 0.0 <= got["tail"] < 5.0
    assert f"tracetui: time: {spent['command_s']:.1f} s, " in text
    (log,) = (folder / "runs").glob("*/events.jsonl")
    again = folder / "again.json"
    proc = run_cli("show", log, "--export", "json", "-o", again)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(again.read_text())["time"] == [spent]


def _send_events(path: str, events: list[dict]) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        s.sendall(b"".join(json.dumps(e).encode() + b"\n" for e in events))


def test_watch_headless_writes_json_by_extension_and_the_steps(tmp_path):
    sock = str(tmp_path / "w.sock")
    out, steps = tmp_path / "w.json", tmp_path / "steps.csv"
    proc = subprocess.Popen([sys.executable, "-m", "tracetui", "watch", "--export", "json", "-o", str(out),
                             "--steps-csv", str(steps), "--socket", sock, "--runs-dir", str(tmp_path / "runs")],
                            cwd=tmp_path, stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        wait_until(lambda: os.path.exists(sock) or proc.poll() is not None, timeout=60)
        events = read_events([DATA]).events
        _send_events(sock, events)
        log = lambda: list((tmp_path / "runs").glob("*/events.jsonl"))  # noqa: E731
        wait_until(lambda: log() and log()[0].read_text().count("\n") >= len(events), timeout=60)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err  # Ctrl-C is how a watch ends
    _agrees(err, out)
    assert read_csv(steps)


@pytest.mark.slow
def test_run_watches_one_unmodified_command_and_writes_its_outputs(commands):
    """``tracetui run -- CMD``: the command as written (its own split), measured through the
    probe injected into it, nothing of the sweep's; the command's output in a file."""
    got = outcome(commands, "run")
    proc = got["proc"]
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(got["out"].read_text())["splits"]
    assert row["trial"] == "2x2" and row["status"] == "ok" and row["steps_measured"] == 6
    logs = list(got["runs"].glob("run-*/command.log"))
    assert logs and "train_runtime" in logs[0].read_text()  # the command's own output, beside the events
    assert "the command exited with status 0" in proc.stderr


def test_run_refuses_a_command_that_is_not_there(tmp_path):
    proc = run_main("run", "--", "no-such-trainer-xyz", "--max_steps", "4")
    assert proc.returncode == 2 and "no-such-trainer-xyz is not a command here" in proc.stderr
    proc = run_main("run", "--", sys.executable, tmp_path / "missing.py")
    assert proc.returncode == 2 and "missing.py does not exist" in proc.stderr


@pytest.mark.slow
def test_the_probe_adds_nothing_that_can_shadow_the_users_modules(tmp_path):
    """What tracetui puts on a script's import path holds its sitecustomize and the tracetui
    package alone: no folder of this checkout (its ``tests``) can shadow a module of the user's."""
    from tracetui.runner.probeenv import probe_env

    env = probe_env(str(tmp_path / "s.sock"), 3)
    users = set(os.environ.get("PYTHONPATH", "").split(os.pathsep))  # (the user's own entries stay)
    ours = [p for p in env["PYTHONPATH"].split(os.pathsep) if p not in users]
    names = {n for p in ours for n in os.listdir(p)} - {"__pycache__", "__init__.py"}
    assert names == {"sitecustomize.py", "tracetui"}, names
    # a script started with that path finds tracetui's sitecustomize and the callback there (found, not
    # imported: importing it imports transformers, which every probed run of the suite does already)
    code = ("import importlib.util, sys, tracetui\n"
            "print(sys.modules['sitecustomize'].__file__, importlib.util.find_spec('tracetui.callbacks.attach').origin)")
    done = subprocess.run([sys.executable, "-c", code], env=dict(env, PYTHONPATH=env["PYTHONPATH"]), cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    site, attach = done.stdout.split()
    assert [str(Path(site).parent), str(Path(attach).parents[2])] == ours, (site, attach)


@pytest.mark.slow
def test_the_monitor_opens_before_the_checks_and_a_refusal_closes_it_with_one_line(tmp_path):
    """The first screen comes before the checks that import torch, transformers and TRL, and
    says what it waits on; a setting the checks refuse closes it with the one line, exit 2."""
    with _terminal(["--lora-targets", "nosuch_proj", "--runs-dir", tmp_path / "runs"], tmp_path) as (proc, _, screen):
        wait_until(lambda: b"the first run needs torch" in screen or proc.poll() is not None, timeout=120)
        assert b"the first run needs torch" in screen, bytes(screen)[-2000:]
    text = bytes(screen).decode(errors="replace")
    assert proc.returncode == 2, text[-2000:]
    assert "tracetui: error: --lora-targets: 'nosuch_proj' names no linear layer" in text
    assert not list((tmp_path / "runs").glob("*/events.jsonl"))  # nothing ran


def test_a_builtin_sweeps_json_names_its_command_and_emitted_config(tmp_path, monkeypatch):
    """The JSON of a built-in sweep holds ``command`` (``tracetui ARGS``: the command that runs
    the sweep again, where this process is it) and ``emitted_config`` (the file, or null), as a
    script sweep's does; a log read back knows no command of its sweep."""
    from tracetui.core import clock
    from tracetui.core.config import SweepConfig

    monkeypatch.setattr(clock, "argv", ["--splits", "1x2,2x1", "-o", "out path.json"])
    answer = Answer("", "", "", ({"trial": "2x1", "split": "2x1", "micro_batch": 2, "grad_accum": 1},), Policy())
    data = Outputs("-", cfg=SweepConfig(), emit_config=str(tmp_path / "best.yaml")).handoff_data(answer)
    assert data["command"] == "tracetui --splits 1x2,2x1 -o 'out path.json'"
    assert data["emitted_config"] == str(tmp_path / "best.yaml")
    data = Outputs("-", cfg=SweepConfig()).handoff_data(Answer("", "", "", (), Policy()))
    assert data["command"] == "tracetui --splits 1x2,2x1 -o 'out path.json'" and data["emitted_config"] is None
    assert Outputs("-").handoff_data(answer)["command"] is None  # show: no sweep command
    monkeypatch.setattr(clock, "argv", None)  # called from Python: no command line to give
    assert Outputs("-", cfg=SweepConfig()).handoff_data(answer)["command"] is None
