"""Imported by the fork server after the libraries and before the freeze
(:data:`tracetui.runner.lifetime.PRELOAD`): work that every trial would otherwise repeat, done
once, in pure Python (nothing here may touch CUDA: the server never does).

transformers builds its table of checkpoint conversions (about a thousand objects with compiled
patterns) the first time a process loads a model or PEFT wraps one, and keeps it for the
process. Built here, every forked trial finds it built, and its trainer is built without
that cost in its start."""

from . import note

try:
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping
except ImportError:  # a transformers without that table: nothing to build
    get_checkpoint_conversion_mapping = None

if get_checkpoint_conversion_mapping is not None:
    try:
        get_checkpoint_conversion_mapping("llama")
    except Exception as exc:  # noqa: BLE001 - noted (startup.PROBLEMS, said in each trial); each trial builds it
        note("building transformers' checkpoint-conversion table", exc)

from . import metadata  # noqa: E402 - its helper has answered by now, or is waited for here

metadata.settle()
