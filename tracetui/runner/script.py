"""``tracetui sweep -- python train.py ARGS``: run an unmodified HF/TRL script once per split.

Each run appends ``--per_device_train_batch_size MB --gradient_accumulation_steps GA`` (the
``HfArgumentParser``/``TrlParser`` flag names) and puts :mod:`tracetui.inject` on the script's
``PYTHONPATH``, whose ``sitecustomize`` adds a ``TraceCallback`` to the script's ``Trainer``. The
callback reports to this sweep's own socket, so the events take the same path as a sweep's.
Offers the same interface as :class:`~tracetui.runner.sweep.Sweep` to the TUI and headless mode.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from ..config import ConfigError, SweepConfig
from ..events import RUN_FAILED, RUN_FINISHED, make
from ..knobs import KNOBS, script_args
from ..plan import Planner, RunSpec
from ..store import EventLog
from ..trial import Trial
from .lifetime import OWNER_ENV, die_with_this_process, launch
from .sweep import KILL_AFTER_S, StallClock, SweepBase, new_sweep_id

SPLIT_FLAGS = ("--per_device_train_batch_size", "--gradient_accumulation_steps")


def check_command(cmd: list[str], varied: dict | None = None) -> None:
    """Refuse a command line that already fixes what the sweep sets per trial, and a varied
    setting that cannot be set on a script from outside."""
    if not cmd:
        raise ConfigError("sweep", "no training command given", "write it after --, e.g. -- python train.py")
    owned = list(SPLIT_FLAGS)
    for name in varied or {}:
        knob = KNOBS[name]
        if knob.script is None:
            raise ConfigError("--vary", f"{name} cannot be set on a script from outside",
                              "set it in the script, or compare it with tracetui's own sweep")
        owned += [a for a in knob.script(next(iter(varied[name]))) if a.startswith("--")]
    for arg in cmd:
        flag = arg.split("=", 1)[0]
        for name in owned:
            if flag in (name, name.replace("_", "-")):
                raise ConfigError("sweep", f"the script's command line already sets {flag}",
                                  "remove it: tracetui sets it for each trial")


def script_notes(varied: dict) -> list[str]:
    """What to know about the varied settings' flags on a user's script (one line each)."""
    return [f"--vary {n}: {KNOBS[n].script_note}" for n in varied if KNOBS[n].script_note]


class ScriptSweep(SweepBase):
    def __init__(self, cfg: SweepConfig, trials: list[Trial], cmd: list[str],
                 on_event: Callable[[dict], None] | None = None, planner: Planner | None = None):
        from ..attach import SocketListener

        self._check(cmd, cfg)
        self.cmd = cmd
        self.on_event = on_event
        self.sweep_id = new_sweep_id()
        self.dir = Path(cfg.runs_dir) / self.sweep_id
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = EventLog(self.dir / "events.jsonl")
        self._setup(cfg, trials, planner)
        self.warnings: list[str] = script_notes(cfg.varied())
        self._lock = threading.RLock()
        self._final: dict[str, tuple[str, str]] = {}
        self._clock: tuple[str, StallClock] | None = None  # the running run's progress
        self._stalled: set[str] = set()
        # A private socket: its folder is made 0700 by the listener, and removed on every way out
        # this process lives through (close, an error here, interpreter exit).
        self._sockdir = tempfile.mkdtemp(prefix="tracetui-sweep-")
        atexit.register(self._remove_sockdir)
        self.socket_path = os.path.join(self._sockdir, "sweep.sock")
        try:
            self.listener = SocketListener(self.socket_path, self._emit).start()
        except BaseException:
            self._remove_sockdir()
            raise
        self._proc: subprocess.Popen | None = None

    def _check(self, cmd: list[str], cfg: SweepConfig) -> None:
        check_command(cmd, cfg.varied())

    def _emit(self, event: dict) -> None:
        with self._lock:
            if event.get("run_id") in self._stalled:
                return  # what a stalled run sends while it is stopped is not measured
            if self._clock is not None and event.get("run_id") == self._clock[0]:
                self._clock[1].saw(event)
            self._record(event)

    def _record(self, event: dict) -> None:
        with self._lock:
            # the run's end as its lead rank (this machine's first) reports it
            if event["type"] in (RUN_FINISHED, RUN_FAILED) and event.get("rank", 0) == 0:
                self._final[event["run_id"]] = (("ok", "") if event["type"] == RUN_FINISHED
                                                else (event["kind"], event.get("message", "")))
            self._track(event)
            self.log.append(event)
            if self.on_event is not None:
                self.on_event(event)

    def command_for(self, spec: RunSpec) -> list[str]:
        t = spec.trial
        return (self.cmd + [SPLIT_FLAGS[0], str(t.micro_batch), SPLIT_FLAGS[1], str(t.grad_accum)]
                + script_args(t.settings_dict))

    def _run_one(self, spec: RunSpec) -> str:
        status, message = self._supervise(spec)
        self._finished(spec, status, message)
        return status

    def _supervise(self, spec: RunSpec) -> tuple[str, str]:
        inject = str(Path(__file__).resolve().parent.parent / "inject")
        pkg_root = str(Path(__file__).resolve().parent.parent.parent)
        env = dict(os.environ, TRACETUI_SOCKET=self.socket_path, TRACETUI_RUN_ID=spec.run_id,
                   TRACETUI_VARIED=json.dumps(spec.trial.settings_dict),
                   TRACETUI_WARMUP=str(self.cfg.warmup), PYTHONUNBUFFERED="1",
                   PYTHONPATH=os.pathsep.join([inject, pkg_root] + ([os.environ["PYTHONPATH"]]
                                                                    if os.environ.get("PYTHONPATH") else [])))
        if self.cfg.until_confident is not None:
            refs = self.references(spec)
            env.update(TRACETUI_UNTIL_CONFIDENT=f"{self.cfg.until_confident}:{self.cfg.min_steps}",
                       TRACETUI_REFERENCES=json.dumps(refs))
        cmd = self.command_for(spec)
        if self.cfg.gpus:
            env["CUDA_VISIBLE_DEVICES"] = self.cfg.gpus
        # NVLink multicast stays off for every NCCL job we start (shared GPU hosts).
        for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
            env.setdefault(k, v)
        env[OWNER_ENV] = str(os.getpid())  # Python processes further down watch it (sitecustomize)
        log_path = self.dir / (spec.run_id.split("/", 1)[1].replace("#", "_r") + ".log")
        clock = StallClock(self.cfg.stall_timeout)
        with self._lock:
            self._clock = (spec.run_id, clock)
        stalled = None
        with open(log_path, "w") as log:
            # Started from the launcher thread and killed by the kernel if tracetui dies (see
            # tracetui.runner.sweep); in its own session, so the terminal's signals are ours to pass on.
            self._proc = proc = launch(lambda: subprocess.Popen(
                cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=die_with_this_process()))
            term_at = None
            while proc.poll() is None:
                if term_at is None and stalled is None:
                    with self._lock:
                        stalled = clock.stalled()
                        if stalled:
                            self._stalled.add(spec.run_id)
                if (self._stop.is_set() or stalled) and term_at is None:
                    term_at = time.monotonic()
                    _signal_group(proc.pid, signal.SIGTERM)
                    if stalled:
                        _signal_group(proc.pid, signal.SIGCONT)  # stopped processes act on it once continued
                if term_at is not None and time.monotonic() - term_at > KILL_AFTER_S:
                    _signal_group(proc.pid, signal.SIGKILL)
                time.sleep(0.1)
        self._proc = None
        time.sleep(0.3)  # let the listener read the last lines
        with self._lock:
            final = self._final.get(spec.run_id)
            self._clock = None
        if stalled:
            self._record(make(RUN_FAILED, spec.run_id, kind="stalled", message=stalled))
            return "stalled", stalled
        if final is not None:
            return final
        code = proc.returncode
        tail = _tail(log_path)
        if self._stop.is_set():
            kind, msg = "interrupted", "stopped by the sweep"
        elif re.search(r"OutOfMemoryError|CUDA out of memory", tail):
            kind, msg = "oom", f"out of memory at micro-batch {spec.trial.micro_batch} (see {log_path})"
        elif code == 0:
            kind, msg = "error", "the script finished but no Trainer reported: does it train with transformers' Trainer?"
        elif code is not None and code < 0:
            kind, msg = "crashed", f"killed by {signal.Signals(-code).name}; its log: {log_path}"
        else:
            last = tail.strip().splitlines()[-1] if tail.strip() else ""
            kind, msg = "error", f"exited with status {code}: {last[:200]} (log: {log_path})"
        self._emit(make(RUN_FAILED, spec.run_id, kind=kind, message=msg))
        return kind, msg

    def close(self) -> None:
        try:
            self.listener.close()
            self.log.close()
        finally:
            self._remove_sockdir()

    def _remove_sockdir(self) -> None:
        shutil.rmtree(self._sockdir, ignore_errors=True)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except OSError:  # gone already
        pass


def _tail(path: Path, n: int = 4000) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - n))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


class DdpSweep(ScriptSweep):
    """Each run launched by torchrun (``torch.distributed.run``) as DDP over
    ``--nproc-per-node`` processes (and ``--nnodes`` machines); every rank reports over the
    sweep's socket with its rank."""

    def __init__(self, cfg: SweepConfig, trials: list[Trial], on_event=None, planner: Planner | None = None):
        super().__init__(cfg, trials, ["ddp"], on_event=on_event, planner=planner)

    def _check(self, cmd: list[str], cfg: SweepConfig) -> None:
        """Nothing to check: each rank is tracetui's own trainer, which applies every setting."""

    def command_for(self, spec: RunSpec) -> list[str]:
        cfg = self.cfg
        launch = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(cfg.nproc_per_node)]
        if cfg.nnodes > 1:
            launch += ["--nnodes", str(cfg.nnodes), "--node-rank", str(cfg.node_rank),
                       "--rdzv-endpoint", cfg.rdzv_endpoint, "--rdzv-backend", "c10d"]
        else:
            launch += ["--standalone"]
        t = spec.trial
        return launch + ["-m", "tracetui.runner.ddp", "--config-json", json.dumps(self.payload_config(spec)),
                         SPLIT_FLAGS[0], str(t.micro_batch), SPLIT_FLAGS[1], str(t.grad_accum)]
