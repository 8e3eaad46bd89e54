"""Attach mode with real processes: the example script with TraceCallback, a real watcher, the
listener killed mid-run, `show` on two logs, `sweep` over a script, and an abused socket."""

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tracetui.events.sockpath import ListenerError
from tracetui.events.wire import SocketListener
from tracetui.events.schema import make
from tracetui.events.log import read_events

from .conftest import (wait_until as _wait_for, CPU_TINY, ROOT, cpu_memory_limit, in_turn, kill_left, outcome,
                       read_csv, run_cli, run_main, scenarios)

EXAMPLE = ROOT / "examples" / "train_lora.py"
DATA = Path(__file__).parent / "data" / "h200_sweep.jsonl"


def _script(*args, env=None, **kw):
    full = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.Popen([sys.executable, str(EXAMPLE), *map(str, args)], env=full, cwd=kw.get("cwd"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _watch(sock, out, runs, cwd):
    return subprocess.Popen([sys.executable, "-m", "tracetui", "watch", "--socket", str(sock), "--export", "csv",
                             "-o", str(out), "--runs-dir", str(runs)], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))



def _script_reports_to_watch(folder: Path) -> dict:
    """The example script with TraceCallback (8 steps) reporting to a real ``tracetui watch``,
    which is then stopped with Ctrl-C."""
    sock = folder / "sock" / "w.sock"
    watch = _watch(sock, folder / "w.csv", folder / "runs", folder)
    script = None
    try:
        _wait_for(sock.exists, 30)
        modes = stat.S_IMODE(sock.stat().st_mode), stat.S_IMODE(sock.parent.stat().st_mode)
        script = _script("--max_steps", 8, env={"TRACETUI_SOCKET": str(sock)}, cwd=folder)
        out, _ = script.communicate(timeout=300)
        watch.send_signal(signal.SIGINT)
        _, err = watch.communicate(timeout=60)
    finally:
        kill_left(watch, script)
    return dict(modes=modes, script=script.returncode, out=out, watch=watch.returncode, err=err, sock=sock,
                csv=folder / "w.csv", runs=folder / "runs")


def _listener_killed_mid_run(folder: Path) -> dict:
    """The example script (15 steps) reporting to a real watcher that is SIGKILLed once three
    steps are in its log."""
    sock = folder / "sock" / "w.sock"
    runs = folder / "runs"
    watch = _watch(sock, folder / "w.csv", runs, folder)
    script = None
    try:
        _wait_for(sock.exists, 30)
        script = _script("--max_steps", 15, env={"TRACETUI_SOCKET": str(sock)}, cwd=folder)

        def steps_seen():
            logs = list(runs.glob("*/events.jsonl"))
            return bool(logs) and logs[0].read_text().count('"type":"step"') >= 3

        _wait_for(steps_seen, 120)
        watch.kill()  # the listener goes away mid-run
        watch.wait()
        out, _ = script.communicate(timeout=300)
    finally:
        kill_left(watch, script)
    return dict(script=script.returncode, out=out, folder=folder)


@pytest.fixture(scope="module")
def scripts(scenario_results):
    """The example script's runs above, as the session ran them: side by side, real processes
    that spend their time starting up, and nothing they check depends on how busy the machine is."""
    return scenario_results[__name__]


@pytest.fixture(scope="module")
def swept_scripts(tmp_path_factory):
    """The script sweeps of test_a_script_... below, run in this process one after another (their
    runs forked from its fork server)."""
    return in_turn(tmp_path_factory, {"search": _script_sweep_searching, "trains twice": _script_that_trains_twice})


@pytest.mark.slow
def test_script_with_callback_reports_to_watch(scripts):
    got = outcome(scripts, "watched")
    assert got["modes"] == (0o600, 0o700)  # the socket, and its folder
    assert got["script"] == 0, got["out"]
    assert "events kept in" not in got["out"]  # a watcher was listening
    assert got["watch"] == 0, got["err"]
    rows = read_csv(got["csv"])
    assert len(rows) == 1 and rows[0]["status"] == "ok" and rows[0]["split"] == "2x2"
    assert int(rows[0]["steps_measured"]) == 5
    events = read_events(list(got["runs"].glob("*/events.jsonl"))).events
    assert sum(e["type"] == "step" for e in events) == 8
    assert not got["sock"].exists()  # the watcher cleans up its socket


@pytest.mark.slow
def test_listener_killed_mid_run_script_finishes_jsonl_complete(scripts):
    got = outcome(scripts, "listener killed")
    out = got["out"]
    assert got["script"] == 0, out
    assert "events kept in" in out
    path = out.split("events kept in ", 1)[1].split()[0]
    events = read_events([got["folder"] / path]).events
    types = [e["type"] for e in events]
    assert types[0] == "run_started" and types[-1] == "run_finished"
    assert [e["step"] for e in events if e["type"] == "step"] == list(range(1, 16))


def test_show_two_logs_side_by_side(tmp_path):
    out = tmp_path / "both.csv"
    proc = run_cli("show", DATA, CPU_TINY, "--export", "csv", "-o", out)
    assert proc.returncode == 0, proc.stderr
    rows = read_csv(out)
    assert {r["machine"] for r in rows} == {"NVIDIA H200", "CPU"}
    assert len(rows) == 6
    h200 = {r["split"]: r for r in rows if r["machine"] == "NVIDIA H200"}
    assert float(h200["4x1"]["speedup_vs_slowest"]) == pytest.approx(3.83, abs=0.01)
    assert "on NVIDIA H200" in proc.stderr and "on CPU" in proc.stderr


@pytest.mark.slow
@pytest.mark.quiet  # (a stopping rule at work: it runs last, on a quiet machine)
def test_sweep_runs_unmodified_script_per_split_and_stops_it_once_settled(tmp_path):
    """`tracetui sweep` runs an unmodified script (no TraceCallback in it: --no_trace) once per
    split, with the split's flags, and measures it through the probe it attaches; the stopping
    rule reaches the script's own Trainer: 4x1 first, to its cap at an unreachable 0.01%; 1x4
    ends its training early once its rank is settled. (Rows of 32 tokens: on a CPU 1x4 is then
    about twice as slow as 4x1, a gap that settles under load too; at 128 it was 1.4x.)"""
    out = tmp_path / "s.csv"
    # (a command of its own: its fork server starts with it, as the first run's wait for its imports shows)
    proc = run_cli("sweep", "--splits", "1x4,4x1", "--warmup", 1, "--until-confident", 0.01, "--min-steps", 5,
                    "--export", "csv", "-o", out, "--runs-dir", tmp_path / "runs", "--", sys.executable, EXAMPLE,
                    "--no_trace", "--max_steps", 40, "--max_length", 32, "--logging_steps", 100, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = read_csv(out)
    assert [(r["split"], r["status"]) for r in rows] == [("1x4", "ok"), ("4x1", "ok")]
    rows = {r["split"]: r for r in rows}
    # each run trained with its own split (read back from its Trainer), all but the warm-up step measured
    assert [(rows[s]["micro_batch"], rows[s]["grad_accum"]) for s in ("1x4", "4x1")] == [("1", "4"), ("4", "1")]
    # an HfArgumentParser script takes the split from its command line, as before
    assert all(r["split_applied"] == "command line" for r in rows.values()), rows
    assert rows["4x1"]["steps_measured"] == "39" and rows["4x1"]["stopped_early"] == "False"
    assert rows["1x4"]["stop_reason"] == "settled" and 5 <= int(rows["1x4"]["steps_measured"]) < 39
    # where each run's start went: the interpreter, the script's own imports, model and data, the
    # trainer's set-up; they add up to process start -> training. Both runs forked from tracetui's
    # server: the first (4x1) waited for its imports, the second found them done
    parts = {s: [float(r[k]) for k in ("start_interpreter_s", "start_script_s", "start_trainer_s")]
             for s, r in rows.items()}
    for s, r in rows.items():
        assert abs(sum(parts[s]) - float(r["start_s"])) < 0.01 and all(p >= 0 for p in parts[s]), r
        assert r["start_imports_s"] == "", r
    assert parts["4x1"][0] > parts["1x4"][0], parts  # 4x1 ran first
    assert "each run starts forked from tracetui's server" in proc.stderr


def test_sweep_refuses_fixed_split_flags():
    proc = run_cli("sweep", "--splits", "1x4", "--", sys.executable, EXAMPLE, "--gradient_accumulation_steps=4")
    assert proc.returncode == 2
    assert "already sets --gradient_accumulation_steps" in proc.stderr


def _event(run="r1", step=1):
    return make("step", run, step=step, warmup=False, wall_ms=10.0, host_ms=10.0, data_ms=1.0, forward_ms=[4.0],
                backward_ms=[4.0], optimizer_ms=1.0, other_ms=0.0)


def test_socket_drops_and_counts_garbage_and_stays_responsive(tmp_path):
    got = []
    path = str(tmp_path / "d" / "w.sock")
    listener = SocketListener(path, got.append).start()
    try:
        # half-open and silent clients must not block anyone
        idle = [socket.socket(socket.AF_UNIX) for _ in range(20)]
        for s in idle:
            s.connect(path)
        stalled = socket.socket(socket.AF_UNIX)
        stalled.connect(path)
        stalled.sendall(b'{"v": 1, "type": "step", "run_id": "half')  # never finished
        bad = socket.socket(socket.AF_UNIX)
        bad.connect(path)
        bad.sendall(b"not json at all\n")
        bad.sendall(b"\xff\xfe\x00garbage\n")
        bad.sendall(json.dumps({"v": 1, "type": "step", "run_id": "x", "t": 1}).encode() + b"\n")  # schema
        bad.sendall(json.dumps({"v": 99, "type": "step"}).encode() + b"\n")  # unknown version
        bad.sendall(b'{"pad": "' + b"x" * 200_000 + b'"}\n')  # oversized
        # a flood from several clients at once
        def flood(i):
            c = socket.socket(socket.AF_UNIX)
            c.connect(path)
            payload = b"".join(json.dumps(_event(f"flood{i}", k)).encode() + b"\n" for k in range(1, 501))
            c.sendall(payload + b"junk\n" * 100)
            c.close()

        threads = [threading.Thread(target=flood, args=(i,)) for i in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # a good client is still served promptly
        good = socket.socket(socket.AF_UNIX)
        good.connect(path)
        good.sendall(json.dumps(_event("good")).encode() + b"\n")
        _wait_for(lambda: any(e["run_id"] == "good" for e in got), 10)
        _wait_for(lambda: listener.accepted == 5 * 500 + 1, 10)
        _wait_for(lambda: listener.dropped.get("invalid JSON", 0) == 2 + 5 * 100, 10)
        assert listener.dropped["schema mismatch"] == 2
        assert listener.dropped["oversized line"] == 1
        for s in idle + [stalled, bad, good]:
            s.close()
        _wait_for(lambda: listener.dropped.get("unterminated line", 0) == 1, 10)
        assert "dropped" in listener.describe_drops()
    finally:
        listener.close()


def test_stale_socket_replaced_live_one_not_stolen(tmp_path):
    path = str(tmp_path / "d" / "w.sock")
    os.makedirs(os.path.dirname(path), mode=0o700)
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(path)
    dead.close()  # a watcher that died left its socket file behind
    first = SocketListener(path, lambda e: None).start()
    try:
        with pytest.raises(ListenerError, match="another tracetui watch is listening"):
            SocketListener(path, lambda e: None)
        proc = run_cli("watch", "--socket", path, "--export", "csv", "--runs-dir", tmp_path / "runs")
        assert proc.returncode == 2 and "another tracetui watch is listening" in proc.stderr
        assert not list((tmp_path / "runs").glob("*"))  # a refused watch leaves nothing behind
    finally:
        first.close()


def test_under_a_temp_dir_too_long_for_a_socket_tracetuis_sockets_go_to_tmp(tmp_path, monkeypatch):
    """A cluster job's scratch $TMPDIR can be longer than a socket path may be (107 bytes): a
    script sweep's and a run's private socket, and watch's default one, go to /tmp instead of
    failing; a $TMPDIR that leaves room is kept."""
    import shutil
    import tempfile

    from tracetui.events.sockpath import default_socket_dir, private_socket

    long_tmp = tmp_path / ("scratch-" + "x" * 90)
    long_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long_tmp))
    folder, path = private_socket("tracetui-sweep-", "sweep.sock")
    try:
        assert Path(folder).parent == Path("/tmp") and stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        listener = SocketListener(path, lambda e: None).start()
        client = socket.socket(socket.AF_UNIX)
        client.connect(path)  # a real socket, listening
        client.close()
        listener.close()
    finally:
        shutil.rmtree(folder)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    assert default_socket_dir().parent == Path("/tmp")
    monkeypatch.setattr(tempfile, "tempdir", "/var/tmp")
    folder, _ = private_socket("tracetui-run-", "run.sock")
    assert Path(folder).parent == Path("/var/tmp")
    os.rmdir(folder)


def test_a_script_sweep_dry_run_lists_the_commands_and_starts_nothing(tmp_path, capsys):
    from tracetui.cli.main import main

    assert main(["sweep", "--dry-run", "--splits", "1x4,4x1", "--repeats", "1", "--runs-dir", str(tmp_path / "runs"),
                 "--", "python", str(EXAMPLE), "--no_trace"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"run 1: 1x4 (effective batch 4): python {EXAMPLE} --no_trace --per_device_train_batch_size 1 "
                   "--gradient_accumulation_steps 4",
                   f"run 2: 4x1 (effective batch 4): python {EXAMPLE} --no_trace --per_device_train_batch_size 4 "
                   "--gradient_accumulation_steps 1", out[2]]
    # how the runs would start: ``python`` here may be another interpreter than tracetui's
    assert out[2].startswith("each run starts ")
    assert not list(tmp_path.glob("runs/*/events.jsonl"))


def _script_sweep_searching(folder: Path) -> dict:
    out = folder / "s.csv"
    limit = cpu_memory_limit(0.59)  # (2 GiB with torch's CPU build)
    proc = run_main("sweep", "--search", "--memory-limit", limit, "--effective-batch", 8, "--export", "csv", "-o", out,
                    "--runs-dir", folder / "runs", "--", sys.executable, EXAMPLE, "--no_trace", "--max_steps", 4,
                    "--max_length", 32, cwd=folder)
    return dict(proc=proc, out=out, runs=folder / "runs")


@pytest.mark.slow
def test_a_script_sweep_searching_keeps_its_memory_probes_out_of_the_summary(swept_scripts):
    """The script's callback cannot know why a run was made: the sweep marks its memory probes
    (1x1, 2x1), which are then no rows of the summary, as in tracetui's own sweeps."""
    got = outcome(swept_scripts, "search")
    proc = got["proc"]
    assert proc.returncode == 0, proc.stderr
    assert {r["effective_batch"] for r in read_csv(got["out"])} == {"8"}
    events = read_events(list(got["runs"].glob("*/events.jsonl"))).events
    probes = [e for e in events if e["type"] == "run_started" and e.get("why", "").startswith("memory probe")]
    assert sorted(e["label"] for e in probes) == ["1x1", "2x1"]


def _script_that_trains_twice(folder: Path) -> dict:
    twice = folder / "two_stages.py"
    twice.write_text(
        "import runpy, sys\n"
        f"example = {str(EXAMPLE)!r}\n"
        "argv = [example, *sys.argv[1:]]\n"
        "for stage in (1, 2):\n"
        "    sys.argv = list(argv)\n"
        "    runpy.run_path(example, run_name='__main__')\n"
        "print('both stages done', flush=True)\n")
    out, runs = folder / "t.csv", folder / "runs"
    proc = run_main("sweep", "--splits", "4x1", "--warmup", 1, "--export", "csv", "-o", out, "--runs-dir", runs,
                    "--", sys.executable, twice, "--no_trace", "--max_steps", 6, "--max_length", 32,
                    "--logging_steps", 100, cwd=folder)
    return dict(proc=proc, out=out, runs=runs)


@pytest.mark.slow
def test_a_script_that_trains_twice_is_measured_once(swept_scripts):
    """A script with two trainings in one process (a second stage, a second Trainer): under
    `tracetui sweep` both used to report as the same run, their steps pooled into one row. The
    first is measured; the later one stops after its first step, and the run says why."""
    got = outcome(swept_scripts, "trains twice")
    proc, runs = got["proc"], got["runs"]
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_csv(got["out"])
    assert [(r["split"], r["status"], r["steps_measured"]) for r in rows] == [("4x1", "ok", "5")]
    events = read_events([next(runs.glob("*/events.jsonl"))]).events
    assert sum(e["type"] == "run_started" for e in events) == 1
    assert [e["step"] for e in events if e["type"] == "step"] == [1, 2, 3, 4, 5, 6]
    notices = [e["message"] for e in events if e["type"] == "notice" and "trained again" in e.get("message", "")]
    assert len(notices) == 1 and "only the first is measured" in notices[0]
    assert "both stages done" in next(runs.glob("*/4x1*.log")).read_text()


scenarios(__name__, {"watched": _script_reports_to_watch, "listener killed": _listener_killed_mid_run},
          first=["watched", "listener killed"])
