"""The fork server's share of the work: the deep checks (model, LoRA targets, data, device) run
in a process forked from it, so that tracetui's own process never imports torch, transformers
or PEFT (a sweep in a process of its own says so: tests/test_preload.py); and what every trial
would repeat is done in it once."""

import subprocess
import sys

import pytest

from tracetui.core.config import ConfigError, SweepConfig
from tracetui.runner import preflight
from tracetui.runner.lifetime import forking, trial_context

from .conftest import held_import, kill_left, wait_until

pytestmark = [pytest.mark.slow,  # each test starts a fork server (its imports: torch, transformers, TRL)
              pytest.mark.skipif(not forking(), reason="the fork server runs on Linux only")]


def test_a_check_that_fails_in_the_forked_process_is_the_users_one_line(monkeypatch):
    here = []
    monkeypatch.setattr(preflight, "validate_deep", lambda cfg: here.append(cfg))
    with pytest.raises(ConfigError) as exc:
        preflight.validate_deep_forked(SweepConfig(lora_targets="q_proj,qkv"), trial_context())
    assert exc.value.field == "--lora-targets"
    assert str(exc.value).startswith("--lora-targets: 'qkv' names no linear layer of tiny; use all-linear or")
    assert here == []  # decided over there, not here
    preflight.validate_deep_forked(SweepConfig(lora_targets="q_proj"), trial_context())
    assert here == []


class _DiesWhenUnpickled:
    def __reduce__(self):
        import os

        return os._exit, (3,)


def test_a_check_process_that_ends_without_an_answer_leaves_the_checks_to_tracetui(monkeypatch):
    cfg = SweepConfig()
    cfg.extra = _DiesWhenUnpickled()  # the forked process exits (status 3) before it can answer
    here = []
    monkeypatch.setattr(preflight, "validate_deep", lambda c: here.append(c))
    preflight.validate_deep_forked(cfg, trial_context())
    assert here == [cfg]


def _conversion_table_built(conn) -> None:
    import transformers.conversion_mapping as cm

    conn.send(getattr(cm, "_checkpoint_conversion_mapping_cache", None) is not None)
    conn.close()


def test_a_forked_trial_finds_the_work_every_trial_repeats_done_in_the_server():
    """transformers' table of checkpoint conversions is built once in the fork server
    (tracetui.runner.startup.warm), not in each trial."""
    cm = pytest.importorskip("transformers.conversion_mapping")
    if not hasattr(cm, "_checkpoint_conversion_mapping_cache"):
        pytest.skip("this transformers keeps no such table")
    ctx = trial_context()
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_conversion_table_built, args=(writer,))
    proc.start()
    writer.close()
    assert reader.recv() is True
    proc.join()


def test_a_fork_server_killed_while_it_imports_leaves_the_checks_to_tracetui(monkeypatch, tmp_path):
    """An out-of-memory killer takes the fork server while it imports: the checks run here, and
    the next trial's server is started again."""
    import os
    import signal
    import threading

    from tracetui.runner.lifetime import process_gone, server_pid

    env, held = held_import(tmp_path / "hold", "torch")  # (the server inherits this process's environment)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    old = server_pid()
    _kill_the_server()  # the checks start the server again first ...
    killed = []

    def kill_the_new_one():  # ... and it is killed in the middle of its imports (held at torch)
        wait_until(held.exists, 60)
        killed.append(int(held.read_text()))
        os.kill(killed[0], signal.SIGKILL)

    killer = threading.Thread(target=kill_the_new_one, daemon=True)
    killer.start()
    here = []
    monkeypatch.setattr(preflight, "validate_deep", lambda c: here.append(c))
    cfg = SweepConfig()
    preflight.validate_deep_forked(cfg, trial_context())
    killer.join(60)
    assert killed and killed[0] != old
    assert here == [cfg]
    # and the next check, once the killed server has ended, has a server again (one that imports
    # as it should). (Asked while the killed server still exits, not yet a zombie, the check can
    # be sent to it and run here instead: seen once in a few tries with the kill at the import.)
    wait_until(lambda: process_gone(killed[0]), 10)
    monkeypatch.delenv("TRACETUI_TEST_HOLD")
    preflight.validate_deep_forked(SweepConfig(lora_targets="q_proj"), trial_context())
    assert here == [cfg] and server_pid() not in (None, old, killed[0])


