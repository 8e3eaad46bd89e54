"""``--emit-config FILE``: the recommendation as a TRL config file (or, for a config-file trainer
such as axolotl or LLaMA-Factory, as the user's own config with the recommended keys:
:func:`write_config`).

``trl sft --config FILE`` reads a YAML file whose keys are the fields of TRL's
``ScriptArguments``, ``SFTConfig``, ``ModelConfig`` and ``DatasetMixtureConfig``; a key that is
none of them is handed on to ``accelerate launch``, which refuses it. So the file holds only
fields of the installed TRL and transformers, read from their dataclasses when it is written,
each setting under the name the installed release gives it (:data:`RENAMED`); a setting the
installed release cannot express is said in the notes, never written as an unknown key.

What goes in:

* a script sweep (``tracetui sweep -- trl sft ARGS``, ``-- python train.py ARGS``): every
  argument the script was given, read with TRL's own parser (a ``--config`` file of the command
  included, as ``TrlParser`` reads it), then the measured split and the compared settings over
  them. tracetui's own defaults (model, data, LoRA, learning rate ...) never enter: the script
  trained with its own. What the parser does not know is named in the notes, with where to set it.
* a built-in sweep: the recommended split, every speed setting at the value tracetui measured
  (defaults included: TRL's differ from transformers', so a setting left out is not "off"), and
  the LoRA, precision, length and data settings of the sweep, so the fine-tune runs as measured.

What it reads of TRL and transformers comes from :mod:`tracetui.outputs.trl_facts` (read while the
sweep runs, where the command asked for the file from its start: :func:`prepare`).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any, Collection

import yaml

from ..analysis import sft_arguments
from ..core.config import (
    DATA_SUFFIXES,
    ConfigError,
    SweepConfig,
    dataset_kind,
    model_kind,
)
from ..core.knobs import model_args
from ..core.paths import write_whole
from ..core.trial import Trial
from ..launch.dialects import Flags, launcher_for, script_parts
from ..launch.plan import run_plan, script_command
from .script_patch import Found, recommended_changes
from . import trl_facts
from .trl_facts import FILE_KEYS, TrlFacts, facts, given_arguments, installed_fields, trl_parser
from .trl_facts import plain as _plain

__all__ = ["FILE_KEYS", "given_arguments", "installed_fields", "trl_parser"]  # (read here before)

#: fields renamed between releases, the newest name first: a setting is written under the first
#: name of its group that the installed release has (transformers 5.2x: ``activation_*``, before:
#: ``gradient_*``; TRL: ``max_length`` was ``max_seq_length``, ``dtype`` was ``torch_dtype``)
RENAMED: tuple[tuple[str, ...], ...] = (
    ("activation_checkpointing", "gradient_checkpointing"),
    ("activation_checkpointing_kwargs", "gradient_checkpointing_kwargs"),
    ("max_length", "max_seq_length"),
    ("dtype", "torch_dtype"),
    ("eval_strategy", "evaluation_strategy"),
)
_GROUP = {name: group for group in RENAMED for name in group}

SET_ME = "SET-ME"


def installed_names(settings: dict[str, Any], fields: Collection[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``settings`` under the names ``fields`` has (:data:`RENAMED`), and those it has no name for."""
    out: dict[str, Any] = {}
    missing: dict[str, Any] = {}
    for key, value in settings.items():
        name = next((n for n in _GROUP.get(key, (key,)) if n in fields), None)
        if name is None:
            missing[key] = value
        else:
            out[name] = value
    return out, missing


def _program(cmd: list[str] | None) -> tuple[str, list[str] | None]:
    """The program whose parser reads ``cmd`` and the arguments it reads (None: a built-in sweep)."""
    if not cmd:
        return "trl sft", None
    _launcher, program, args = script_parts(list(cmd))
    return program, args


def prepare(cmd: list[str] | None) -> None:
    """Start reading what the file for ``cmd`` needs of the installed TRL (its parser, fields and
    releases) while the sweep runs (:func:`tracetui.outputs.trl_facts.prepare`); nothing for a
    config-file trainer, whose file is its own config."""
    if cmd and type(launcher_for(list(cmd))).own_config is not Flags.own_config:
        return
    trl_facts.prepare(*_program(cmd))


def read_ahead(cmd: list[str] | None) -> TrlFacts:
    """What the installed TRL says for ``cmd`` (:func:`prepare`'s read, else read now)."""
    return facts(*_program(cmd))


