"""``tracetui sweep -- python train.py ARGS``: run an unmodified training command once per split.

How a trial's split and settings reach the command, and whether its runs fork from the fork
server, is :mod:`.launch`'s to say (flags after an ``HfArgumentParser`` script, a per-run copy of
a config-file trainer's YAML). Each run has :mod:`tracetui.inject` on its ``PYTHONPATH``, whose
``sitecustomize`` adds a ``TraceCallback`` to the command's ``Trainer``; the callback reports to
this sweep's own socket, so the events take the same path as a sweep's. Offers the same
interface as :class:`~tracetui.runner.sweep.Sweep` to the TUI and headless mode.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import shutil
import sys
from pathlib import Path
from typing import Callable

from ..core import envvars
from ..core.accepted import OPTIMIZERS, SCHEDULERS, refusal, valid_list
from ..core.config import ConfigError, SweepConfig
from ..core.text import say
from ..events.schema import make
from ..core.knobs import KNOBS
from ..planning.plan import Planner, RunSpec
from ..events.log import EventLog
from ..core.trial import Trial
from ..events.sockpath import private_socket
from ..events.wire import SocketListener
from ..launch.dialects import SPLIT_FLAGS, TrialCommand, _option, launcher_for, script_parts, takes_flags, world_size
from ..launch.fork import ForkTarget, environment_of, fork_target
from ..launch.plan import run_plan
from .executor import executor
from .lifetime import forking, trial_context
from .probeenv import probe_env
from .onray import ray_executor
from ..events.log import new_sweep_id
from .sweep import SweepBase


def check_command(cmd: list[str], varied: dict | None = None) -> None:
    """Refuse a command line that already fixes what the sweep sets per trial, and a varied
    setting that cannot be set on this kind of command (:mod:`.launch`)."""
    if not cmd:
        raise ConfigError("sweep", "no training command given", "write it after --, e.g. -- python train.py")
    check_program(cmd)
    check_script_values(cmd)
    launcher_for(cmd).check(cmd, varied or {})


def check_program(cmd: list[str], name: str = "sweep") -> None:
    """Refuse a command whose program cannot be started here (not on ``PATH``, not an executable
    file): said now, in one line, not as a traceback once the first run starts it."""
    program = cmd[0]
    if shutil.which(program) is not None:
        return
    if os.sep in program and os.path.isdir(program):
        raise ConfigError(name, f"{program} is a folder, not a program", "give the training command, e.g. python train.py")
    if os.sep in program and os.path.exists(program):
        how = "python" if program.endswith(".py") else "sh" if program.endswith(".sh") else "INTERPRETER"
        raise ConfigError(name, f"{program} is not executable",
                          f"make it so (chmod +x {program}), or put its interpreter before it ({how} {program})")
    raise ConfigError(name, f"{program} is not a command here (not on PATH, not an executable file)",
                      "give the training command, e.g. python train.py")


#: the trainer's flags whose values its library declares (:mod:`tracetui.core.accepted`)
CHECKED_FLAGS = {"optim": OPTIMIZERS, "lr_scheduler_type": SCHEDULERS}


def check_script_values(cmd: list[str], name: str = "sweep") -> None:
    """The values a script's own command line gives its trainer's arguments whose library
    declares what they take (``--optim``, ``--lr_scheduler_type``), against that library in the
    script's own Python environment: a value it refuses would fail every run as it starts. Only
    for commands known to hand those flags to the trainer (``trl sft``, a script that parses
    them with ``HfArgumentParser``): another script's ``--optim`` may be its own."""
    _launcher, program, args = script_parts(cmd)
    if not (program.startswith("trl ") or (program.endswith(".py") and takes_flags(cmd))):
        return
    home = environment_of(cmd)
    for arg, declared in CHECKED_FLAGS.items():
        value = _option(args, (f"--{arg}", "--" + arg.replace("_", "-")))
        why = refusal(declared, value, home) if value is not None else None
        if why:
            raise ConfigError(name, f"the command's --{arg}: {why}", valid_list(declared, home))


#: settings of tracetui's own trainer that a swept script decides for itself, and what it uses
SCRIPT_OWNS = {"model": "its own model", "dataset": "its own data", "dataset_split": "its own data",
               "text_field": "its own data", "seq_len": "its own max_length", "steps": "its own max_steps",
               "lora_r": "its own LoRA config", "lora_alpha": "its own LoRA config",
               "lora_dropout": "its own LoRA config", "lora_targets": "its own LoRA config",
               "precision": "its own bf16/fp16", "lr": "its own learning rate", "seed": "its own seed",
               "device": "its own device"}


