"""Hostile and unlucky inputs, each injected for real: a broken or foreign client on the attach
socket, a listener that stops reading, an unsafe socket folder, a file size limit and a full
disk under the event log, a huge line for `show`, NaN in the outputs, a huge or empty data set,
and config inputs that used to mean nothing."""

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracetui.events import wire
from tracetui.events.sender import SocketSink
from tracetui.events.wire import HELLO, SocketListener
from tracetui.events.schema import make, parse_line, validate
from tracetui.events.log import EventLog, read_events

from .conftest import ROOT, read_csv, run_cli, wait_until

DATA = Path(__file__).parent / "data" / "h200_sweep.jsonl"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
NOBODY = 65534


def _strict_json(text: str):
    """Parse as a strict reader would: bare NaN/Infinity are errors."""
    def refuse(name):
        raise ValueError(f"bare {name}")

    return json.loads(text, parse_constant=refuse)


def _started(run="r1", label="1x1", **kw):
    mb, ga = (int(x) for x in label.split("x"))
    return make("run_started", run, label=label, micro_batch=mb, grad_accum=ga, effective_batch=mb * ga, world_size=1,
                rank=0, pid=1, env={"device": "cpu"}, config={"steps": 3, "warmup": 0}, **kw)


def _step(run="r1", step=1, **kw):
    base = dict(step=step, warmup=False, wall_ms=10.0, host_ms=10.0, data_ms=1.0, forward_ms=[4.0],
                backward_ms=[4.0], optimizer_ms=1.0, other_ms=0.0, loss=1.5, tokens=64, samples=1)
    base.update(kw)
    return make("step", run, **base)


#: peak memory of this process image in KiB (unlike ru_maxrss, not inherited from pytest at fork)
_HWM = "int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])"


def _line(event) -> bytes:
    return json.dumps(event).encode() + b"\n"


@pytest.fixture
def request_cleanup():
    todo = []
    yield todo
    for fn in todo:
        fn()


def _client(path) -> socket.socket:
    c = socket.socket(socket.AF_UNIX)
    c.connect(str(path))  # blocking: waits while the listener's backlog is full
    c.settimeout(10)
    return c


# ---------------------------------------------------------------------------------------------
# The attach socket


