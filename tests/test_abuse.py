"""Resources taken by others, and where tracetui listens: connections that never send an event
cannot keep a client out of a listener, and what it refuses or drops is said while it runs; a
run's log keeps its head and tail whatever the run writes; a socket folder another user can write
to is refused, naming the flag or the variable the path came from.

Real sockets, a real `tracetui watch` where what it says while it runs is the point, real
processes writing real output."""

import errno
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tracetui.events import wire
from tracetui.events.schema import make
from tracetui.runner import runlog
from tracetui.events.log import read_events
from tracetui.events.schema import dumps
from tracetui.events.sender import SocketSink
from tracetui.events.sockpath import ListenerError
from tracetui.events.wire import HELLO, SocketListener

from .conftest import ROOT, read_csv, run_main, wait_until

OTHER_UID = 12345


def _step(run="r1", step=1):
    return make("step", run, step=step, warmup=False, wall_ms=10.0, host_ms=10.0, data_ms=1.0, forward_ms=[4.0],
                backward_ms=[4.0], optimizer_ms=1.0, other_ms=0.0, loss=1.5, tokens=64, samples=1)


def _hold(path: str, n: int) -> list[socket.socket]:
    """``n`` connections that never send anything (those the listener's backlog has room for:
    a connect that would wait is given up, as a flood's would)."""
    held = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX)
        s.setblocking(False)
        try:
            s.connect(path)
        except OSError as exc:
            s.close()
            if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                raise
            time.sleep(0.001)  # (the listener takes the backlog meanwhile)
            continue
        held.append(s)
    return held


def _client_sends(path: str, tmp_path: Path, run: str) -> SocketSink:
    """A real callback's sink sending one step: it uses the socket only once greeted."""
    sink = SocketSink(path, str(tmp_path / f"{run}.jsonl"), quiet=True)
    sink.emit(_step(run))
    sink.close()
    return sink


def test_connections_that_send_nothing_never_keep_a_client_out(tmp_path):
    """1000 connections held open that never send: the listener serves at most 128 at once, and
    a real client that comes later is greeted and heard while the holders are all still there
    (it was accepted, then closed without a greeting, until they left). The drops are said while
    it runs."""
    got, said = [], []
    path = str(tmp_path / "d" / "w.sock")
    listener = SocketListener(path, got.append, on_notice=said.append).start()
    held = []
    try:
        held = _hold(path, 1000)
        assert len(held) > wire.MAX_CONNECTIONS
        wait_until(lambda: listener.connections >= len(held) - 64, 20)  # (what the backlog held, taken)
        sink = _client_sends(path, tmp_path, "real")
        wait_until(lambda: [e["run_id"] for e in got] == ["real"], 10)
        assert sink.why_file is None  # greeted, and sent over the socket
        wait_until(lambda: said, 15)  # (at once: the first drop is said as it happens)
        assert said[0].startswith(f"the socket {path} dropped ") and "connection that sent no event" in said[0]
        assert listener.dropped.get("connection over the limit", 0) == 0
    finally:
        for s in held:
            s.close()
        listener.close()


def test_a_connection_that_sends_no_event_is_closed_after_a_while(tmp_path):
    """Nothing at all, a part of a line, a line that is no event: each is closed after the
    listener's wait, and counted; a client that sent an event is kept."""
    got = []
    path = str(tmp_path / "d" / "w.sock")
    listener = SocketListener(path, got.append, silent_s=0.5).start()
    quiet, partial, garbage, client = (socket.socket(socket.AF_UNIX) for _ in range(4))
    try:
        for s in (quiet, partial, garbage, client):
            s.connect(path)
            s.settimeout(5)
            assert s.recv(64) == HELLO
        partial.sendall(b'{"v": 1, "type": "st')
        garbage.sendall(b"not an event\n")
        client.sendall((dumps(_step("kept")) + "\n").encode())
        wait_until(lambda: listener.dropped.get(wire.SILENT, 0) == 3, 10)
        for s in (quiet, partial, garbage):
            assert s.recv(64) == b""  # closed by the listener
        client.sendall((dumps(_step("kept", 2)) + "\n").encode())
        wait_until(lambda: len(got) == 2, 5)
    finally:
        for s in (quiet, partial, garbage, client):
            s.close()
        listener.close()


def test_past_the_limit_of_clients_a_new_one_is_refused_and_said(tmp_path):
    """Every place held by a client that sent an event: a new connection is closed without a
    greeting (its callback keeps its file), counted, and said."""
    got, said = [], []
    path = str(tmp_path / "d" / "w.sock")
    listener = SocketListener(path, got.append, max_connections=3, on_notice=said.append).start()
    clients = []
    try:
        for i in range(3):
            c = socket.socket(socket.AF_UNIX)
            c.connect(path)
            c.sendall((dumps(_step(f"c{i}")) + "\n").encode())
            clients.append(c)
        wait_until(lambda: len(got) == 3, 5)
        sink = _client_sends(path, tmp_path, "late")
        assert sink.why_file and "does not answer" in sink.why_file
        assert (tmp_path / "late.jsonl").read_text().count('"late"') == 1  # kept in its file
        wait_until(lambda: any("1 connection over the limit" in line for line in said), 15)
    finally:
        for c in clients:
            c.close()
        listener.close()


