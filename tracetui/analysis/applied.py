"""How a sweep's plan reached a swept script's trainer, in words (from the run's read-back
``applied`` settings, :mod:`tracetui.probe.apply`)."""

from __future__ import annotations

from typing import Any

SPLIT_FIELDS = ("per_device_train_batch_size", "gradient_accumulation_steps")
#: fields that say where a run writes, not what it trains
WHERE_FIELDS = ("output_dir",)


def split_applied(settings: dict[str, Any]) -> str | None:
    """How the split reached the trainer: ``command line``, ``the script's own value``, or where
    tracetui replaced the script's own (``Trainer(args=...): the script's 1x4``); None when the
    run says nothing (a built-in sweep, a log from before)."""
    applied = settings.get("applied") or {}
    found = [applied[k] for k in SPLIT_FIELDS if isinstance(applied.get(k), dict)]
    if not found:
        return None
    replaced = [a for a in found if a.get("replaced")]
    if not replaced:
        return str(found[0].get("how") or "")
    return f"{replaced[0].get('how')}: the script's {_script_split(applied)}"


def _script_split(applied: dict) -> str:
    mb, ga = (applied.get(k, {}).get("script") for k in SPLIT_FIELDS)
    return f"{mb}x{ga}" if mb is not None and ga is not None else "own values"


def derived_note(settings: dict[str, Any]) -> str:
    """What to know when tracetui replaced a script's own values inside its trainer: the
    measurement holds for the planned values; what the script derived from its own before the
    trainer existed (a step count from the data set's length, a learning-rate scale) is as for
    its own, in the user's real run too. "" when nothing was replaced."""
    applied = settings.get("applied") or {}
    changed = [k for k, v in applied.items() if isinstance(v, dict) and v.get("replaced") and k not in WHERE_FIELDS]
    if not changed:
        return ""
    origin = settings.get("args_origin") or {}
    where = f" ({origin.get('call', 'its arguments')} at {origin['file']}:{origin['line']})" \
        if origin.get("file") and origin.get("line") else ""
    own = _script_split(applied)
    return (f"the script sets {' and '.join(changed)} itself{where}; tracetui applied each run's values inside its "
            f"trainer: the measurements hold, but what the script derives from its {own} before it builds the "
            f"trainer (a step count, a learning-rate scale) stayed as for {own}, and changes in your own run")