def test_watch_survives_lines_that_used_to_kill_it(tmp_path):
    """A line of 60 000 `[` (RecursionError in the parser) and a schema-valid run_started whose
    config is a list used to kill the listener thread while `watch` stayed up, deaf. Now they
    are dropped and counted, and both the same client and another one are still heard."""
    sock, out, runs = tmp_path / "s" / "w.sock", tmp_path / "w.csv", tmp_path / "runs"
    watch = subprocess.Popen([sys.executable, "-m", "tracetui", "watch", "--socket", sock, "--export", "csv",
                              "-o", out, "--runs-dir", runs], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        wait_until(sock.exists, 30)
        bad, other = _client(sock), _client(sock)
        bad.sendall(b"[" * 60_000 + b"\n")
        bad.sendall(_line(dict(_started("evil"), config=[1, 2])))
        bad.sendall(_line(dict(_started("evil2"), env={"gpu_name": 7})))
        bad.sendall(_line(_started("a")) + b"".join(_line(_step("a", k)) for k in (1, 2, 3)))
        other.sendall(_line(_started("b", label="1x2")) + _line(_step("b", 1)))
        bad.sendall(_line(make("run_finished", "a", steps=3)))
        other.sendall(_line(make("run_finished", "b", steps=1)))
        bad.close()
        other.close()

        def logged():
            logs = list(runs.glob("*/events.jsonl"))
            return bool(logs) and logs[0].read_text().count('"run_finished"') == 2

        wait_until(logged, 20)
        late = _client(sock)  # a client after the bad lines is still served
        late.sendall(_line(_started("c", label="2x1")) + _line(_step("c", 1)) + _line(make("run_finished", "c")))
        late.close()
        wait_until(lambda: list(runs.glob("*/events.jsonl"))[0].read_text().count('"run_finished"') == 3, 20)
    finally:
        watch.send_signal(signal.SIGINT)
        _, err = watch.communicate(timeout=60)
    assert watch.returncode == 0, err
    assert "dropped 1 invalid JSON, 2 schema mismatch" in err
    rows = read_csv(out)
    assert sorted(r["split"] for r in rows) == ["1x1", "1x2", "2x1"]
    assert {r["status"] for r in rows} == {"ok"}


def test_a_receiver_that_raises_costs_that_event_only(tmp_path):
    got = []

    def on_event(e):
        if e["run_id"] == "boom":
            raise RuntimeError("receiver choked")
        got.append(e)

    listener = SocketListener(str(tmp_path / "d" / "w.sock"), on_event).start()
    try:
        c = _client(listener.path)
        c.sendall(_line(_step("boom")) + _line(_step("fine")))
        wait_until(lambda: [e["run_id"] for e in got] == ["fine"], 10)
        assert listener.dropped == {"event not handled": 1}
        c.close()
    finally:
        listener.close()


def test_a_notice_receiver_that_raises_is_counted_and_said_and_the_listener_serves_on(tmp_path):
    got = []

    def on_notice(line):
        raise RuntimeError("notice receiver choked")

    listener = SocketListener(str(tmp_path / "d" / "w.sock"), got.append, on_notice=on_notice).start()
    try:
        c = _client(listener.path)
        c.sendall(b"not json\n")
        fault = "listener error in its checks of silent connections and the socket (RuntimeError)"
        wait_until(lambda: listener.dropped.get(fault, 0) >= 1, 10)
        c.sendall(_line(_step("fine")))
        wait_until(lambda: [e["run_id"] for e in got] == ["fine"], 10)
        assert fault in listener.describe_drops()
        c.close()
    finally:
        listener.close()


@pytest.mark.parametrize("field, value", [
    ("config", [1]), ("config", {"steps": "ten"}), ("config", {"a": {"b": {"c": {"d": 1}}}}), ("env", "cpu"),
    ("env", {"gpu_name": 3}), ("env", {"gpu_total_gib": "big"}), ("settings", [1]), ("quiet", 5),
    ("pid", "1"), ("world_size", 0), ("effective_batch", True), ("precision", 16), ("gpu", -1),
    ("max_steps", 1.5), ("label", "[/bold]"), ("micro_batch", 0), ("rank", -1),
])
def test_run_started_fields_are_type_checked(field, value):
    event, why = parse_line(json.dumps(dict(_started(), **{field: value})))
    assert event is None and why == "schema mismatch"


@pytest.mark.parametrize("etype, field, value", [
    ("step", "loss", "1.0"), ("step", "tokens", 1.5), ("step", "forward_ms", [1, "x"]), ("step", "rank", True),
    ("step", "host_ms", None), ("step", "t_end", "now"), ("step", "unprobed", 1), ("gpu", "power_w", "hi"),
    ("gpu", "mem_used_gib", None), ("notice", "level", 3), ("run_finished", "stopped_early", "no"),
    ("run_finished", "steps", "3"), ("run_finished", "quiet", [1]), ("run_failed", "kind", "weird"),
    ("step", "extra_field", [[[[[[1]]]]]]),
])
def test_optional_fields_of_every_event_are_type_checked(etype, field, value):
    events = {"step": _step(), "gpu": make("gpu", "r", util=1.0, mem_used_gib=1.0, mem_total_gib=2.0),
              "notice": make("notice", "r", message="m"), "run_finished": make("run_finished", "r"),
              "run_failed": make("run_failed", "r", kind="oom", message="m")}
    good = events[etype]
    assert validate(dict(good)) is not None
    event, why = parse_line(json.dumps(dict(good, **{field: value})))
    assert event is None and why == "schema mismatch"


def test_numbers_that_are_not_finite_become_null_or_are_refused():
    event, _ = parse_line(b'{"v":1,"type":"step","run_id":"r","t":1,"step":1,"warmup":false,'
                          b'"wall_ms":5,"loss":NaN,"peak_mem_gib":1e999}')
    assert event["loss"] is None and event["peak_mem_gib"] is None
    assert parse_line(b'{"v":1,"type":"step","run_id":"r","t":1,"step":1,"warmup":false,"wall_ms":Infinity}')[0] is None


_scalar = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=False, allow_infinity=False),
                    st.text(max_size=12))
