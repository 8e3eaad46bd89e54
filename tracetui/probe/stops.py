"""Who stopped training: the trainer's ``TrainerControl`` notes the frame that sets
``should_training_stop`` (a callback, the trainer's own loop, or another function), the one way
to say which of several callbacks stopped it, whatever event it did it in."""

from __future__ import annotations

import sys
from typing import Any

from transformers import TrainerCallback, TrainerControl

from ..core.foreign import caller_frame


class _WatchedControl(TrainerControl):
    """The trainer's ``TrainerControl``, which notes who sets ``should_training_stop`` (the frame
    that assigns it: a callback, the trainer's own loop, or another function) as training is
    stopped: the one way to say which of several callbacks stopped it, whatever event it did it
    in. Given to the one object the trainer passes its callbacks (:func:`watch_stops`); its
    fields, and what the trainer saves of it, are unchanged."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "should_training_stop":
            if not value:
                self.__dict__.pop("_tracetui_stopped_by", None)
            elif not self.__dict__.get(name):
                try:
                    self.__dict__["_tracetui_stopped_by"] = _setter(caller_frame(1))
                except Exception as exc:  # noqa: BLE001 - never break the user's training: trainer_stop says it
                    self.__dict__["_tracetui_stopped_by"] = {
                        "kind": "function", "who": f"a caller not read ({type(exc).__name__}: {exc})"}
        object.__setattr__(self, name, value)


def watch_stops(control: Any) -> bool:
    """Have the trainer's control object note who stops training (:class:`_WatchedControl`);
    whether it does (a control object of another class is left as it is)."""
    if type(control) is TrainerControl:
        control.__class__ = _WatchedControl
    if isinstance(control, _WatchedControl):
        control.__dict__.pop("_tracetui_stopped_by", None)  # a new training
        return True
    return False


def stopped_by(control: Any) -> dict | None:
    """Who set ``control.should_training_stop`` in this training (:func:`watch_stops`), or None."""
    return getattr(control, "__dict__", {}).get("_tracetui_stopped_by")


def _setter(frame: Any) -> dict:
    """Who runs in ``frame`` (the one that set the flag) or the frames that called it: the first
    callback (``kind`` callback; ``probe`` where it is tracetui's own: its class says
    ``tracetui_probe = True``), else the trainer (its own loop), else the function that set it."""
    first = frame
    trainer = getattr(sys.modules.get("transformers.trainer"), "Trainer", ())
    for _ in range(8):
        if frame is None:
            break
        owner = frame.f_locals.get("self")
        name = type(owner).__name__
        if isinstance(owner, TrainerCallback) and name != "CallbackHandler":
            event = frame.f_code.co_name
            while frame.f_back is not None and frame.f_back.f_locals.get("self") is owner:
                frame = frame.f_back  # a helper of the callback's: the event that called it
                event = frame.f_code.co_name
            probe = getattr(type(owner), "tracetui_probe", False) is True
            return {"kind": "callback", "who": name, "in": event, "probe": probe}
        if trainer and isinstance(owner, trainer):
            return {"kind": "trainer", "who": name, "in": frame.f_code.co_name}
        frame = frame.f_back
    return {"kind": "function", "who": getattr(first.f_code, "co_qualname", first.f_code.co_name)}


def trainer_stop(state: Any, control: Any, stop_reason: str | None) -> str | None:
    """Why the trainer ended before its planned steps, in words (``stopped by the trainer at
    step 5 of 12: EarlyStoppingCallback set should_training_stop in on_evaluate``), or None:
    it ran them all, or tracetui's own stopping rule ended it (``stop_reason``, or the probe set
    the flag)."""
    done, planned = int(getattr(state, "global_step", 0) or 0), int(getattr(state, "max_steps", 0) or 0)
    if stop_reason or not planned or done >= planned:
        return None
    setter = stopped_by(control)
    if setter is not None and setter.get("probe"):
        return None
    if setter is None:
        why = "its training loop ended with no callback setting should_training_stop (the training data ran out)"
    elif setter.get("kind") == "callback":
        why = f"{setter['who']} set should_training_stop in {setter['in']}"
    elif setter.get("kind") == "trainer":
        why = f"the trainer's own loop set should_training_stop ({setter['who']}.{setter['in']})"
    else:
        why = f"{setter['who']} set should_training_stop"
    return f"stopped by the trainer at step {done} of {planned}: {why}"