@pytest.mark.slow
def test_watch_says_while_it_runs_what_it_dropped(tmp_path, short_tmp):
    """`tracetui watch --export csv` under 300 held connections: a line on stderr while it runs
    (it said nothing until its exit); a real client's events reach the summary."""
    path = str(short_tmp / "w.sock")
    proc = subprocess.Popen([sys.executable, "-m", "tracetui", "watch", "--socket", path, "--export", "csv", "-o",
                             str(tmp_path / "out.csv"), "--runs-dir", str(tmp_path / "runs")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    held, lines = [], []
    try:
        assert "tracetui: watching" in proc.stderr.readline()
        held = _hold(path, 300)
        sink = SocketSink(path, str(tmp_path / "cb.jsonl"), quiet=True)
        sink.emit(make("run_started", "real", label="1x1", micro_batch=1, grad_accum=1, effective_batch=1,
                       world_size=1, pid=1, env={"device": "cpu"}))
        for k in range(1, 4):
            sink.emit(_step("real", k))
        sink.close()
        assert sink.why_file is None
        reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
        reader.start()
        wait_until(lambda: any("connection that sent no event" in line for line in lines), 30)
        assert proc.poll() is None  # said while it runs
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
        reader.join(10)
    finally:
        for s in held:
            s.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, lines  # (a watch ends so)
    said = [line for line in lines if "connection that sent no event" in line]
    assert said[0].startswith(f"tracetui: the socket {path} dropped "), said
    events = read_events(list((tmp_path / "runs").glob("watch-*/events.jsonl"))).events
    assert [e["type"] for e in events if e["run_id"] == "real"] == ["run_started", "step", "step", "step"]
    assert read_csv(tmp_path / "out.csv")[0]["trial"] == "1x1"


# ---- run logs ------------------------------------------------------------------------------------

def test_a_run_log_keeps_its_head_and_tail_and_says_what_was_cut(tmp_path):
    """A process writing 8 MB through the pipe: the log holds the first and last bytes whole, a
    line where the middle was cut with the exact count, never more than the bound on disk."""
    log = tmp_path / "run.log"
    out = runlog.RunOutput(log, head=100_000, tail=300_000, fresh=True)
    code = ("import sys\n"
            "for k in range(300): sys.stdout.write(''.join(f'line {i:07d} of the flood\\n' for i in range(k * 1000, k * 1000 + 1000)))\n"
            "sys.stdout.flush(); sys.stderr.write('the last word\\n')")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=out.writer, stderr=subprocess.STDOUT)
    out.started()
    biggest = 0
    while proc.poll() is None:
        biggest = max(biggest, log.stat().st_size if log.exists() else 0)
        time.sleep(0.01)
    cut = out.close()
    data = log.read_bytes()
    total = 300_000 * len("line 0000000 of the flood\n") + len("the last word\n")
    assert out.total == total
    assert biggest <= 100_000 + 2 * 300_000 + 400 + 65_536  # (the head, twice the tail, the cut's line, a read)
    head, _, rest = data.partition(b"\n[tracetui: ")
    line, _, tail = rest.partition(b"]\n")
    assert len(head) == 100_000 and data.startswith(b"line 0000000 of the flood\n")
    assert line.startswith(f"{cut} bytes".encode()) and b"cut here:" in line
    assert len(head) + cut + len(tail) == total  # every byte is kept or counted
    assert tail.endswith(b"line 0299999 of the flood\nthe last word\n") and tail.startswith(b"line ")
    assert 300_000 - 100 < len(tail) <= 300_000
    assert "cut from the middle" in out.notice()


@pytest.mark.slow
def test_a_swept_script_that_floods_its_output_leaves_a_capped_log_and_its_failure_is_read(tmp_path, monkeypatch):
    """`sweep -- script` whose script writes 3 MB and fails: the log stays within its bound (the
    constants made small), the run's notice says what was cut, and the failure is still read
    from the log's tail."""
    monkeypatch.setattr(runlog, "HEAD_BYTES", 200_000)
    monkeypatch.setattr(runlog, "TAIL_BYTES", 200_000)
    script = tmp_path / "flood.py"
    script.write_text("import sys\nfor i in range(100_000): print(f'noise {i:06d} ' + 'x' * 20)\n"
                      "print('ValueError: the real reason', file=sys.stderr)\nsys.exit(3)\n")
    proc = run_main("sweep", "--runs-dir", tmp_path / "runs", "--export", "json", "-o", tmp_path / "out.json",
                    "--splits", "1x1", "--effective-batch", 1, "--", sys.executable, script)
    logs = list((tmp_path / "runs").glob("*/*.log"))
    assert len(logs) == 1 and logs[0].stat().st_size < 200_000 + 200_000 + 300
    assert "exited with status 3 without reporting: ValueError: the real reason" in proc.stderr, proc.stderr
    total = 100_000 * len(f"noise 000000 {'x' * 20}\n") + len("ValueError: the real reason\n")
    assert f"1x1: its output was {runlog.size_text(total)}: its log {logs[0]} keeps the first 195.3 KiB and the " \
           "last 195.3 KiB" in proc.stderr, proc.stderr
    cut = int(logs[0].read_text().split("\n[tracetui: ", 1)[1].split(" ", 1)[0])
    assert f"; {runlog.size_text(cut)} cut from the middle" in proc.stderr


# ---- where tracetui listens ----------------------------------------------------------------------

def _folder(tmp_path: Path, mode: int, uid: int | None = None) -> Path:
    folder = tmp_path / f"shared-{mode:o}-{uid}"
    folder.mkdir()
    folder.chmod(mode)
    if uid is not None:
        os.chown(folder, uid, uid)
    return folder


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to another user")
def test_a_socket_folder_of_another_user_is_refused_naming_the_variable(tmp_path, monkeypatch):
    folder = _folder(tmp_path, 0o777, OTHER_UID)
    monkeypatch.setenv("TRACETUI_SOCKET", str(folder / "w.sock"))
    proc = run_main("watch", "--export", "csv", "--runs-dir", tmp_path / "runs")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"tracetui: error: TRACETUI_SOCKET: the socket folder {folder} belongs to another user (uid {OTHER_UID}), "
        "so another user could replace the socket; set TRACETUI_SOCKET to a path in a folder only you can write, "
        "or unset it"]
    assert not (folder / "w.sock").exists()


