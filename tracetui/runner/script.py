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
import queue
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable

from ..config import ConfigError, SweepConfig
from ..knobs import KNOBS, script_args
from ..plan import Planner, RunSpec
from ..store import EventLog
from ..trial import Trial
from .lifetime import OWNER_ENV
from .supervise import CommandChild
from .sweep import SweepBase, new_sweep_id

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


def check_script_exists(cmd: list[str]) -> None:
    """Refuse ``python train.py`` when train.py is not there (before every run fails on it)."""
    for arg in cmd[1:3]:  # python train.py, python -u train.py
        if arg.endswith(".py") and not os.path.exists(arg):
            raise ConfigError("sweep", f"{arg} does not exist", "give the training script's path")


_shim: list[str] = []


def _package_shim() -> str:
    """A folder that holds tracetui alone (a link to this package): what a user's script gets on
    its import path, so that tracetui imports there whether or not it is installed in the
    script's interpreter, and nothing beside the package (this checkout's ``tests``, say) can
    shadow a module of the user's. One per process, removed at its exit."""
    if not _shim:
        folder = tempfile.mkdtemp(prefix="tracetui-path-")
        atexit.register(shutil.rmtree, folder, True)
        os.symlink(Path(__file__).resolve().parent.parent, os.path.join(folder, "tracetui"))
        _shim.append(folder)
    return _shim[0]


def probe_env(socket_path: str, warmup: int, **extra: str) -> dict[str, str]:
    """The environment of a user's command measured by tracetui (``sweep``, ``run``): the
    probe's ``sitecustomize`` and tracetui first on ``PYTHONPATH`` (the user's own after them),
    the socket its events go to, the warm-up steps not counted, this process as the owner its
    Python processes die with, and NVLink multicast off for any NCCL job (shared GPU hosts)."""
    inject = str(Path(__file__).resolve().parent.parent / "inject")
    path = [inject, _package_shim()] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    env = dict(os.environ, TRACETUI_SOCKET=socket_path, TRACETUI_WARMUP=str(warmup), PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(path), **extra)
    for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
        env.setdefault(k, v)
    env[OWNER_ENV] = str(os.getpid())  # Python processes further down watch it (sitecustomize)
    return env


def script_notes(varied: dict) -> list[str]:
    """What to know about the varied settings' flags on a user's script (one line each)."""
    return [f"--vary {n}: {KNOBS[n].script_note}" for n in varied if KNOBS[n].script_note]


def script_parts(cmd: list[str]) -> tuple[list[str], str, list[str]]:
    """``cmd`` as ``(launcher, program, arguments)``: what starts the script, the script, and the
    arguments its own parser reads. ``trl sft ARGS`` -> ``([], "trl sft", ARGS)``;
    ``accelerate launch --num_processes 2 train.py ARGS`` -> ``(["accelerate", "launch",
    "--num_processes", "2"], "train.py", ARGS)``; ``python -m pkg.train ARGS`` ->
    ``(["python", "-m"], "pkg.train", ARGS)``. A command with no script found is all
    arguments of an unknown program (``""``)."""
    if cmd and os.path.basename(cmd[0]) == "trl" and len(cmd) > 1:
        return [], f"trl {cmd[1]}", cmd[2:]
    for i, arg in enumerate(cmd):
        if arg.endswith(".py"):
            return cmd[:i], arg, cmd[i + 1:]
        if arg == "-m" and i + 1 < len(cmd):
            return cmd[:i + 1], cmd[i + 1], cmd[i + 2:]
    return [], "", list(cmd)


def script_command(cmd: list[str], t: Trial) -> list[str]:
    """The user's command for one trial: its split, and its varied settings, as flags."""
    return cmd + [SPLIT_FLAGS[0], str(t.micro_batch), SPLIT_FLAGS[1], str(t.grad_accum)] + script_args(t.settings_dict)


class ScriptSweep(SweepBase):
    short_runs = False  # the script's own --max_steps decides a run's steps

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
        #: what the ranks send over the socket, read by the supervisor of the running trial
        self._inbox: "queue.Queue[dict]" = queue.Queue()
        # A private socket: its folder is made 0700 by the listener, and removed on every way out
        # this process lives through (close, an error here, interpreter exit).
        self._sockdir = tempfile.mkdtemp(prefix="tracetui-sweep-")
        atexit.register(self._remove_sockdir)
        self.socket_path = os.path.join(self._sockdir, "sweep.sock")
        try:
            self.listener = SocketListener(self.socket_path, self._inbox.put).start()
        except BaseException:
            self._remove_sockdir()
            raise

    def _check(self, cmd: list[str], cfg: SweepConfig) -> None:
        check_command(cmd, cfg.varied())

    @property
    def user_command(self) -> list[str] | None:
        """The user's own training command (what the recommendation's command line is built on)."""
        return self.cmd

    def command_for(self, spec: RunSpec) -> list[str]:
        return script_command(self.cmd, spec.trial)

    def _run_one(self, spec: RunSpec) -> str:
        env = probe_env(self.socket_path, self.cfg.warmup, TRACETUI_RUN_ID=spec.run_id,
                        TRACETUI_VARIED=json.dumps(spec.trial.settings_dict))
        if self.cfg.until_confident is not None:
            refs = self.references(spec)
            env.update(TRACETUI_UNTIL_CONFIDENT=f"{self.cfg.until_confident}:{self.cfg.min_steps}",
                       TRACETUI_REFERENCES=json.dumps(refs))
        if self.cfg.gpus:
            env["CUDA_VISIBLE_DEVICES"] = self.cfg.gpus
        log_path = self.dir / (spec.run_id.split("/", 1)[1].replace("#", "_r") + ".log")
        child = CommandChild(self.command_for(spec), env, self._inbox, log_path)
        child.memory_limit = self.memory_capped()
        return self._supervised(spec, child)

    def memory_capped(self) -> float | None:
        """--memory-limit where it caps this sweep's trials: not on a user's script."""
        return None

    def close(self) -> None:
        try:
            self.listener.close()
            while True:  # what arrived after the last run ended
                try:
                    self._emit(self._inbox.get_nowait())
                except queue.Empty:
                    break
            self.log.close()
        finally:
            self._remove_sockdir()

    def _remove_sockdir(self) -> None:
        shutil.rmtree(self._sockdir, ignore_errors=True)


class DdpSweep(ScriptSweep):
    """Each run launched by torchrun (``torch.distributed.run``) as DDP over
    ``--nproc-per-node`` processes (and ``--nnodes`` machines); every rank reports over the
    sweep's socket with its rank."""

    short_runs = True  # each rank is tracetui's own trainer, given the run's steps

    def __init__(self, cfg: SweepConfig, trials: list[Trial], on_event=None, planner: Planner | None = None):
        super().__init__(cfg, trials, ["ddp"], on_event=on_event, planner=planner)

    def _check(self, cmd: list[str], cfg: SweepConfig) -> None:
        """Nothing to check: each rank is tracetui's own trainer, which applies every setting."""

    @property
    def user_command(self) -> None:
        return None  # tracetui's own trainer: a built-in sweep's config, no command of the user's

    def memory_capped(self) -> float | None:
        return self.cfg.memory_limit  # each rank caps its own memory (tracetui.runner.ddp)

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