_plain = st.recursive(_scalar, lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=6), c, max_size=3)),
                      max_leaves=6)


@pytest.mark.slow
@pytest.mark.anywhere
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["run_started", "step", "gpu", "notice", "run_finished", "run_failed"]),
                          st.sampled_from(["r1", "r2"]),
                          st.dictionaries(st.sampled_from(
                              ["label", "micro_batch", "grad_accum", "config", "env", "world_size", "rank", "gpu", "step",
                               "warmup", "wall_ms", "loss", "tokens", "forward_ms", "backward_ms", "data_ms", "util",
                               "mem_used_gib", "mem_total_gib", "message", "kind", "steps", "stop_reason",
                               "stopped_early", "max_steps", "t_end", "samples", "peak_mem_gib", "effective_batch"]),
                              _plain, max_size=8)), max_size=12))
def test_whatever_passes_the_schema_can_be_analysed_and_exported(items):
    """The listener's consumers (analysis, the exports, the headless progress lines) never raise
    on an event the schema let through: what arrives from outside is checked enough."""
    from tracetui.analysis import Results, summarise
    from tracetui.session.progress import progress_printer
    from tracetui.analysis import Policy
    from tracetui.outputs.export import steps_csv, summary_csv, summary_json
    from tracetui.outputs.writer import Answer

    base = {"run_started": _started, "step": _step,
            "gpu": lambda r: make("gpu", r, util=1.0, mem_used_gib=1.0, mem_total_gib=2.0),
            "notice": lambda r: make("notice", r, message="m"), "run_finished": lambda r: make("run_finished", r),
            "run_failed": lambda r: make("run_failed", r, kind="error", message="m")}
    results = Results()
    printer = progress_printer(0, 0)
    for etype, run, fields in items:
        event, _ = parse_line(json.dumps(dict(base[etype](run), **fields)))
        if event is not None:
            results.add(event)
            printer(event)
    rows = summarise(results, None)
    summary_csv(rows)
    _strict_json(summary_json(rows, Answer.of(rows, Policy())))
    steps_csv(results)


def _sink_events(n):
    return [_started("sink")] + [_step("sink", k) for k in range(1, n + 1)] + [make("run_finished", "sink", steps=n)]


def _file_events(path):
    return [e for e in read_events([path]).events]


def test_callback_falls_back_when_the_listener_never_serves(tmp_path, capfd, monkeypatch):
    """A socket that accepts connections into its backlog but is never served (the state a dead
    listener thread left behind): the callback used to believe it was connected and lose
    every event. Now it keeps them all in its file."""
    monkeypatch.setattr(wire, "HELLO_TIMEOUT_S", 0.2)  # (no greeting ever comes: waited for less)
    path = str(tmp_path / "deaf.sock")
    deaf = socket.socket(socket.AF_UNIX)
    deaf.bind(path)
    deaf.listen(8)
    try:
        sink = SocketSink(path, str(tmp_path / "ev.jsonl"))
        for e in _sink_events(5):
            sink.emit(e)
        sink.close()
        assert "does not answer; events kept in" in capfd.readouterr().err
        assert [e["type"] for e in _file_events(tmp_path / "ev.jsonl")] == ["run_started"] + ["step"] * 5 + ["run_finished"]
    finally:
        deaf.close()


def _stalling_server(path, read_bytes):
    """A listener that greets, reads ``read_bytes`` and then stops reading (stays connected)."""
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(1)
    held = []

    def serve():
        conn, _ = srv.accept()
        held.append(conn)
        conn.sendall(HELLO)
        got = 0
        while got < read_bytes:
            chunk = conn.recv(min(65536, read_bytes - got))
            if not chunk:
                break
            got += len(chunk)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return srv, held, t


