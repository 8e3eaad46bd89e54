"""When the trainer does its work between steps (evaluation, saving, logging), read from its
arguments as a projection of the real run counts it (:mod:`tracetui.analysis.between`)."""

from __future__ import annotations

import math
from typing import Any


def between_schedule(args: Any, state: Any, loader: Any = None) -> dict:
    """When the trainer evaluates, saves and logs between steps (:data:`tracetui.core.phases.BETWEEN`),
    from its arguments, as :func:`tracetui.analysis.between.occurrences` counts them for a run of
    any length: ``every`` N optimizer steps (``ratio``: a fraction of the run's steps, as
    ``eval_steps=0.25``), from step ``delay``, once more at the end where the trainer does that
    (``at_end``), on the first step (``first``); ``epoch``: at each epoch's end, of ``every``
    steps (unknown: absent); ``every`` 0: never. A kind decided as it goes (``save_strategy="best"``)
    is absent."""
    ga = max(1, int(getattr(args, "gradient_accumulation_steps", 1) or 1))
    try:
        per_epoch = math.ceil(len(loader) / ga) if loader is not None else None
    except TypeError:  # a loader without a length (an iterable data set)
        per_epoch = None
    out: dict[str, dict] = {}
    for kind, strategy, raw in (("eval", "eval_strategy", "eval_steps"), ("save", "save_strategy", "save_steps"),
                                ("log", "logging_strategy", "logging_steps")):
        how = str(getattr(getattr(args, strategy, None), "value", getattr(args, strategy, None)) or "no")
        if how == "no":
            out[kind] = {"every": 0}
        elif how == "steps":
            given, every = getattr(args, raw, None), getattr(state, raw, None)
            if not every:
                continue
            entry: dict[str, Any] = {"every": int(every)}
            if isinstance(given, float) and 0 < given < 1:
                entry["ratio"] = given
            if kind == "eval":
                entry.update(delay=int(getattr(args, "eval_delay", 0) or 0), at_end=True)
            elif kind == "save":
                entry["at_end"] = True
            elif getattr(args, "logging_first_step", False):
                entry["first"] = True
            out[kind] = entry
        elif how == "epoch" and per_epoch:
            out[kind] = {"every": per_epoch, "epoch": True}
    return out
