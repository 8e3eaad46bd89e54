"""The launcher seam: per kind of user command, how a trial's split and settings reach it, and
whether its runs can start forked from the fork server.

Three kinds of command:

- **flags** (:class:`Flags`): a script that reads its arguments with ``HfArgumentParser`` /
  ``TrlParser`` (``python train.py``, ``python -m pkg.train``, ``trl sft``), alone or after a
  launcher (``accelerate launch``, ``torchrun``): the split and settings go as flags after the
  script's own, and the launcher's process count is the world size.
- **config files** (:class:`ConfigFile`): trainers that read one YAML file (axolotl's
  ``micro_batch_size``, LLaMA-Factory's ``per_device_train_batch_size``): each trial gets a copy
  of the user's file with the split's and settings' keys changed (and ``output_dir`` moved into
  the sweep's folder, so that a measurement never writes over the user's checkpoints), passed
  instead of the user's file, which is never written. The copy is the user's text with those
  values replaced in place (:mod:`.yaml_edit`): comments, anchors and order kept, and what a
  change would change beside it (an alias of a changed value) said and written out.

:func:`launcher_for` picks the kind; :func:`fork_target` says whether a command's runs can be
forked (tracetui's own interpreter runs it, no launcher of processes in front).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from ..core.config import ConfigError
from ..core.knobs import KNOBS, fmt, script_args
from ..core.trial import Trial
from .yaml_edit import EditError, edit

SPLIT_FLAGS = ("--per_device_train_batch_size", "--gradient_accumulation_steps")
#: what marks a script that reads its trainer's arguments from its command line
PARSER_MARKS = ("HfArgumentParser", "TrlParser", "parse_args_into_dataclasses")
#: how a dry run says that a script gets its split inside its trainer alone
NOT_GIVEN = ("the script parses no HfArgumentParser flags: the split and settings are applied "
             "inside its trainer")
#: launchers of several processes: flags go after their script, the world size is theirs
LAUNCHERS = {"accelerate": ("--num_processes", "--num-processes"),
             "torchrun": ("--nproc-per-node", "--nproc_per_node"),
             "torch.distributed.run": ("--nproc-per-node", "--nproc_per_node"),
             "deepspeed": ("--num_gpus", "--num-gpus")}
YAML_SUFFIXES = (".yml", ".yaml")


@dataclass
class TrialCommand:
    """One trial's command: ``argv``; ``changed``: (key, old, new) for each key a config-file
    trainer's copy changed; ``copy``: the copy's path and text (written when the run starts);
    ``given``: whether the command itself carries the split (flags, a copy), or the split reaches
    the script only inside its trainer (:mod:`tracetui.probe.apply`); ``said``: what the copy's
    edit did beside the changed keys (an alias written out), one line each."""
    argv: list[str]
    changed: list[tuple[str, Any, Any]] = field(default_factory=list)
    copy: tuple[Path, str] | None = None
    given: bool = True
    said: list[str] = field(default_factory=list)

    def write(self) -> None:
        if self.copy is not None:
            self.copy[0].parent.mkdir(parents=True, exist_ok=True)
            self.copy[0].write_text(self.copy[1], encoding="utf-8")

    def described(self) -> str:
        """One line for ``--dry-run``: the command, and what the copy changed."""
        line = shlex.join(self.argv)
        if self.changed:
            line += "; changes " + ", ".join(f"{k} {_show(old)} -> {_show(new)}" for k, old, new in self.changed)
        if not self.given:
            line += f"; {NOT_GIVEN}"
        return "; ".join([line, *self.said])


class _Dropped:
    def __repr__(self) -> str:
        return "(left out)"


#: a key a config copy leaves out
DROPPED: Any = _Dropped()


def _show(value: Any) -> str:
    return "(unset)" if value is None else "(left out)" if value is DROPPED else fmt(value)


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
        if arg == "-m" and i + 1 < len(cmd) and cmd[i + 1] not in LAUNCHERS:
            return cmd[:i + 1], cmd[i + 1], cmd[i + 2:]
    return [], "", list(cmd)


def _option(args: list[str], names: tuple[str, ...]) -> str | None:
    """The value of the first of ``names`` in ``args`` (``--name V`` or ``--name=V``)."""
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag in names:
            return value if eq else (args[i + 1] if i + 1 < len(args) else None)
    return None


def takes_flags(cmd: list[str]) -> bool:
    """Whether ``cmd``'s script reads its trainer's arguments from its command line: a module or
    console script (``trl sft``) is taken to; a ``.py`` file only where its source parses them
    (:data:`PARSER_MARKS`). A script that builds its arguments itself would ignore the flags, or
    refuse ones its own parser does not know: it gets its split inside its trainer alone."""
    program = script_parts(cmd)[1]
    if not program.endswith(".py"):
        return True
    try:
        text = Path(program).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return True
    return any(mark in text for mark in PARSER_MARKS)


def world_size(cmd: list[str]) -> tuple[int, str]:
    """How many training processes the command's launcher starts on this machine, and the flag
    that says so (1 and "" without a launcher, or when the launcher leaves it to its config)."""
    launcher, program, args = script_parts(cmd)
    names = [os.path.basename(a) for a in launcher]
    if program.startswith("trl "):  # TRL's CLI hands the flags it does not read to accelerate launch
        names, launcher = ["accelerate"], args
    for name, flags in LAUNCHERS.items():
        if name in names:
            value = _option(launcher, flags)
            if value is not None and value.isdecimal() and int(value) > 0:
                return int(value), f"{name} {flags[0]} {value}"
    return 1, ""


class Flags:
    """How a trial reaches one kind of command (see the module's note). This class is the
    default kind: an ``HfArgumentParser``/``TrlParser`` script, alone or after accelerate or
    torchrun, given the split and settings as flags; :class:`ConfigFile` changes how a trial
    reaches the command, and keeps the rest."""

    name = "flags"

    def check(self, cmd: list[str], varied: dict) -> None:
        """Refuse a command that already fixes what the sweep sets per trial, or a varied
        setting this kind of command cannot be given (one :class:`ConfigError` line)."""
        owned = list(SPLIT_FLAGS)
        for name in varied:
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

    def trial_command(self, cmd: list[str], trial: Trial, folder: Path | None = None) -> TrialCommand:
        """The command for ``trial``; ``folder``: where the run's own files go (one folder per
        run: a run never resumes from another's checkpoints; None: a dry run, nothing written)."""
        if not takes_flags(cmd):
            return TrialCommand(list(cmd), given=False)
        return TrialCommand(cmd + [SPLIT_FLAGS[0], str(trial.micro_batch), SPLIT_FLAGS[1], str(trial.grad_accum)]
                            + script_args(trial.settings_dict))

    def environment(self, cmd: list[str], env: dict[str, str]) -> dict[str, str]:
        """``env`` as the command runs in it: a program of another Python environment as if that
        environment were activated (its ``bin`` first on ``PATH``: what it starts by name, such as
        axolotl's ``accelerate``, is its own)."""
        env = dict(env)
        home = environment_of(cmd)
        if home is not None:
            env["PATH"] = os.pathsep.join([os.path.join(home, "bin")] + [p for p in env.get("PATH", "").split(os.pathsep)
                                                                          if p and p != os.path.join(home, "bin")])
            if os.path.isfile(os.path.join(home, "pyvenv.cfg")):
                env["VIRTUAL_ENV"] = home
        return env

    def notes(self) -> list[str]:
        """What the runs of this kind of command get that the user did not write (one line each)."""
        return []


@dataclass(frozen=True)
class Dialect:
    """A config-file trainer: how its command is recognised and what its YAML calls things."""
    name: str
    #: console scripts and modules that are this trainer's command line
    programs: tuple[str, ...]
    #: the YAML keys of the micro-batch and of the accumulation steps
    split: tuple[str, str]
    #: the YAML keys of tracetui's varied settings (knob name -> value -> keys)
    settings: dict[str, Callable[[Any], dict]]
    #: where a command-line override of a key would be (``--key V`` or ``key=V``)
    override: Callable[[str], str]
    #: keys a copy leaves out, as they would contradict the split (axolotl refuses ``batch_size``
    #: beside ``gradient_accumulation_steps``)
    drops: tuple[str, ...] = ()
    #: environment a measured run gets unless the user set it (name -> (value, why))
    env: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: the split the trainer takes where the config leaves a split key out (its defaults)
    defaults: tuple[int, int] = (1, 1)
    #: a key the accumulation is derived from where the config sets none (axolotl's
    #: ``batch_size``: accumulation = batch_size // micro_batch_size)
    total: str | None = None


def _same(key: str) -> Callable[[Any], dict]:
    return lambda v: {key: v}


DIALECTS = (
    Dialect("axolotl", ("axolotl", "axolotl.cli.train", "axolotl.cli.main"),
            ("micro_batch_size", "gradient_accumulation_steps"),
            {"activation_checkpointing": _same("gradient_checkpointing"), "optim": _same("optimizer"),
             "torch_compile": _same("torch_compile"), "dataloader_workers": _same("dataloader_num_workers"),
             "pin_memory": _same("dataloader_pin_memory")},
            override=lambda arg: arg.split("=", 1)[0].lstrip("-").replace("-", "_") if arg.startswith("--") else "",
            drops=("batch_size",), total="batch_size",
            # offline, its usage reporting holds the process open for minutes after training
            env={"AXOLOTL_DO_NOT_TRACK": ("1", "its usage reporting off for measured runs")}),
    Dialect("LLaMA-Factory", ("llamafactory-cli", "lmf", "llamafactory.cli", "llamafactory.launcher"),
            ("per_device_train_batch_size", "gradient_accumulation_steps"),
            {"activation_checkpointing": lambda v: {"disable_gradient_checkpointing": not v},
             "liger": _same("enable_liger_kernel"), "optim": _same("optim"), "torch_compile": _same("torch_compile"),
             "dataloader_workers": _same("dataloader_num_workers"), "pin_memory": _same("dataloader_pin_memory"),
             "attn_implementation": lambda v: {"flash_attn": {"eager": "disabled", "sdpa": "sdpa",
                                                              "flash_attention_2": "fa2"}.get(v, v)}},
            override=lambda arg: arg.split("=", 1)[0] if "=" in arg and not arg.startswith("-") else "",
            defaults=(8, 1)),  # TrainingArguments' own: LLaMA-Factory parses its YAML into them
)


def dialect_of(cmd: list[str]) -> tuple[Dialect, int] | None:
    """The config-file trainer ``cmd`` runs and the index of its YAML argument, or None."""
    names = {os.path.basename(a) for a in cmd}
    for dialect in DIALECTS:
        if names & set(dialect.programs):
            for i, arg in enumerate(cmd):
                if arg.lower().endswith(YAML_SUFFIXES):
                    return dialect, i
    return None


class ConfigFile(Flags):
    """axolotl, LLaMA-Factory: a per-trial copy of the user's YAML with the keys changed."""

    def __init__(self, dialect: Dialect, index: int):
        self.dialect, self.index = dialect, index
        self.name = dialect.name

    def _source(self, cmd: list[str]) -> tuple[Path, str, dict]:
        path = Path(cmd[self.index])
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError("sweep", f"cannot read {path} ({exc.strerror or exc})",
                              f"give the path of the {self.name} config") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            where = getattr(exc, "problem_mark", None)
            at = f" at line {where.line + 1}" if where is not None else ""
            raise ConfigError("sweep", f"{path} is not valid YAML{at}", "fix the file, then run again") from None
        if not isinstance(data, dict):
            raise ConfigError("sweep", f"{path} does not hold a mapping of keys", f"give the {self.name} config file")
        return path, text, data

    def keys(self, trial: Trial, data: dict) -> dict[str, Any]:
        """The keys a copy sets for ``trial`` (:data:`DROPPED`: left out of the copy)."""
        d = self.dialect
        out: dict[str, Any] = {d.split[0]: trial.micro_batch, d.split[1]: trial.grad_accum}
        for name, value in trial.settings_dict.items():
            out.update(d.settings[name](value))
        out.update({key: DROPPED for key in d.drops if key in data})
        return out

    def environment(self, cmd: list[str], env: dict[str, str]) -> dict[str, str]:
        env = super().environment(cmd, env)
        for name, (value, _why) in self.dialect.env.items():
            env.setdefault(name, value)
        return env

    def notes(self) -> list[str]:
        return [f"{name}={value} unless set: {why}" for name, (value, why) in self.dialect.env.items()
                if name not in os.environ]

    def check(self, cmd: list[str], varied: dict) -> None:
        for name in varied:
            if name not in self.dialect.settings:
                raise ConfigError("--vary", f"{name} has no key tracetui knows in {self.name}'s config",
                                  f"set it in the config and compare it in two sweeps, or vary one of "
                                  f"{', '.join(sorted(self.dialect.settings))}")
        owned = set(self.dialect.split) | {k for n in varied for k in self.dialect.settings[n](next(iter(varied[n])))}
        for arg in cmd[self.index + 1:]:
            key = self.dialect.override(arg)
            if key in owned:
                raise ConfigError("sweep", f"the command line already sets {key} ({arg})",
                                  "remove it: tracetui sets it in each trial's copy of the config")
        # a copy that cannot be made in the file's own text is refused now, not at a run's start
        self.trial_command(cmd, Trial(1, 1, settings={n: next(iter(v)) for n, v in varied.items()}))

    def _edited(self, path: Path, text: str, data: dict, changes: dict[str, Any]) -> tuple[str, list, list[str]]:
        """``text`` with ``changes`` (:mod:`.yaml_edit`), what changed (key, old, new), and what the
        edit did beside them."""
        new = {k: v for k, v in changes.items() if v is not DROPPED and (k not in data or data[k] != v)}
        try:
            done = edit(text, new, drop=tuple(k for k, v in changes.items() if v is DROPPED))
        except EditError as exc:
            raise ConfigError("sweep", f"{path}: {exc}",
                              "write the value itself in place of the alias, then run again") from None
        return done.text, [(k, data.get(k), v) for k, v in changes.items() if data.get(k) != v], done.said

    def trial_command(self, cmd: list[str], trial: Trial, folder: Path | None = None) -> TrialCommand:
        path, text, data = self._source(cmd)
        changes = self.keys(trial, data)
        # a measurement's checkpoints go to the run's folder, never the user's
        changes["output_dir"] = str((folder / "output").resolve()) if folder is not None else "{the run's folder}/output"
        copy, changed, said = self._edited(path, text, data, changes)
        argv = list(cmd)
        if folder is None:  # a dry run: nothing written
            argv[self.index] = f"{{copy of {path}}}"
            return TrialCommand(argv, changed, said=said)
        copy_path = folder / f"{path.stem}{path.suffix}"
        argv[self.index] = str(copy_path)
        return TrialCommand(argv, changed, (copy_path, copy), said=said)

    def handed(self, cmd: list[str], trial: Trial) -> tuple[str, list[tuple[str, Any, Any]], list[str]]:
        """The user's config with ``trial``'s keys: the file a recommendation hands over, what it
        changes (key, old, new), and what its edit did beside them."""
        path, text, data = self._source(cmd)
        return self._edited(path, text, data, self.keys(trial, data))

    def recommended(self, cmd: list[str], trial: Trial) -> tuple[str, list[tuple[str, Any, Any]]]:
        """:meth:`handed` without what its edit did beside the keys."""
        return self.handed(cmd, trial)[:2]

    def own_split(self, data: dict) -> tuple[int, int, str] | None:
        """The split the user's config trains (per process): micro-batch, accumulation, and how
        the config says it; None where a split key is not a whole number."""
        d = self.dialect
        try:
            mb = int(data.get(d.split[0], d.defaults[0]))
            if data.get(d.split[1]) is None and d.total and data.get(d.total) is not None:
                ga = max(1, int(data[d.total]) // mb)
                return mb, ga, f"{d.split[0]} {mb}, {d.total} {data[d.total]}"
            ga = int(data.get(d.split[1], d.defaults[1]))
        except (TypeError, ValueError):
            return None
        said = [f"{key} {value}" + ("" if key in data else " (its default)") for key, value in zip(d.split, (mb, ga))]
        return mb, ga, " x ".join(said)

    def words(self, cmd: list[str]) -> Callable[[dict], str]:
        """How a recommendation of this trainer's sweep says its trial (:func:`tracetui.analysis.
        recommendation`): in the trainer's own keys, as its config writes them (where settings
        were compared), and where the config's own effective batch is not the recommendation's."""
        try:
            path, _text, data = self._source(cmd)
            own = self.own_split(data)
        except ConfigError:  # the file is gone since (a replay): the keys alone
            path, own = Path(cmd[self.index]), None
        d = self.dialect

        def speak(row: dict) -> str:
            trial = Trial.from_fields(row)
            out = ""
            if trial.settings:
                keys: dict[str, Any] = {d.split[0]: trial.micro_batch, d.split[1]: trial.grad_accum}
                for name, value in trial.settings:
                    keys.update(d.settings[name](value) if name in d.settings else {})
                out += f"; in {path.name}: " + ", ".join(f"{k}: {fmt_yaml(v)}" for k, v in keys.items())
            if own is not None:
                mb, ga, how = own
                eb = mb * ga * trial.world_size
                if eb != trial.effective_batch:
                    over = f" over {trial.world_size} processes" if trial.world_size > 1 else ""
                    out += (f" (your config trains effective batch {eb}: {how}{over}; this answer is for "
                            f"{trial.effective_batch})")
            return out

        return speak


def fmt_yaml(value: Any) -> str:
    """A value as a YAML file writes it (``true``, ``4``, ``adamw_torch``)."""
    return "true" if value is True else "false" if value is False else "null" if value is None else str(value)


def launcher_for(cmd: list[str]) -> Flags:
    found = dialect_of(cmd)
    return ConfigFile(*found) if found else Flags()


# ---- forked starts ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ForkTarget:
    """What a forked run executes as its ``__main__``: a file (a script, a console script) or a
    module; ``argv0``: its ``sys.argv[0]``; ``path0``: its ``sys.path[0]``; ``args``: the rest of
    its ``sys.argv``."""
    kind: str  # "path" or "module"
    target: str
    argv0: str
    path0: str
    args: tuple[str, ...] = ()


#: interpreter options a forked run honours (the rest start a fresh interpreter)
FORKABLE_OPTIONS = ("-u",)
#: commands that start processes of their own: never forked
NOT_FORKED = ("accelerate", "torchrun", "deepspeed", "torch.distributed.run", "torch.distributed.launch",
              "accelerate.commands.launch", "accelerate.commands.accelerate_cli")
#: libraries that patch transformers, TRL and PEFT as they are imported, and so must be imported
#: before them: a script that imports one is never forked (the fork server has imported those)
IMPORTED_FIRST = ("unsloth",)
_IMPORTS_FIRST = re.compile(r"^\s*(?:from|import)\s+(" + "|".join(IMPORTED_FIRST) + r")\b", re.MULTILINE)


def imports_first(path: str) -> str | None:
    """The library of :data:`IMPORTED_FIRST` that the script at ``path`` imports, or None."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = _IMPORTS_FIRST.search(text)
    return found.group(1) if found else None


def _prefix(python: str) -> str:
    """The environment an interpreter runs in: its virtual environment's folder (pyvenv.cfg),
    else its installation's."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    if os.path.isfile(os.path.join(here, "pyvenv.cfg")):
        return here
    return os.path.dirname(os.path.dirname(os.path.realpath(python)))


def environment_of(cmd: list[str]) -> str | None:
    """The folder of the Python environment (a virtual environment, a conda environment) whose
    ``bin`` holds ``cmd``'s program, when it is not tracetui's own; else None."""
    if not cmd:
        return None
    program = cmd[0] if os.sep in cmd[0] else shutil.which(cmd[0])
    if not program:
        return None
    home = os.path.dirname(os.path.dirname(os.path.abspath(program)))
    if not any(os.path.exists(os.path.join(home, m)) for m in ("pyvenv.cfg", "conda-meta")):
        return None
    return None if os.path.abspath(home) == os.path.abspath(sys.prefix) else home


def _this_interpreter(python: str | None) -> bool:
    return bool(python) and _prefix(python) == _prefix(sys.executable) \
        and os.path.basename(os.path.realpath(python)) == os.path.basename(os.path.realpath(sys.executable))


def _shebang(path: str) -> str | None:
    """The interpreter a console script names on its first line (``#!/venv/bin/python``), or None."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        return shutil.which(words[1])
    return words[0] if "python" in os.path.basename(words[0]) else None


def fork_target(cmd: list[str], cwd: str | None = None) -> tuple[ForkTarget | None, str]:
    """Whether ``cmd``'s runs can be forked from this process's fork server, and why not: a
    Python script, ``-m module`` or console script run by this very interpreter (its
    environment), with no launcher of processes in front."""
    cwd = cwd or os.getcwd()
    if not cmd:
        return None, "no command"
    program = cmd[0] if os.sep in cmd[0] else (shutil.which(cmd[0]) or cmd[0])
    name = os.path.basename(program)
    if name in NOT_FORKED:
        return None, f"{name} starts processes of its own"
    if name.startswith("python"):
        if not _this_interpreter(program):
            return None, f"{program} is not the interpreter tracetui runs in ({sys.executable})"
        rest = cmd[1:]
        while rest and rest[0].startswith("-") and rest[0] != "-m":
            if rest[0] not in FORKABLE_OPTIONS:
                return None, f"the interpreter option {rest[0]}"
            rest = rest[1:]
        if len(rest) >= 2 and rest[0] == "-m":
            if rest[1] in NOT_FORKED:
                return None, f"{rest[1]} starts processes of its own"
            return ForkTarget("module", rest[1], rest[1], cwd, tuple(rest[2:])), ""
        if rest and rest[0].endswith(".py"):
            # as typed (the run starts in ``cwd``): its argv[0] and __file__ are what the interpreter would give
            script = os.path.join(cwd, rest[0])
            first = imports_first(script)
            if first:
                return None, (f"the script imports {first}, which must come before transformers, TRL and PEFT, "
                              "and the fork server has imported them")
            return ForkTarget("path", rest[0], rest[0], os.path.dirname(os.path.abspath(script)), tuple(rest[1:])), ""
        return None, "not a script or module"
    interpreter = _shebang(program) if os.path.isfile(program) else None
    if interpreter is None:
        return None, f"{name} is not a Python program"
    if not _this_interpreter(interpreter):
        return None, f"{name} runs in another Python environment ({interpreter})"
    return ForkTarget("path", program, program, os.path.dirname(os.path.abspath(program)), tuple(cmd[1:])), ""