def check_settings_reach(cfg: SweepConfig) -> None:
    """Refuse a setting given to a script sweep that would not reach the script, rather than
    ignore it without a word: tracetui's own trainer's settings (the script uses its own), and a
    speed setting given for every run (a script's runs get only what ``--vary`` compares)."""
    default = SweepConfig()
    for name, what in SCRIPT_OWNS.items():
        if getattr(cfg, name) != getattr(default, name):
            flag = "--" + name.replace("_", "-")
            raise ConfigError(flag, f"is for tracetui's built-in sweep: a swept script uses {what}",
                              "remove it, or set it in the script's own arguments")
    for name in KNOBS:
        if hasattr(cfg, name) and getattr(cfg, name) != getattr(default, name) and name not in cfg.varied():
            flag = "--" + name.replace("_", "-")
            raise ConfigError(flag, "does not reach a swept script's runs (they get only the settings --vary compares)",
                              f"set it in the script, or compare values with --vary {name}=A,B")


def check_script_exists(cmd: list[str]) -> None:
    """Refuse ``python train.py`` when train.py is not there (before every run fails on it)."""
    for arg in cmd[1:3]:  # python train.py, python -u train.py
        if arg.endswith(".py") and not os.path.exists(arg):
            raise ConfigError("sweep", f"{arg} does not exist", "give the training script's path")


def script_notes(varied: dict) -> list[str]:
    """What to know about the varied settings' flags on a user's script (one line each)."""
    return [f"--vary {n}: {KNOBS[n].script_note}" for n in varied if KNOBS[n].script_note]


def how_runs_start(cmd: list[str], fresh: bool = False) -> tuple[ForkTarget | None, str]:
    """What each run of ``cmd`` executes forked from the fork server, or None and why not."""
    if fresh:
        return None, "--fresh"
    if not forking():
        return None, f"{envvars.START}=spawn" if os.environ.get(envvars.START) else "no fork server here"
    return fork_target(cmd)


def start_line(cmd: list[str], fork: ForkTarget | None, why: str) -> str:
    """One line on how a script sweep's runs start, and over how many processes."""
    home = environment_of(cmd)
    if fork is not None:
        line = "each run starts forked from tracetui's server (the libraries imported once; --fresh: not)"
    elif home is not None:
        line = f"each run starts as a fresh process in the Python environment {home} (as if activated)"
    else:
        line = f"each run starts as a fresh process ({why})"
    processes, said = world_size(cmd)
    if processes > 1:
        line += f"; {processes} training processes per run ({said}): the split is per process"
    return "; ".join([line, *launcher_for(cmd).notes()])


