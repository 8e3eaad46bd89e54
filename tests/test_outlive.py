"""Nothing a run starts outlives the run: a measured command that detaches a daemon (fork, setsid,
fork: re-parented away from the run, in a session and process group of its own) leaves none
running once `run` or `sweep` has ended, whichever way the run started (a fresh process, forked
from the fork server, tracetui's own worker) and however it ended (by itself, or stopped).

The daemons are real: a `sleep` exec'd with a mark in its environment, and a Python process that
never execs (its environment in /proc is its parent's, so only its place in the run's tree finds
it). Each writes its pid as it starts; afterwards no process carries the mark, and neither pid
is a live process."""

import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from tracetui.core.checks import validate
from tracetui.core.config import SweepConfig
from tracetui.runner.script import ScriptSweep
from tracetui.runner.sweep import Sweep

from .conftest import run_main, wait_until
from .stubs import worker as stub_worker

#: every test here starts real processes (a run, a sweep, a fork server)
pytestmark = pytest.mark.slow

#: a measured command that detaches two daemons, then exits (or waits to be stopped)
DAEMONS = Path(__file__).parent / "stubs" / "daemons.py"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _marked(folder: Path) -> list[int]:
    """Live processes whose environment carries the daemon's mark for ``folder``."""
    entry = f"TT_DAEMON_OF={folder}".encode()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as fh:
                    if entry in fh.read().split(b"\0") and _alive(int(name)):
                        found.append(int(name))
            except OSError:
                pass
    return found


def _daemons(folder: Path) -> dict[str, int]:
    got = {k: int((folder / k).read_text()) for k in ("sleep", "python") if (folder / k).exists()}
    assert sorted(got) == ["python", "sleep"], f"the script did not start both daemons: {got}"
    return got


def _none_left(folder: Path) -> None:
    pids = _daemons(folder)
    try:
        # ended as the run ended: within the command, not some time later
        assert not _marked(folder) and not any(_alive(p) for p in pids.values()), (
            f"left running: {[k for k, p in pids.items() if _alive(p)]}, marked {_marked(folder)}")
    finally:
        for pid in pids.values():  # (whatever the outcome, nothing of the test's is left)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.fixture
def daemons(tmp_path):
    folder = tmp_path / "marks"
    folder.mkdir()
    return DAEMONS, folder


def test_run_leaves_no_daemon_of_its_command(tmp_path, daemons):
    script, folder = daemons
    proc = run_main("run", "--runs-dir", tmp_path / "runs", "--export", "csv", "-o", tmp_path / "out.csv",
                    "--", sys.executable, script, folder)
    assert "the command exited with status 0" in proc.stderr, proc.stderr
    _none_left(folder)


@pytest.mark.parametrize("how", ["fresh", "forked"])
def test_sweep_leaves_no_daemon_of_its_script(tmp_path, daemons, how):
    script, folder = daemons
    proc = run_main("sweep", "--runs-dir", tmp_path / "runs", "--export", "csv", "-o", tmp_path / "out.csv",
                    "--splits", "1x1", "--effective-batch", 1, *(["--fresh"] if how == "fresh" else []),
                    "--", sys.executable, script, folder)
    assert "no Trainer reported" in proc.stderr, proc.stderr  # the run ended by itself (it trains nothing)
    _none_left(folder)


def test_a_fork_server_started_by_other_code_is_replaced(tmp_path, daemons):
    """multiprocessing's one fork server, started by other code of the process before the sweep
    (not a subreaper): the sweep starts its own in its place, so what its forked run left finds
    its way to it, as with a server of tracetui's."""
    import multiprocessing

    from tracetui.runner.lifetime import server_pid, stop_server

    pid = server_pid()
    stop_server()
    if pid:  # ended, its threads too (until then multiprocessing calls it alive)
        wait_until(lambda: os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None, 10)
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([])  # (other code's server imports none of tracetui's preload; the sweep sets it again)
    plain = ctx.Process(target=os.getpid)
    plain.start()
    plain.join(30)
    test_sweep_leaves_no_daemon_of_its_script(tmp_path, daemons, "forked")


class DaemonSweep(Sweep):
    """The built-in sweep, its trials run by the stand-in worker after detaching two daemons."""

    target = staticmethod(stub_worker.detach_then_run)


def test_the_built_in_sweep_leaves_no_daemon_of_its_worker(tmp_path):
    folder = tmp_path / "marks"
    folder.mkdir()
    cfg = SweepConfig(splits="1x1", effective_batch=(1,), repeats=1, steps=3, warmup=1, device="cpu", runs_dir=str(folder), allow_busy=True,
                      head_start=False)
    sweep = DaemonSweep(cfg, validate(cfg))
    try:
        assert sweep.run() == {sweep.plan[0].run_id: "ok"}
    finally:
        sweep.close()
    _none_left(folder)


def test_a_stopped_sweep_leaves_no_daemon(tmp_path, daemons):
    """The stop path (Ctrl-C, SIGTERM, SIGHUP of tracetui, a stall: the sweep's stop), while the
    run (forked from the fork server) waits with its daemons started: SIGTERM ends the script's
    process at once (a script's default), so only the fork server is left to adopt them."""
    script, folder = daemons
    cfg = SweepConfig(splits="1x1", effective_batch=(1,), repeats=1, runs_dir=str(tmp_path / "runs"), allow_busy=True)
    sweep = ScriptSweep(cfg, validate(cfg), [sys.executable, str(script), str(folder), "wait"])
    assert sweep.fork is not None  # (forked: the case where the run's own process cannot clean up)
    ran = threading.Thread(target=sweep.run, daemon=True)
    ran.start()
    try:
        wait_until(lambda: (folder / "waiting").exists() or not ran.is_alive(), 60)
        assert all(_alive(p) for p in _daemons(folder).values())
    finally:
        sweep.stop()
        ran.join(60)
        sweep.close()
    assert list(sweep.outcomes.values()) == ["interrupted"]
    _none_left(folder)