class _Said:
    """A stream that sets ``said`` once ``words`` have been written to it (and passes all on)."""

    def __init__(self, stream, words: str):
        import threading

        self.stream, self.words, self.said = stream, words, threading.Event()

    def write(self, text: str) -> int:
        if self.words in text:
            self.said.set()
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


class _Recording:
    """A multiprocessing context that keeps the processes it makes."""

    def __init__(self, ctx):
        self.ctx, self.made = ctx, []

    def Process(self, *args, **kwargs):  # noqa: N802 - multiprocessing's name
        proc = self.ctx.Process(*args, **kwargs)
        self.made.append(proc)
        return proc

    def __getattr__(self, name):
        return getattr(self.ctx, name)


def test_ctrl_c_is_not_held_up_by_a_check_that_takes_long(monkeypatch, capsys):
    """A hub id whose server accepts the connection and never answers (a real socket): the
    check would wait for minutes. Ctrl-C stops it at once, its process killed, not waited for."""
    import multiprocessing as mp
    import os
    import signal
    import socket
    import threading

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    held = []
    threading.Thread(target=lambda: [held.append(silent.accept()) for _ in range(8)], daemon=True).start()
    # a fork server started with the silent hub in its environment (its children inherit it)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{silent.getsockname()[1]}")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(preflight, "SLOW_CHECK_S", 0.5)
    _kill_the_server()
    try:
        preflight.validate_deep_forked(SweepConfig(lora_targets="q_proj"), trial_context())  # server up
        stderr = _Said(sys.stderr, "tracetui: still checking")
        monkeypatch.setattr(sys, "stderr", stderr)
        # Ctrl-C once the check has reached the silent hub and tracetui has said what it waits for
        # (after a minute in any case: the test then fails on what did not happen, not hangs)
        def interrupt():
            try:
                wait_until(lambda: held and stderr.said.is_set(), 60)
            finally:
                os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=interrupt, daemon=True).start()
        ctx = _Recording(trial_context())
        with pytest.raises(KeyboardInterrupt):
            preflight.validate_deep_forked(SweepConfig(model="someone/some-model"), ctx)
        (check,) = ctx.made
        assert held, "the check never reached the silent hub"
        assert check.exitcode == -signal.SIGKILL  # stopped, not waited for until the hub gave up
        assert "tracetui: still checking someone/some-model and synthetic after 0 s (a hub that does not answer?)" \
            in capsys.readouterr().err
        assert not [p for p in mp.active_children() if p.name == "tracetui-checks"]
    finally:
        _kill_the_server()  # the next test's server starts without that hub
        silent.close()


def _kill_the_server() -> None:
    """SIGKILL the fork server and wait until it is gone (a server still dying would be taken
    for a live one, and sent the next check)."""
    import os
    import signal

    from tracetui.runner.lifetime import process_gone, server_pid

    pid = server_pid()
    if pid:
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: process_gone(pid), 10)


def test_ctrl_c_before_any_run_takes_the_importing_fork_server_along(tmp_path):
    """Interrupted while the fork server still imports: tracetui exits 130 with one line, and
    the server goes with it (it used to finish its imports first, seconds of a core). Its
    imports are held here (for two minutes): a tracetui that waited for them would not end."""
    import os
    import signal
    from pathlib import Path

    from tracetui.runner.lifetime import process_gone

    env, held = held_import(tmp_path / "hold", "torch")
    proc = subprocess.Popen([sys.executable, "-m", "tracetui", "--export", "csv", "-o", str(tmp_path / "x.csv"),
                             "--runs-dir", str(tmp_path / "runs"), "--repeats", "1"],
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, **env))

    def servers():
        """tracetui's child that is the fork server, while it imports."""
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
                cmdline = (stat.parent / "cmdline").read_bytes()
            except (OSError, ValueError, IndexError):
                continue
            if ppid == proc.pid and b"forkserver" in cmdline:
                found.append(int(stat.parent.name))
        return found

    try:
        wait_until(lambda: held.exists() or proc.poll() is not None, 60)
        server = int(held.read_text())
        assert servers() == [server]  # the fork server, held in its imports
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        kill_left(proc)
    assert proc.returncode == 130 and err.strip().splitlines()[-1] == "tracetui: error: interrupted before any run started"
    wait_until(lambda: process_gone(server), 10)
