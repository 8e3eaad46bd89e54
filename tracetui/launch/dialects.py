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

:func:`launcher_for` picks the kind (:data:`KINDS`, the registry of kinds of command);
:mod:`.fork` says whether a command's runs can be forked.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from ..core.config import ConfigError
from ..core.knobs import KNOBS, fmt, script_args
from ..core.trial import Trial
from .fork import environment_of
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
    #: whether the command runs the user's own Python code, which may set the trainer's values
    #: itself: the recommendation is then also a change of its source (``--emit-patch``)
    own_code = True

    @classmethod
    def recognise(cls, cmd: list[str]) -> "Flags | None":
        """This kind of launcher for ``cmd``, or None where ``cmd`` is not of this kind (a kind
        in :data:`KINDS`). Flags is the kind of every command no other kind recognises."""
        return cls()

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

    def library_reads(self, name: str, value: Any) -> bool:
        """Whether ``name`` at ``value`` reaches the library under its own name (its ``Knob.accepts`` apply)."""
        return True

    # ---- the recommendation handed back -----------------------------------------------------
    def words(self, cmd: list[str]) -> Callable[[dict], str] | None:
        """How a recommendation says a trial in this command's own terms (:func:`tracetui.analysis.
        recommendation`'s ``speak``), or None: in ``SFTConfig``'s."""
        return None

    def handoff(self, cmd: list[str], trial: Trial) -> dict[str, Any]:
        """What the summary's JSON says of the recommended ``trial``: the command that runs it."""
        return {"command": shlex.join(self.trial_command(cmd, trial).argv)}

    def winning_line(self, cmd: list[str], trial: Trial, emitted: str | None = None) -> str:
        """What the recommendation changes in the user's command, as one line; ``emitted``: the
        file ``--emit-config`` wrote, where the command can run on it."""
        return f"the recommendation's command: {shlex.join(self.trial_command(cmd, trial).argv)}"

    def own_config(self, cmd: list[str], trial: Trial, path: str) -> tuple[str, list[str], list[str]] | None:
        """The recommendation as this command's own config file, to be written at ``path``: its
        text, the command that runs on it, and notes (one line each); None where the command
        has no config of its own (``--emit-config`` then writes a TRL config)."""
        return None

    def check_patch(self, cmd: list[str]) -> None:
        """Refuse ``--emit-patch`` (one :class:`ConfigError` line) for a command with no source of
        the user's that takes the split: ``trl sft`` takes it on its command line."""
        program = script_parts(list(cmd))[1]
        if program.startswith("trl "):
            raise ConfigError("--emit-patch", f"{program} takes the split on its command line: the "
                              "recommendation's command is the handoff",
                              "drop it; --emit-config FILE.yaml writes it as a config file")


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

    own_code = False

    def __init__(self, dialect: Dialect, index: int):
        self.dialect, self.index = dialect, index
        self.name = dialect.name

    @classmethod
    def recognise(cls, cmd: list[str]) -> "ConfigFile | None":
        found = dialect_of(cmd)
        return cls(*found) if found else None

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

    def library_reads(self, name: str, value: Any) -> bool:  # (axolotl's optimizer key takes axolotl's own names)
        keys = self.dialect.settings.get(name)
        return keys is None or set(keys(value)) == set(KNOBS[name].sft(value))

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

    def handoff(self, cmd: list[str], trial: Trial) -> dict[str, Any]:
        """The keys the config gets (None: left out)."""
        changed = self.recommended(list(cmd), trial)[1]
        return {"config_keys": {k: (None if new is DROPPED else new) for k, _old, new in changed}}

    def winning_line(self, cmd: list[str], trial: Trial, emitted: str | None = None) -> str:
        """The keys the config gets (and the command on the emitted file, when there is one)."""
        changed = self.recommended(list(cmd), trial)[1]
        keys = ", ".join(f"{k}: {v}" for k, _old, v in changed) or "nothing (it is the config's own)"
        line = f"the recommendation's keys for {cmd[self.index]}: {keys}"
        if emitted:
            line += f"; run {shlex.join(self._on(cmd, emitted))}"
        return line

    def own_config(self, cmd: list[str], trial: Trial, path: str) -> tuple[str, list[str], list[str]]:
        """The user's config with the recommended keys (its comments and order kept)."""
        text, changed, said = self.handed(list(cmd), trial)
        return text, self._on(cmd, path), [f"{k}: {old} -> {new}" for k, old, new in changed] + said

    def _on(self, cmd: list[str], path: str) -> list[str]:
        """``cmd`` run on the config at ``path``."""
        argv = list(cmd)
        argv[self.index] = path
        return argv

    def check_patch(self, cmd: list[str]) -> None:
        raise ConfigError("--emit-patch", f"{self.name} takes the split from its config file "
                          f"{cmd[self.index]}, not from a script of yours",
                          "drop it; --emit-config FILE writes that config with the recommended keys")

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


#: the kinds of command besides :class:`Flags` (each a :class:`Flags` whose ``recognise`` says
#: whether a command is its kind), asked in order; a new kind of launcher is one entry here
KINDS: list[type[Flags]] = [ConfigFile]


def launcher_for(cmd: list[str]) -> Flags:
    """The kind of launcher ``cmd`` is: the first of :data:`KINDS` that recognises it, else flags."""
    for kind in KINDS:
        found = kind.recognise(cmd)
        if found is not None:
            return found
    return Flags()
