"""A sweep's plan, applied inside a swept script's own trainer.

Most training scripts do not read ``--per_device_train_batch_size`` from their command line: they
build ``SFTConfig(per_device_train_batch_size=1, ...)`` from literals, from their own YAML
(``TrainingArguments(**cfg)``), or change ``trainer.args`` before ``train()``. Wherever the values
came from, they reach the trainer as its ``args``. So a sweep hands each run its plan
(``TRACETUI_PLAN``: the ``TrainingArguments`` fields of its trial, the model's attention kernel,
the run's own output folder) and the probe's ``sitecustomize`` calls :func:`apply_to_trainer` as
the script's trainer is built and :func:`apply_before_train` as ``train()`` starts. What each
field was in the script, what it became and where, is kept here (:data:`APPLIED`) and goes with
the run's read-back settings; so is where the script built its arguments (:data:`ORIGIN`), for
the handoff that tells the user which line to change.

Runs in the user's process: nothing heavy is imported, and nothing here raises into training.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..core import envvars
from ..core.foreign import attention_kernel, caller_frame

#: how a field reached the trainer: the launcher gave it on the command line (or, as the plan
#: says, in a config file's copy)
GIVEN = "command line"
#: tracetui replaced the script's own value as the trainer was built
AT_INIT = "Trainer(args=...)"
#: the script changed ``trainer.args`` after building the trainer; tracetui set it back
AT_TRAIN = "trainer.args before train()"
#: the script's own value was the plan's already (no flag given, nothing replaced)
SCRIPT = "the script's own value"

#: field -> {"script": the script's value, "planned": the value trained with, "how": one of the
#: above, "replaced": whether tracetui changed the script's value}
APPLIED: dict[str, dict[str, Any]] = {}
#: where the measured trainer's arguments were built: {"file", "line", "call"}
ORIGIN: dict[str, Any] = {}
#: id(args object) -> where it was built (every TrainingArguments the script made)
_ORIGINS: dict[int, dict[str, Any]] = {}
#: fields that say where the run writes, not what it trains: applied, never a mismatch
WHERE_FIELDS = ("output_dir",)

#: folders of library code (Unsloth's trainer and config classes are generated into the script's
#: working folder, ``unsloth_compiled_cache`` or where ``UNSLOTH_COMPILE_LOCATION`` says)
_LIBRARIES = tuple(os.sep + name + os.sep for name in ("transformers", "trl", "tracetui", "dataclasses", "peft",
                                                        "accelerate", "unsloth", "unsloth_zoo", "axolotl",
                                                        "llamafactory", "importlib", "unsloth_compiled_cache",
                                                        os.path.basename(os.environ.get("UNSLOTH_COMPILE_LOCATION",
                                                                                        "").rstrip(os.sep))) if name)


def plan() -> dict[str, Any] | None:
    """This run's plan, or None outside a sweep (``tracetui run``, a user's own callback)."""
    value = envvars.value_or(envvars.PLAN, None, say=True)
    return value if isinstance(value, dict) and isinstance(value.get("args"), dict) else None


def note_origin(args: Any) -> None:
    """Remember where the script built ``args`` (a ``TrainingArguments`` being initialised): the
    first frame outside the libraries, which is the script's constructor call, or its call of a
    parser that built it."""
    frame = caller_frame(1)  # the caller's frames are the only record of where
    while frame is not None:
        path = frame.f_code.co_filename
        if not path.startswith("<") and not any(part in path for part in _LIBRARIES) and \
                os.path.basename(path) != "sitecustomize.py":
            _ORIGINS[id(args)] = {"file": os.path.abspath(path), "line": int(frame.f_lineno),
                                  "call": type(args).__name__}
            return
        frame = frame.f_back


def _plain(value: Any) -> Any:
    """A value as an event carries it: a scalar as it is (an enum as its value), anything else
    (a dict of keyword arguments, a list) as its JSON text, so that the record stays flat."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return str(getattr(value, "value", value))
    try:
        return json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


def _set(args: Any, name: str, value: Any) -> bool:
    try:
        setattr(args, name, value)
    except (AttributeError, TypeError, ValueError):  # a frozen arguments object of some release
        try:
            object.__setattr__(args, name, value)
        except (AttributeError, TypeError):  # left: the read-back says what ran
            return False
    return True


def _apply(args: Any, how: str) -> None:
    p = plan()
    if p is None or args is None:
        return
    given = set(p.get("given") or ())
    for name, value in p["args"].items():
        if not hasattr(args, name):
            continue  # a field this release does not have (checkpointing is renamed in 5.2x)
        old = getattr(args, name)
        seen = APPLIED.get(name)
        if old == value:
            if seen is None:
                APPLIED[name] = {"script": _plain(old), "planned": _plain(value),
                                 "how": str(p.get("given_by") or GIVEN) if name in given else SCRIPT,
                                 "replaced": False}
            continue
        if _set(args, name, value):
            APPLIED[name] = {"script": _plain(old), "planned": _plain(value), "how": how, "replaced": True}
    if how == AT_INIT and id(args) in _ORIGINS:
        ORIGIN.clear()
        ORIGIN.update(_ORIGINS[id(args)])


def apply_to_trainer(args: Any, model: Any) -> None:
    """As the script's trainer is built (before the library's own ``__init__`` runs): its
    arguments and its model's attention kernel set to the plan."""
    _apply(args, AT_INIT)
    p = plan()
    want = (p or {}).get("model", {}).get("attn_implementation")
    if want and model is not None:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        config = getattr(base, "config", None)
        have = attention_kernel(config)
        if have != want and hasattr(base, "set_attn_implementation"):
            try:
                base.set_attn_implementation(want)
                APPLIED["attn_implementation"] = {"script": _plain(have), "planned": want, "how": AT_INIT,
                                                  "replaced": True}
            except Exception:  # noqa: BLE001 - not available here: the read-back's attn_implementation says what ran, against the plan
                pass


def apply_before_train(trainer: Any) -> None:
    """As ``train()`` starts: a field the script changed on ``trainer.args`` since is set back to
    the plan, and the batch size the trainer's data loader takes follows it (the trainer copied
    it when it was built)."""
    args = getattr(trainer, "args", None)
    if plan() is None or args is None:
        return
    _apply(args, AT_TRAIN)
    if hasattr(trainer, "_train_batch_size") and hasattr(args, "train_batch_size"):
        try:
            trainer._train_batch_size = args.train_batch_size  # noqa: SLF001 - what train() reads
        except (AttributeError, TypeError):  # left: the read-back's data loader batch size says what ran
            pass