@pytest.mark.parametrize("n_steps", [20, 4000], ids=["stops-reading-before-the-end", "stops-reading-mid-run"])
def test_callback_notices_a_listener_that_stopped_reading(tmp_path, capfd, monkeypatch, n_steps):
    """20 events fit in the socket's buffer (noticed at the end: they are still unread); 4000
    do not (noticed when a send moves nothing). Either way every event is in the file."""
    # (the listener never reads again: how long the callback gives it is not what is tested)
    monkeypatch.setattr(wire, "SEND_TIMEOUT_S", 0.3)
    monkeypatch.setattr(wire, "DRAIN_TIMEOUT_S", 0.3)
    path = str(tmp_path / "stall.sock")
    srv, held, t = _stalling_server(path, 2000)
    try:
        sink = SocketSink(path, str(tmp_path / "ev.jsonl"))
        for e in _sink_events(n_steps):
            sink.emit(e)
        sink.close(timeout=20)
        assert "stopped reading; events kept in" in capfd.readouterr().err
        steps = [e["step"] for e in _file_events(tmp_path / "ev.jsonl") if e["type"] == "step"]
        assert steps == list(range(1, n_steps + 1))
    finally:
        for c in held:
            c.close()
        srv.close()


def test_callback_to_a_healthy_listener_writes_no_file(tmp_path):
    got = []
    listener = SocketListener(str(tmp_path / "d" / "w.sock"), got.append).start()
    try:
        sink = SocketSink(listener.path, str(tmp_path / "ev.jsonl"))
        for e in _sink_events(50):
            sink.emit(e)
        sink.close()
        wait_until(lambda: len(got) == 52, 10)
        assert sink.why_file is None and not (tmp_path / "ev.jsonl").exists()
    finally:
        listener.close()


def _default_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "TRACETUI_SOCKET")}
    env.update(TMPDIR=str(tmp_path), PYTHONPATH=str(ROOT))
    return env


def _run_watch(tmp_path, *extra, env=None):
    return subprocess.run([sys.executable, "-m", "tracetui", "watch", "--export", "csv", "-o", str(tmp_path / "w.csv"),
                           "--runs-dir", str(tmp_path / "runs"), *map(str, extra)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env=env or dict(os.environ, PYTHONPATH=str(ROOT)))


@pytest.mark.parametrize("owner", ["me", pytest.param("other", marks=pytest.mark.skipif(not IS_ROOT, reason="needs root to chown"))])
def test_default_socket_folder_that_others_could_write_is_refused(short_tmp, owner):
    tmp_path = short_tmp  # (the $TMPDIR of the watch: where its default socket folder is)
    folder = tmp_path / f"tracetui-{os.getuid()}"
    folder.mkdir()
    if owner == "other":
        os.chown(folder, NOBODY, NOBODY)
        folder.chmod(0o700)
    else:
        folder.chmod(0o777)
    proc = _run_watch(tmp_path, env=_default_env(tmp_path))
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and str(folder) in line and "rm -r" in line
    assert ("another user" in line) if owner == "other" else ("writable by group or others" in line)
    assert stat.S_IMODE(folder.stat().st_mode) == (0o700 if owner == "other" else 0o777)  # left as found
    # the callback does not trust a socket there either: its events go to its file
    code = textwrap.dedent(f"""
        from tracetui.events.sender import SocketSink
        from tracetui.events.sockpath import default_socket_path
        from tracetui.events.schema import make
        s = SocketSink(default_socket_path(), {str(tmp_path / 'cb.jsonl')!r})
        s.emit(make("notice", "r", message="m")); s.close()
    """)
    cb = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                        env=_default_env(tmp_path), cwd=tmp_path)
    assert "is not trusted" in cb.stderr and (tmp_path / "cb.jsonl").exists()


