"""A fork server kept between commands (tracetui.runner.kept): a later command forks its trials
from the server an earlier one started, with the libraries imported already; its trials run in
its own environment, directory and output, die with it, and a server ends once no command has
asked anything of it for a while. Where anything differs that the imports could depend on, or
the server's directory is not this user's alone, no server is shared.

Real ``python -m tracetui`` commands on the tiny preset, real servers, real signals."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tracetui.runner import kept
from tracetui.runner.lifetime import PRELOAD, process_gone

from .conftest import run_cli, run_main, wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork servers are Linux's")

TINY = ["--splits", "2x1", "--effective-batch", "2", "--warmup", "1", "--seq-len", "32"]


@pytest.fixture
def servers():
    """A private directory for kept servers (short: a socket's path has a limit), and every
    server in it killed at the end."""
    where = Path(tempfile.mkdtemp(prefix="tk", dir="/tmp"))
    os.chmod(where, 0o700)
    yield where
    kept.forget()
    for pidfile in where.glob("*.pid"):
        try:
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
        except (OSError, ValueError):
            pass
    shutil.rmtree(where, ignore_errors=True)


def _env(where: Path, keep: float = 60) -> dict:
    """(what conftest.run_cli adds to this process's environment, too: a server is chosen by it)"""
    return {"TRACETUI_KEEP_SERVER": str(keep), "TRACETUI_SERVER_DIR": str(where)}


def _sweep(tmp_path: Path, where: Path, name: str, keep: float = 60, **env):
    out = tmp_path / f"{name}.json"
    proc = run_cli(*TINY, "--steps", "3", "--runs-dir", tmp_path / "runs", "--export", "json", "-o", out,
                   cwd=tmp_path, env={**_env(where, keep), **env})
    assert proc.returncode == 0, proc.stderr
    (spent,) = json.loads(out.read_text())["time"]
    return spent, proc.stderr


def _server(where: Path) -> int:
    (pidfile,) = where.glob("*.pid")
    return int(pidfile.read_text())


def test_a_second_command_forks_its_trials_from_the_server_the_first_kept(tmp_path, servers):
    first, said = _sweep(tmp_path, servers, "first")
    pid = _server(servers)
    assert first["libraries_s"] > 0 and "server_ready_before_s" not in first
    # the command that started it says, once, that it stays
    assert said.splitlines()[-1] == (f"tracetui: the fork server (pid {pid}) stays for the next command, until 60 s "
                                     "pass without one; TRACETUI_KEEP_SERVER=0 keeps none")
    # the second: the same interpreter, directory and environment, but for what only says where
    # a shell runs (another terminal)
    second, err = _sweep(tmp_path, servers, "second", TERM="xterm-other", SSH_TTY="/dev/pts/9")
    assert _server(servers) == pid and not process_gone(pid)
    assert second["server_ready_before_s"] > 0 and second["libraries_s"] == 0.0
    assert second["before_first_step_s"] < first["before_first_step_s"] - first["libraries_s"] / 2
    line = next(x for x in err.splitlines() if x.startswith("tracetui: time: "))
    assert "library imports 0 (a fork server kept from an earlier command)" in line
    assert "stays for the next command" not in err


def test_a_kept_servers_trial_runs_in_the_commands_environment_directory_and_output(tmp_path, servers, capfd,
                                                                                      monkeypatch):
    from tracetui.runner.lifetime import server_pid, trial_context

    for name, value in _env(servers).items():
        monkeypatch.setenv(name, value)
    trial_context()  # this process's server, kept
    pid = server_pid()
    assert pid == _server(servers) and kept.current is not None and kept.current.started
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TERM", "kept-test-term")  # (not part of what a server is chosen by)
    ctx = trial_context()  # the same one
    assert server_pid() == pid
    proc = ctx.Process(target=os.system, args=("echo TERM=$TERM; pwd; echo on-stderr >&2",))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    out, err = capfd.readouterr()
    assert "TERM=kept-test-term" in out and str(tmp_path) in out and "on-stderr" in err
    # its socket removed (a cleaned /tmp): the next trial starts a new server, and the old one,
    # which no command can reach, ends
    (sock,) = servers.glob("*.sock")
    sock.unlink()
    again = ctx.Process(target=os.system, args=("echo again",))
    again.start()
    again.join(60)
    assert again.exitcode == 0 and "again" in capfd.readouterr().out
    assert server_pid() != pid and str(server_pid()) in {p.read_text().strip() for p in servers.glob("*.pid")}
    wait_until(lambda: process_gone(pid), 20)


def test_a_kept_servers_trial_dies_with_its_command_and_a_killed_server_is_replaced(tmp_path, servers):
    runs = tmp_path / "long"
    cmd = subprocess.Popen([sys.executable, "-m", "tracetui", *TINY, "--steps", "400", "--repeats", "1",
                            "--runs-dir", str(runs), "--export", "csv", "-o", str(tmp_path / "long.csv")],
                           cwd=tmp_path, env={**os.environ, "PYTHONUNBUFFERED": "1", **_env(servers)},
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        def trial():
            logs = list(runs.glob("*/events.jsonl"))
            events = [json.loads(x) for x in logs[0].read_text().splitlines()] if logs else []
            started = [e["pid"] for e in events if e["type"] == "run_started"]
            return started[0] if started and any(e["type"] == "step" for e in events) else None

        wait_until(lambda: trial() or cmd.poll() is not None, 180)
        assert cmd.poll() is None, cmd.communicate()[1]
        worker, server = trial(), _server(servers)
        with open(f"/proc/{worker}/stat") as fh:
            assert int(fh.read().rsplit(")", 1)[1].split()[1]) == server  # forked by the kept server
        cmd.kill()  # SIGKILL: nothing of tracetui's runs after it
        cmd.wait(10)
        wait_until(lambda: process_gone(worker), 10)
        assert not process_gone(server)  # kept for the next command
    finally:
        if cmd.poll() is None:
            cmd.kill()
        cmd.communicate()
    os.kill(server, signal.SIGKILL)  # from outside (an out-of-memory killer)
    wait_until(lambda: process_gone(server), 10)
    spent, _ = _sweep(tmp_path, servers, "after")
    assert spent["libraries_s"] > 0 and _server(servers) != server


def test_a_kept_server_ends_once_no_command_has_asked_for_a_while(tmp_path, servers):
    _sweep(tmp_path, servers, "once", keep=2)
    pid = _server(servers)
    wait_until(lambda: process_gone(pid), 30)
    assert not list(servers.glob("*.sock")) and not list(servers.glob("*.pid"))


def test_what_the_imports_could_depend_on_chooses_the_server():
    env = dict(os.environ)
    key = kept.server_key(PRELOAD, env)
    assert kept.server_key(PRELOAD, {**env, "TERM": "other", "SSH_CONNECTION": "1 2 3 4"}) == key
    assert kept.server_key(PRELOAD, {**env, "HF_HOME": "/elsewhere"}) != key
    assert kept.server_key(PRELOAD, {**env, "PYTHONPATH": "/somewhere"}) != key
    assert kept.server_key(PRELOAD[:-1], env) != key


def test_a_server_directory_others_can_open_keeps_none_and_the_command_runs_as_before(tmp_path, servers):
    os.chmod(servers, 0o755)
    spent, _ = _sweep(tmp_path, servers, "open")
    assert spent["libraries_s"] > 0 and not list(servers.iterdir())


def test_a_bad_keep_time_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACETUI_KEEP_SERVER", "ten minutes")
    got = run_main(*TINY, "--steps", "3", "--runs-dir", tmp_path / "runs", "--export", "csv", "-o", tmp_path / "x.csv")
    assert got.returncode == 2
    assert got.stderr.strip() == ("tracetui: error: TRACETUI_KEEP_SERVER: 'ten minutes' is not a number of seconds; "
                                  "give how long a fork server waits for the next command (0: none kept; default 600)")
    assert not list((tmp_path / "runs").glob("*/events.jsonl"))  # no sweep began


def test_a_kept_trial_counts_the_other_trials_of_its_command_as_its_sweeps_own(servers, capfd, monkeypatch):
    """The busy-machine check (probe/quiet.py, probe/gpu.py) counts the sweep's own processes
    as no other load: a kept server's trials are not the command's descendants, but each shares
    a pipe with its command, and a trial of another command shares none."""
    from tracetui.runner.lifetime import trial_context

    for name, value in _env(servers).items():
        monkeypatch.setenv(name, value)
    ctx = trial_context()
    sleeper = ctx.Process(target=time.sleep, args=(60,))
    sleeper.start()
    other = subprocess.Popen(["sleep", "60"])
    try:
        code = ("from tracetui.probe.quiet import kept_siblings; import os; "
                f"print('MINE', sorted(kept_siblings({os.getpid()}) - {{os.getpid()}}), "
                f"'THEIRS', sorted(kept_siblings({other.pid}) - {{os.getpid()}}))")
        asker = ctx.Process(target=exec, args=(code,))
        asker.start()
        asker.join(60)
        assert asker.exitcode == 0
        out = capfd.readouterr().out
        assert f"MINE [{sleeper.pid}] THEIRS []" in out, out
    finally:
        sleeper.kill()
        other.kill()
        other.wait()
        sleeper.join(10)