class ScriptSweep(SweepBase):
    short_runs = False  # the script's own --max_steps decides a run's steps

    def __init__(self, cfg: SweepConfig, trials: list[Trial], cmd: list[str],
                 on_event: Callable[[dict], None] | None = None, planner: Planner | None = None,
                 fresh: bool = False):
        self._check(cmd, cfg)
        self.cmd = cmd
        self.launcher = launcher_for(cmd)
        #: what each run executes forked from the fork server, or None (and why not)
        self.fork, self.fork_why = self._fork_target(fresh)
        self.on_event = on_event
        self.sweep_id = new_sweep_id()
        self.dir = Path(cfg.runs_dir) / self.sweep_id
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = EventLog(self.dir / "events.jsonl")
        self._setup(cfg, trials, planner)
        if cfg.ray:  # each run a Ray task on the cluster's lanes (:mod:`.raycluster`)
            self.fork, self.fork_why, self._ctx = None, "--ray", None
            self._executor = ray_executor(cfg, self._device != "cpu", [os.getcwd(), str(self.dir.resolve())],
                                          fresh=fresh)
            self.lanes = self._executor.lanes()
        else:  # the fork server starts here, before any app owns the terminal
            self._ctx = trial_context() if self.fork is not None else None
            self._executor = executor(self._ctx)  # how each run's process starts (:mod:`.executor`)
        self.warnings: list[str] = script_notes(cfg.varied())
        #: what the ranks send over the socket, read by the supervisor of the running trial
        self._inbox: "queue.Queue[dict]" = queue.Queue()
        # A private socket: its folder is made 0700 by the listener, and removed on every way out
        # this process lives through (close, an error here, interpreter exit).
        self._sockdir, self.socket_path = private_socket("tracetui-sweep-", "sweep.sock")
        atexit.register(self._remove_sockdir)
        try:
            self.listener = SocketListener(self.socket_path, self._inbox.put, origin=None).start()
        except BaseException:
            self._remove_sockdir()
            raise

    def _check(self, cmd: list[str], cfg: SweepConfig) -> None:
        check_command(cmd, cfg.varied())

    def _fork_target(self, fresh: bool) -> tuple[ForkTarget | None, str]:
        return how_runs_start(self.cmd, fresh)

    def start_line(self) -> str:
        if self.cfg.ray:
            return self._executor.describe()
        return start_line(self.cmd, self.fork, self.fork_why)

    @property
    def user_command(self) -> list[str] | None:
        """The user's own training command (what the recommendation's command line is built on)."""
        return self.cmd

    def trial_command(self, spec: RunSpec, folder: Path) -> TrialCommand:
        return self.launcher.trial_command(self.cmd, spec.trial, folder)

    def _run_one(self, spec: RunSpec) -> str:
        env = probe_env(self.socket_path, self.cfg.warmup, **{envvars.RUN_ID: spec.run_id,
                                                               envvars.VARIED: json.dumps(spec.trial.settings_dict)})
        if self.cfg.until_confident is not None:
            refs = self.references(spec)
            env.update({envvars.UNTIL_CONFIDENT: f"{self.cfg.until_confident}:{self.cfg.min_steps}",
                        envvars.REFERENCES: json.dumps(refs)})
        if self.cfg.gpus:
            env["CUDA_VISIBLE_DEVICES"] = self.cfg.gpus
        env = self.launcher.environment(self.cmd, env)
        name = spec.run_id.split("/", 1)[1].replace("#", "_r")
        log_path = self.dir / (name + ".log")
        command = self.trial_command(spec, self.dir / name)
        env[envvars.PLAN] = json.dumps(run_plan(spec.trial, self.dir / name, command.given,
                                                "its config file" if command.copy is not None else "command line"))
        command.write()
        if command.changed:
            self._emit(make("notice", spec.run_id, level="info",
                            message=f"its {self.launcher.name} config: {command.described()}"))
        target = fork_target(command.argv)[0] if self.fork is not None else None
        where = self._executor.where(spec.gpu)
        if where and self.cfg.ray:
            self._emit(make("notice", spec.run_id, level="info", message=where))
        child = self._executor.command(command.argv, target, env, self._inbox, log_path, spec.gpu, spec.run_id)
        child.memory_limit = self.memory_capped()
        return self._supervised(spec, child)

    def memory_capped(self) -> float | None:
        """--memory-limit where it caps this sweep's trials: not on a user's script."""
        return None

    def close(self) -> None:
        try:
            self._executor.close()
            self.listener.close()
            drops = self.listener.describe_drops()
            if drops:  # events the runs sent that the sweep could not take: their rows miss them
                say(f"tracetui: warning: of the runs' events, tracetui {drops}; the rows lack what those said")
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

    def _fork_target(self, fresh: bool) -> tuple[ForkTarget | None, str]:
        return None, "torchrun starts the ranks"

    def start_line(self) -> str:
        return f"each run starts torchrun over {self.cfg.nproc_per_node} processes"

    @property
    def user_command(self) -> None:
        return None  # tracetui's own trainer: a built-in sweep's config, no command of the user's

    def memory_capped(self) -> float | None:
        return self.cfg.memory_limit  # each rank caps its own memory (tracetui.runner.ddp)

    def trial_command(self, spec: RunSpec, folder: Path) -> TrialCommand:
        cfg = self.cfg
        launch = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(cfg.nproc_per_node)]
        if cfg.nnodes > 1:
            launch += ["--nnodes", str(cfg.nnodes), "--node-rank", str(cfg.node_rank),
                       "--rdzv-endpoint", cfg.rdzv_endpoint, "--rdzv-backend", "c10d"]
        else:
            launch += ["--standalone"]
        t = spec.trial
        return TrialCommand(launch + ["-m", "tracetui.runner.ddp", "--config-json", json.dumps(self.payload_config(spec)),
                                      SPLIT_FLAGS[0], str(t.micro_batch), SPLIT_FLAGS[1], str(t.grad_accum)])