def trl_config(row: dict, cfg: SweepConfig, cmd: list[str] | None = None, *,
               fields: Collection[str] | None = None, path: str = "FILE") -> tuple[dict[str, Any], list[str]]:
    """The config for ``row``'s trial, and what the user must read and set themselves.

    ``cmd``: the training command of a script sweep (after ``--``); None for a built-in sweep.
    ``fields``: the keys the config may hold (default: the installed TRL's and transformers'
    fields, :func:`installed_fields`). ``path``: the file's name in the notes."""
    notes = [f"tracetui's recommendation: {row.get('trial') or row['split']} at effective batch "
             f"{row['effective_batch']} on {row['machine']} ({row['step_ms_median']:.1f} ms/step)"
             if row.get("step_ms_median") else f"tracetui: {row.get('trial')}"]
    known = read_ahead(cmd)
    fields = known.fields if fields is None else set(fields)
    if cmd:
        layers, more = _script_layers(row, cmd, known, path)
    else:
        layers, more = _builtin_layers(row, cfg)
    out: dict[str, Any] = {}
    missing: dict[str, str] = {}
    for layer in layers:  # each under the installed names, the later over the earlier
        named, left = installed_names(layer, fields)
        out.update(named)
        for key, value in left.items():  # one line for a setting and its older names
            missing[_GROUP.get(key, (key,))[0]] = f"{key}={value!r}"
    for said in missing.values():
        notes.append(f"not written: {said} has no field in {known.versions} (nor under a name it had "
                     "before): set it in your training code, or use a release that has it")
    notes += more
    return {k: _plain(v) for k, v in out.items()}, notes


def _script_layers(row: dict, cmd: list[str], known: TrlFacts, path: str) -> tuple[list[dict], list[str]]:
    """A script sweep: what the script was given, then the measured split and settings over it."""
    launcher, program, args = script_parts(cmd)
    given, unmapped = known.arguments()
    # The script got the split and the varied settings as flags (script_command), nothing of
    # tracetui's own defaults: those stay out.
    measured = sft_arguments({**row, "knob_values": {}})
    measured.update(model_args(dict(row.get("varied") or {})))
    notes: list[str] = []
    classes = known.classes
    run = program if program.startswith("trl ") else "trl sft"
    if unmapped:
        said = "; ".join(f"{shlex.join(tokens)} ({why})" for tokens, why in unmapped)
        rest = shlex.join([t for tokens, _why in unmapped for t in tokens])
        notes.append(f"could not map: {said}: no field of {classes} in {known.versions}, so not in this file; "
                     f"pass them beside it ({run} --config {path} {rest}) or set them in your script")
    if not program.startswith("trl "):
        what = program or shlex.join(cmd)
        notes.append(f"measured as {what}: this file holds the arguments of it that {classes} read; run "
                     f"{run} --config {path}, or {what} --config {path} where the script reads --config "
                     "(TrlParser.parse_args_and_config)")
    found, _why = script_changes(row, cmd)
    if found is not None:  # what it sets itself: neither its flags nor this file reach it
        notes.append(f"{program or 'the script'} sets these itself (its arguments do not reach them): "
                     "change them there (--emit-patch FILE writes the change as a patch)")
        notes += [f"  {c.words(shown_path)}" for c in found.changes]
    if launcher and not os.path.basename(launcher[0]).startswith("python"):
        notes.append(f"launched with {shlex.join(launcher)}: launch the real run the same way")
    notes.append(f"the measured command: {shlex.join(winning_command(cmd, row))}")
    if "max_steps" in given:
        notes.append(f"max_steps={given['max_steps']} is the measured command's: set the real run's "
                     "length (max_steps or num_train_epochs)")
    return [given, measured], notes


def _builtin_layers(row: dict, cfg: SweepConfig) -> tuple[list[dict], list[str]]:
    """A built-in sweep: the model, data, LoRA and trainer settings tracetui trained with."""
    values = dict(row.get("knob_values") or {})
    values.update(row.get("varied") or {})
    out: dict[str, Any] = {}
    notes: list[str] = []
    if model_kind(cfg.model) == "preset":
        notes.append(f"measured on the built-in {cfg.model!r} preset (random weights): set "
                     "model_name_or_path to the published model of that shape")
        out["model_name_or_path"] = SET_ME
    else:
        out["model_name_or_path"] = cfg.model
    kind = dataset_kind(cfg.dataset)
    if kind == "hub":
        out["dataset_name"] = cfg.dataset
        out["dataset_train_split"] = cfg.dataset_split
    elif kind == "file" and Path(cfg.dataset).suffix.lower() in DATA_SUFFIXES:
        # trl sft cannot load a file through dataset_name; its data set mixture can
        out["datasets"] = [{"path": DATA_SUFFIXES[Path(cfg.dataset).suffix.lower()],
                            "data_files": str(Path(cfg.dataset).resolve()), "split": "train",
                            "columns": [cfg.text_field]}]
    else:
        notes.append(f"measured on {cfg.dataset!r}: set dataset_name to your data set")
        out["dataset_name"] = SET_ME
    out["dataset_text_field"] = cfg.text_field
    out.update(sft_arguments(row))
    model = model_args(values)
    attn = model.get("attn_implementation", values.get("attn_implementation"))
    if attn is not None:
        out["attn_implementation"] = attn
    if model.get("load_in_4bit"):
        out["load_in_4bit"] = True
        out["bnb_4bit_quant_type"] = "nf4"
    out.update(use_peft=True, lora_r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
               lora_target_modules=(cfg.lora_targets if cfg.lora_targets == "all-linear"
                                    else [t.strip() for t in cfg.lora_targets.split(",") if t.strip()]),
               learning_rate=cfg.lr, max_length=cfg.seq_len, seed=cfg.seed, lr_scheduler_type="constant")
    # Precision both ways: TRL's SFTConfig turns bf16 on when it is left unset.
    precision = str(row.get("precision_used") or "").split(" ")[0]
    out["bf16"] = precision == "bf16"
    out["fp16"] = precision == "fp16"
    if (row.get("world_size") or 1) > 1:
        notes.append(f"measured over {row['world_size']} processes: launch with torchrun --nproc-per-node "
                     f"{cfg.nproc_per_node} (or accelerate launch); the split is per process")
    if row.get("machine") == "CPU":
        out["use_cpu"] = True
        notes.append("measured on the CPU: drop use_cpu for a GPU")
    out["output_dir"] = SET_ME
    notes.append("set output_dir (and max_steps or num_train_epochs) for the real run")
    return [out], notes


