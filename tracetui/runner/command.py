"""``tracetui run -- CMD``: one unmodified training command, run once with the probe attached.

No sweep: the command runs as the user wrote it (its own split and settings), with the probe's
``sitecustomize`` on its import path (:func:`~tracetui.runner.probeenv.probe_env`), which adds a
``TraceCallback`` to every transformers ``Trainer`` it builds. The callback's events come over a
private socket, as they do for ``tracetui watch``; the command's own output goes to a file beside
them, so that it never draws over the monitor.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import threading
from pathlib import Path
from typing import Callable

from ..core import envvars
from ..events.schema import NOTICE, RUN_STARTED, make
from ..events.log import EventLog
from ..events.sockpath import private_socket
from ..events.wire import SocketListener
from ..launch.dialects import launcher_for
from .leftovers import end_run, new_tree, run_processes
from .runlog import RunOutput
from .probeenv import probe_env
from ..events.log import new_sweep_id

#: seconds a stopped command has after SIGTERM before SIGKILL
STOP_GRACE_S = 10.0


class CommandRun:
    def __init__(self, cmd: list[str], runs_dir: str, warmup: int = 3):
        self.cmd = list(cmd)
        self.warmup = warmup
        self.id = new_sweep_id()
        self.dir = Path(runs_dir) / f"run-{self.id}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = EventLog(self.dir / "events.jsonl")
        self.output_path = self.dir / "command.log"
        # a private socket: its folder is made 0700 by the listener, removed on every way out
        self._sockdir, self.socket_path = private_socket("tracetui-run-", "run.sock")
        atexit.register(shutil.rmtree, self._sockdir, True)
        self.listener = None
        self.proc: subprocess.Popen | None = None
        #: the command's exit status once it has ended (negative: the signal that ended it)
        self.returncode: int | None = None
        self.stopped = False
        self._ended = threading.Event()
        #: the mark of the command's processes, and those seen below it as it was stopped
        self.tree = new_tree()
        self._seen: dict[int, int] = {}
        self.output: RunOutput | None = None
        #: what the notice of the command's cut output said ("": nothing was cut)
        self.cut_said = ""
        self._reported: str | None = None

    def start(self, on_event: Callable[[dict], None]) -> None:
        """Listen, then start the command; returns at once. Raises ``OSError`` if it cannot start."""

        def take(e: dict) -> None:
            if self._reported is None and e.get("type") == RUN_STARTED:
                self._reported = e["run_id"]  # (the run a notice of the command's output goes to)
            self.log.append(e)
            on_event(e)

        self._take = take
        self.listener = SocketListener(self.socket_path, take, origin=None).start()
        self.output = RunOutput(self.output_path, fresh=True)
        try:
            env = launcher_for(self.cmd).environment(self.cmd, probe_env(self.socket_path, self.warmup))
            env[envvars.RUN_TREE] = self.tree
            self.proc = subprocess.Popen(self.cmd, env=env, stdin=subprocess.DEVNULL, stdout=self.output.writer,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        except OSError:
            self.output.close(0)
            self.close()
            raise
        finally:
            self.output.started()
        threading.Thread(target=self._wait, name="tracetui-run", daemon=True).start()

    def _wait(self) -> None:
        returncode = self.proc.wait()
        try:
            # what the command started ends with it, wherever it went (tracetui.runner.lifetime)
            end_run(self.tree, below=tuple(self._seen))
        finally:
            self.output.close()
        if self.output.cut:
            said = self.output.notice()
            self.cut_said = said
            if self._reported is not None:
                self._take(make(NOTICE, self._reported, level="warning", message=said))
        self.returncode = returncode
        self._ended.set()

    def running(self) -> bool:
        return self.proc is not None and not self._ended.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Until the command has ended (True), or ``timeout`` seconds have passed."""
        return self._ended.wait(timeout)

    def stop(self) -> None:
        """SIGTERM to the command's process group, SIGKILL if it is still there after
        :data:`STOP_GRACE_S` (a trainer that ignores SIGTERM mid-step)."""
        self.stopped = True
        if not self.running():
            return
        self._seen.update(run_processes(None, below=(self.proc.pid,)))
        self._seen.pop(self.proc.pid, None)
        for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, None)):
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                return
            if self.wait(wait):
                return

    def close(self) -> None:
        """Stop listening (what arrived is in the log) and remove the socket's folder."""
        if self.listener is not None:
            self.listener.close()
        self.log.close()
        shutil.rmtree(self._sockdir, ignore_errors=True)

    def exit_status(self, status: int) -> int:
        """``tracetui run``'s exit status: the command's own when it failed (not stopped by
        tracetui), else ``status`` (the outputs')."""
        rc = self.returncode
        if status == 0 and rc and not self.stopped:
            return rc if rc > 0 else 128 - rc
        return status

    def ended_line(self) -> str:
        """How the command ended, in words."""
        rc = self.returncode
        if rc is None:
            return f"the command did not start: {self.cmd[0]}"
        how = (f"was stopped ({signal.Signals(-rc).name})" if rc < 0 and self.stopped
               else f"ended by {signal.Signals(-rc).name}" if rc < 0 else f"exited with status {rc}")
        cut = f" ({self.cut_said.split(': ', 1)[0]}: its middle cut)" if self.cut_said else ""
        return f"the command {how}; its output is in {self.output_path}{cut}"