def test_watch_never_removes_a_file_or_changes_a_folder_it_did_not_make(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    folder.chmod(0o755)
    victim = folder / "notes.txt"
    victim.write_text("precious")
    proc = _run_watch(tmp_path, "--socket", victim)
    assert proc.returncode == 2
    assert "notes.txt exists and is a regular file, not a socket" in proc.stderr and proc.stderr.count("\n") == 1
    assert victim.read_text() == "precious"
    # a fresh socket path in a folder of the user's: served, and the folder keeps its mode
    listener = SocketListener(str(folder / "w.sock"), lambda e: None).start()
    listener.close()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755


@pytest.mark.skipif(not IS_ROOT, reason="needs root to run a peer as another user")
def test_peers_of_another_user_are_refused_at_both_ends(request_cleanup):
    """The listener checks each client's uid; the callback checks the listener's."""
    import shutil
    import tempfile

    got = []
    # pytest's own temp folders are private (0700): the other user needs a way in
    shared = Path(tempfile.mkdtemp(prefix="tracetui-test-", dir="/tmp"))
    shared.chmod(0o755)
    request_cleanup.append(lambda: shutil.rmtree(shared, ignore_errors=True))
    tmp_path = shared
    folder = tmp_path / "d"
    folder.mkdir(mode=0o777)
    folder.chmod(0o1777)  # (sticky: a folder another user may write to is refused without it)
    listener = SocketListener(str(folder / "w.sock"), got.append).start()
    os.chmod(listener.path, 0o666)  # let the other user reach it: only the uid check stands
    try:
        code = textwrap.dedent(f"""
            import os, socket, json, time
            os.setgid({NOBODY}); os.setuid({NOBODY})
            c = socket.socket(socket.AF_UNIX); c.connect({listener.path!r})
            try:
                c.sendall({_line(_step('intruder'))!r})
            except OSError:
                pass  # already closed by the listener
        """)
        subprocess.run([sys.executable, "-c", code], check=True, timeout=30, cwd="/")
        wait_until(lambda: listener.dropped.get("connection from another user") == 1, 10)
        assert got == []
    finally:
        listener.close()
    # and a listener run by another user does not get the callback's events
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o777)
    theirs.chmod(0o1777)
    sock = theirs / "w.sock"
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from tracetui.events.wire import SocketListener  # imported first: the other user cannot read /root
        import tracetui.events.schema, array, fcntl, termios, selectors, struct
        os.setgid({NOBODY}); os.setuid({NOBODY})
        l = SocketListener({str(sock)!r}, lambda e: print("GOT", flush=True)).start()
        os.chmod({str(sock)!r}, 0o666)
        print("ready", flush=True)
        sys.stdin.read()
        l.close()
    """)
    other = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/")
    try:
        assert other.stdout.readline().strip() == "ready"
        sink = SocketSink(str(sock), str(tmp_path / "cb.jsonl"), quiet=True)
        sink.emit(_step("mine"))
        sink.close()
        assert "runs as another user" in (sink.why_file or "")
        assert [e["run_id"] for e in _file_events(tmp_path / "cb.jsonl")] == ["mine"]
    finally:
        other.stdin.close()
        out = other.stdout.read()
        other.wait(timeout=30)
    assert "GOT" not in out


def test_connections_and_buffered_bytes_are_capped(tmp_path):
    """200 half-open clients each holding 60 KB of an unfinished line: at most
    MAX_CONNECTIONS are served at once (none has sent an event: the oldest is closed for each
    newer one), and the partial lines held stay under MAX_BUFFERED."""
    got = []
    listener = SocketListener(str(tmp_path / "d" / "w.sock"), got.append).start()
    clients = []
    try:
        for _ in range(200):
            c = _client(listener.path)
            clients.append(c)
            try:
                c.sendall(b'{"pad": "' + b"x" * 60_000)
            except OSError:  # closed by the listener: over the limit
                pass
        over = 200 - wire.MAX_CONNECTIONS
        wait_until(lambda: listener.dropped.get(wire.SILENT, 0) == over, 20)
        wait_until(lambda: listener.connections == 200 and listener.dropped.get("listener buffer full", 0) > 0, 20)
        assert listener.connections - listener.dropped[wire.SILENT] == wire.MAX_CONNECTIONS
        assert listener.buffered <= wire.MAX_BUFFERED
        for c in clients:
            c.close()
        clients.clear()
        wait_until(lambda: listener.buffered == 0, 20)
        good = _client(listener.path)
        good.sendall(_line(_step("good")))
        wait_until(lambda: [e["run_id"] for e in got] == ["good"], 10)
        good.close()
    finally:
        for c in clients:
            c.close()
        listener.close()


def test_out_of_file_descriptors_the_listener_backs_off_instead_of_spinning(tmp_path):
    """With the fd limit reached, accept() fails at once while a connection waits in the
    backlog: the old listener retried at once, at 100% of a core. It must pause, and serve the
    waiting clients once descriptors are free again."""
    code = textwrap.dedent(f"""
        import os, resource, socket, sys, time
        from tracetui.events.wire import SocketListener
        listener = SocketListener({str(tmp_path / 'd' / 'w.sock')!r}, lambda e: None).start()
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        filler = []
        try:
            while True:
                filler.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            pass
        for fd in filler[-3:]:
            os.close(fd)
        del filler[-3:]
        # these take the last three descriptors, all three before any connects (an accepted
        # connection would take one of them)
        clients = [socket.socket(socket.AF_UNIX) for _ in range(3)]
        for c in clients:
            c.connect(listener.path)
        cpu0, t0 = time.process_time(), time.monotonic()
        time.sleep(1.5)  # a measuring window, not a wait for anything
        cpu = (time.process_time() - cpu0) / (time.monotonic() - t0)
        errors = listener.accept_errors
        for fd in filler:
            os.close(fd)
        deadline = time.monotonic() + 10
        while listener.connections < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        print(cpu, errors, listener.connections)
        listener.close()
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    cpu, errors, served = proc.stdout.split()
    assert 1 <= int(errors) <= 40, proc.stdout
    assert float(cpu) < 0.3, proc.stdout
    assert int(served) == 3