def winning_command(cmd: list[str], row: dict) -> list[str]:
    """The user's command as the recommended trial ran it: its split and varied settings as
    flags (:func:`tracetui.launch.plan.script_command`, the command each trial was given)."""
    return script_command(list(cmd), Trial.from_fields(row))


def script_file(cmd: list[str] | None) -> str | None:
    """The Python file a swept command runs (``python hard.py``), or None (``trl sft``, a module)."""
    program = script_parts(list(cmd))[1] if cmd else ""
    return program if program.endswith(".py") else None


def shown_path(path: str) -> str:
    """A path as the closing lines say it: relative to the current folder when inside it."""
    rel = os.path.relpath(path) if path else path
    return rel if path and not rel.startswith("..") else path


def check_patch_target(cmd: list[str] | None) -> None:
    """``--emit-patch`` before anything runs: only a command that runs the user's own Python
    code has source to patch; else one line saying what hands the recommendation on instead."""
    if cmd is None:
        raise ConfigError("--emit-patch", "patches a swept script (tracetui sweep --emit-patch FILE -- python "
                          "train.py): a built-in sweep has no script", "drop it; --emit-config FILE.yaml writes "
                          "the recommendation for trl sft")
    launcher_for(list(cmd)).check_patch(list(cmd))


def script_changes(row: dict, cmd: list[str] | None) -> tuple[Found | None, str]:
    """Where a swept script (not a config-file trainer) sets the values of ``row``'s trial (the
    recommendation) that it does not take from its command line, and the edits that set them
    (:mod:`tracetui.outputs.script_patch`), from what its runs read back (``row['settings']``: ``applied``,
    ``args_origin``). ``(None, why)`` where the script has nothing to change."""
    if not cmd or not launcher_for(list(cmd)).own_code:
        return None, "not a swept script"
    plan = run_plan(Trial.from_fields(row), Path("."), given=False)
    planned = {k: v for k, v in plan["args"].items() if k != "output_dir"}
    planned.update(plan["model"])
    return recommended_changes(row.get("settings") or {}, planned, script_file(cmd), shown=shown_path)


def winning_line(cmd: list[str], row: dict, emitted: str | None = None) -> str:
    """What the recommendation changes in the user's command, as one line: the command with the
    recommended trial's flags, or, for a config-file trainer, the keys its config gets (and the
    command on the emitted file, when there is one)."""
    return launcher_for(list(cmd)).winning_line(list(cmd), Trial.from_fields(row), emitted)


def write_config(path: str, row: dict, cfg: SweepConfig, cmd: list[str] | None = None) -> tuple[str, list[str]]:
    """Write the recommendation to ``path``: for a config-file trainer, the user's config with the
    recommended keys (its comments and order kept); else a TRL config (:func:`trl_config`). What
    was written, as words, and the notes."""
    trainer = launcher_for(list(cmd)) if cmd else None
    own = trainer.own_config(list(cmd), Trial.from_fields(row), path) if trainer is not None else None
    if trainer is None or own is None:
        notes = write_trl_config(path, row, cfg, cmd)
        return f"TRL config for {row['trial']} in {path}: trl sft --config {path}", notes
    text, argv, notes = own
    write_whole(path, text)
    return f"{trainer.name} config for {row['trial']} in {path}: {shlex.join(argv)}", notes


def write_trl_config(path: str, row: dict, cfg: SweepConfig, cmd: list[str] | None = None) -> list[str]:
    """Write :func:`trl_config`'s file to ``path`` (the notes as comments at its top) and return
    the notes (see :func:`tracetui.core.paths.write_whole`)."""
    data, notes = trl_config(row, cfg, cmd, path=path)
    text = "".join(f"# {' '.join(n.splitlines())}\n" for n in notes)
    text += yaml.safe_dump(data, sort_keys=False)
    write_whole(path, text)
    return notes