def test_a_socket_folder_others_may_write_to_is_refused(short_tmp):
    """Writable by others without the sticky bit (here or in a folder above), and not this
    user's or root's: refused, whoever runs the test; a sticky one (as /tmp) is taken."""
    wide = _folder(short_tmp, 0o777)
    for where, said in ((wide, "is writable by its group and others without the sticky bit (mode 777)"),
                        (_folder(wide, 0o700), f"is inside {wide}, which is writable by its group and others"),
                        (_folder(short_tmp, 0o770), "is writable by its group without the sticky bit (mode 770)")):
        with pytest.raises(ListenerError) as refused:
            SocketListener(str(where / "w.sock"), lambda e: None)
        assert str(refused.value).startswith(f"--socket: the socket folder {where} {said}")
        assert not (where / "w.sock").exists()
    sticky = _folder(short_tmp, 0o1777)
    SocketListener(str(sticky / "w.sock"), lambda e: None).start().close()
    proc = run_main("watch", "--socket", wide / "w.sock", "--export", "csv", "--runs-dir", short_tmp / "runs")
    assert proc.returncode == 2 and proc.stderr.startswith("tracetui: error: --socket: the socket folder"), proc.stderr


def test_a_socket_put_in_its_place_is_said_and_never_removed(tmp_path):
    """Someone else's socket put where the watch's was (the folder was theirs to write): the
    watch says so while it runs, and leaves their socket at its end (it removed it)."""
    said = []
    path = tmp_path / "d" / "w.sock"
    listener = SocketListener(str(path), lambda e: None, on_notice=said.append).start()
    theirs = socket.socket(socket.AF_UNIX)
    try:
        path.unlink()
        theirs.bind(str(path))
        wait_until(lambda: said, 10)
        assert said == [f"the socket {path} was removed or replaced by someone else: no script can reach this watch "
                        "any more (restart it, on a path in a folder only you can write)"]
    finally:
        listener.close()
        assert path.exists()  # theirs, left in place
        theirs.close()


def test_the_monitor_of_a_watch_says_what_its_listener_dropped_while_it_runs(tmp_path):
    """The monitor's status line has the listener's line as it happens (its header showed the
    count, and nothing said it)."""
    import asyncio

    from tracetui.events.log import EventLog
    from tracetui.tui.app import TraceApp
    from tracetui.tui.sources import WatchSource

    from .conftest import pilot_until

    path = str(tmp_path / "d" / "w.sock")
    app = TraceApp(WatchSource(path, EventLog(tmp_path / "events.jsonl")), out_path=str(tmp_path / "out.csv"))
    held = []

    async def go():
        async with app.run_test(size=(100, 30)) as pilot:
            held.extend(_hold(path, 300))
            await pilot_until(pilot, lambda: any("connection that sent no event" in m for _, m in app.notices))
            await pilot.press("q")

    try:
        asyncio.run(go())
    finally:
        for s in held:
            s.close()
    said = [(level, m) for level, m in app.notices if "connection that sent no event" in m]
    assert said[0][0] == "warning" and said[0][1].startswith(f"the socket {path} dropped ")