# ---------------------------------------------------------------------------------------------
# Data on disk


def test_event_log_at_the_file_size_limit_never_tears_a_line(tmp_path):
    """RLIMIT_FSIZE makes the write that crosses the limit short and the next ones fail: the
    part that got in is taken back out, and exactly the events not in the file are reported."""
    path = tmp_path / "events.jsonl"
    code = textwrap.dedent(f"""
        import json, resource, signal
        from tracetui.events.log import EventLog
        from tracetui.events.schema import make
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (5000, 5000))
        log = EventLog({str(path)!r})
        ok = [log.append(make("notice", "r", message=f"event {{i}} " + "x" * (i % 97))) for i in range(120)]
        log.close()
        print(json.dumps(dict(ok=ok, failed=log.failed_lines, error=log.error, incomplete=log.incomplete,
                              message=log.incomplete_message())))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    data = path.read_bytes()
    assert data.endswith(b"\n") and len(data) <= 5000
    lines = data.decode().splitlines()
    assert all(json.loads(line)["type"] == "notice" for line in lines)  # no torn line
    written = [int(json.loads(line)["message"].split()[1]) for line in lines]
    assert written == [i for i, ok in enumerate(res["ok"]) if ok]
    assert res["failed"] == res["ok"].count(False) > 0 and res["incomplete"]
    assert "file too large" in res["error"] and str(path) in res["message"]


def test_event_log_on_a_full_disk_says_so(tmp_path):
    log = EventLog("/dev/full")
    assert log.append(make("notice", "r", message="m")) is False
    log.close()
    assert log.failed_lines == 1 and "No space left on device" in log.error


def test_event_log_ends_a_torn_tail_before_appending(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps(_step("a")) + "\n" + '{"v":1,"type":"st')  # torn by an earlier crash
    log = EventLog(path)
    assert log.append(_step("a", 2))
    log.close()
    report = read_events([path])
    assert [e["step"] for e in report.events] == [1, 2] and report.skipped == 1


def test_show_of_a_huge_file_without_newline_reads_it_in_chunks(tmp_path):
    huge = tmp_path / "huge.jsonl"
    with open(huge, "wb") as fh:
        fh.truncate(300 * 2**20)  # 300 MB, no newline (sparse)
    code = textwrap.dedent(f"""
        import sys
        from tracetui.cli.main import main
        rc = main(["show", {str(huge)!r}, {str(DATA)!r}, "--export", "csv", "-o", {str(tmp_path / 'o.csv')!r}])
        print(rc, {_HWM})
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    rc, peak_kib = map(int, proc.stdout.split())
    assert rc == 0, proc.stderr
    assert "1 over-long line" in proc.stderr and len(read_csv(tmp_path / "o.csv")) == 3
    assert peak_kib < 150 * 1024, peak_kib  # far below the file's 300 MB


def test_nan_never_reaches_the_jsonl_or_the_json_export(tmp_path):
    log = EventLog(tmp_path / "events.jsonl")
    assert log.append(_started("n"))
    for k in (1, 2):
        assert log.append(_step("n", k, loss=float("nan"), peak_mem_gib=float("inf")))
    assert log.append(make("run_finished", "n", train_runtime_s=float("nan")))
    log.close()
    text = (tmp_path / "events.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text
    for line in text.splitlines():
        _strict_json(line)
    # a log from an older tracetui, with bare NaN in it, exports as strict JSON too
    old = tmp_path / "old.jsonl"
    old.write_text(text.replace('"loss":null', '"loss":NaN'))
    assert "NaN" in old.read_text()
    proc = run_cli("show", old, "--export", "json", "-o", tmp_path / "o.json")
    assert proc.returncode == 0, proc.stderr
    out = _strict_json((tmp_path / "o.json").read_text())
    assert out["splits"][0]["split"] == "1x1"


def test_json_export_writes_null_for_values_that_are_not_finite():
    from tracetui.analysis import Policy, Results, summarise
    from tracetui.outputs.export import summary_json
    from tracetui.outputs.writer import Answer

    rows = summarise(Results().extend(read_events([DATA]).events), None)
    rows[0]["final_loss"] = float("nan")
    rows[0]["loss_drift_pct"] = float("inf")
    out = _strict_json(summary_json(rows, Answer.of(rows, Policy())))
    assert out["splits"][0]["final_loss"] is None and out["splits"][0]["loss_drift_pct"] is None


@pytest.mark.slow
@pytest.mark.anywhere
def test_a_huge_row_is_cut_before_it_is_tokenised(tmp_path):
    """One 8 MB row at --seq-len 256: tokenised whole it takes about 1.6 GB (a 50 MB row took
    10 GB); cut first, what the run tokenises stays small."""
    data = tmp_path / "big.jsonl"
    data.write_text(json.dumps({"text": "ab" * 4_000_000}) + "\n" + json.dumps({"text": "hello"}) + "\n")
    code = textwrap.dedent(f"""
        from tracetui.core.config import SweepConfig
        from tracetui.runner.sources import build_dataset, byte_tokenizer
        tok = byte_tokenizer()
        tok("warm up the tokenizer")
        ds = build_dataset(SweepConfig(dataset={str(data)!r}, seq_len=256), 300)
        before = {_HWM}
        ids = [tok(t, truncation=True, max_length=256)["input_ids"] for t in ds["text"]]
        grown = {_HWM} - before
        print(len(ids[0]), len(ds[0]["text"]), grown // 1024)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr
    n_ids, n_chars, grown_mib = map(int, proc.stdout.split())
    assert n_ids == 256 and n_chars <= 256 * 64
    assert grown_mib < 100, proc.stdout


def test_cutting_by_characters_keeps_every_token_seq_len_can_use():
    from tracetui.runner.sources import byte_tokenizer, char_limit

    tok = byte_tokenizer()
    text = "é漢 " * 20_000  # multi-byte characters: several byte tokens each
    limit = char_limit(64, tok)
    full = tok(text, truncation=True, max_length=64)["input_ids"]
    assert tok(text[:limit], truncation=True, max_length=64)["input_ids"] == full
    assert limit >= 64 * max(len(t) for t in tok.get_vocab())


@pytest.mark.slow
def test_a_data_set_of_empty_rows_is_refused_up_front(capsys, tmp_path):
    from tracetui.cli.main import main

    data = tmp_path / "empty.jsonl"
    data.write_text('{"text": ""}\n{"text": null}\n{"text": ""}\n')
    code = main(["--export", "csv", "--dataset", str(data), "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # (above it: the data set loader's own progress)
    assert code == 2 and last.startswith("tracetui: error: --dataset: every row of") and "--text-field" in last
    assert not list((tmp_path / "runs").glob("*/*"))  # nothing started
    data.write_text('{"text": 1}\n{"text": 2}\n')
    code = main(["--export", "csv", "--dataset", str(data)])
    assert code == 2 and "--text-field: 'text' of" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Inputs that used to be accepted and mean nothing


@pytest.mark.parametrize("toml, needle", [
    ("steps = 5\n[sweep]\nwarmup = 1\n", "steps at the top level beside [sweep] would be ignored"),
    ("[sweep]\nsteps = 5\n[swep]\nwarmup = 1\n", "[swep] is not a table tracetui reads"),
    ("[swep]\nsteps = 5\n", "[swep] is not a table tracetui reads"),
    ("sweep = 3\n", "sweep must be a table"),
])
def test_toml_that_would_be_ignored_is_refused(capsys, tmp_path, toml, needle):
    from tracetui.cli.main import main

    cfg = tmp_path / "c.toml"
    cfg.write_text(toml)
    code = main(["--export", "csv", "--config", str(cfg)])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.startswith("tracetui: error: --config:") and err.count("\n") == 1


@pytest.mark.parametrize("value", ["", " , "])
def test_empty_splits_name_the_splits_flag(capsys, value):
    from tracetui.cli.main import main

    code = main(["--export", "csv", "--splits", value])
    err = capsys.readouterr().err
    assert code == 2 and "--splits:" in err and "names no split" in err and "--max-micro-batch" not in err


def test_show_says_what_a_path_is_when_it_is_not_a_log(tmp_path):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    loop = tmp_path / "loop.jsonl"
    os.symlink(loop, loop)
    dangling = tmp_path / "gone.jsonl"
    os.symlink(tmp_path / "nowhere", dangling)
    for path, needle in ((fifo, "is a FIFO (named pipe), not a file"), (loop, "is a loop of symbolic links"),
                         (tmp_path, "is a folder, not a file"), (dangling, "is a symbolic link to nothing"),
                         (tmp_path / "missing.jsonl", "does not exist")):
        proc = run_cli("show", path, "--export", "csv", timeout=60)
        assert proc.returncode == 2, (path, proc.stderr)
        assert needle in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def test_show_reads_gzip_logs_and_keeps_what_precedes_a_cut(tmp_path):
    """Archived logs are gzipped (docs/results): ``show`` reads them as they are; a gzip stream
    cut short keeps the events before the cut and says so in one counted line."""
    import gzip
    from pathlib import Path

    from tracetui.events.log import read_events

    src = Path(__file__).resolve().parent / "data" / "h200_sweep.jsonl"
    plain = read_events([src]).events
    packed = tmp_path / "events.jsonl.gz"
    packed.write_bytes(gzip.compress(src.read_bytes()))
    assert read_events([packed]).events == plain
    cut = tmp_path / "cut.gz"
    cut.write_bytes(packed.read_bytes()[: len(packed.read_bytes()) // 2])
    report = read_events([cut])
    assert 0 < len(report.events) < len(plain) and report.events == plain[:len(report.events)]
    assert any("gzip stream cut short" in r for r in report.reasons) and report.skipped == 1
