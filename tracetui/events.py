"""The one event schema every part of tracetui speaks.

Workers, the attach callback, the socket listener, the JSONL store, the TUI and the exporters
all exchange plain JSON-able dicts of this shape, so a log written by a sweep on one machine can
be replayed by ``tracetui show`` on another, and nothing that crosses a process or socket
boundary is ever pickled.

Every event carries ``v`` (schema version), ``type``, ``run_id`` and ``t`` (unix seconds).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA_VERSION = 1

RUN_STARTED = "run_started"
STEP = "step"
GPU = "gpu"
NOTICE = "notice"
RUN_FINISHED = "run_finished"
RUN_FAILED = "run_failed"
#: what the trainer really runs with, read back once it is built (:mod:`tracetui.probe.settings`)
RUN_SETTINGS = "run_settings"

#: Failure kinds a run can end with.
FAIL_KINDS = ("oom", "error", "crashed", "interrupted")

_NUM = (int, float)

# Required fields per event type: name -> accepted python types. Optional fields are not listed;
# unknown extra fields are kept (forward compatible within one schema version).
_REQUIRED: dict[str, dict[str, tuple[type, ...]]] = {
    RUN_STARTED: {"label": (str,), "micro_batch": (int,), "grad_accum": (int,)},
    STEP: {"step": (int,), "warmup": (bool,), "wall_ms": _NUM},
    GPU: {"util": _NUM},
    NOTICE: {"message": (str,)},
    RUN_FINISHED: {},
    RUN_FAILED: {"kind": (str,), "message": (str,)},
    RUN_SETTINGS: {"settings": (dict,)},
}

_LIST_FIELDS = {STEP: ("forward_ms", "backward_ms")}


class SchemaError(ValueError):
    """An event does not match the schema; the message says which field."""


def validate(event: Any) -> dict:
    """Return ``event`` if it is a valid event dict, else raise :class:`SchemaError`.

    Used on everything that arrives from outside the process (socket, JSONL files), so it
    checks types strictly and refuses NaN/inf where numbers are expected.
    """
    if not isinstance(event, dict):
        raise SchemaError("event is not a JSON object")
    v = event.get("v")
    if v != SCHEMA_VERSION:
        raise SchemaError(f"unknown schema version {v!r} (this tracetui reads v{SCHEMA_VERSION})")
    etype = event.get("type")
    if etype not in _REQUIRED:
        raise SchemaError(f"unknown event type {etype!r}")
    run_id = event.get("run_id")
    if not isinstance(run_id, str) or not run_id or len(run_id) > 200:
        raise SchemaError("run_id must be a non-empty string of at most 200 characters")
    if not isinstance(event.get("t"), _NUM) or isinstance(event.get("t"), bool):
        raise SchemaError("t must be a number (unix seconds)")
    for name, types in _REQUIRED[etype].items():
        value = event.get(name)
        if isinstance(value, bool) and bool not in types:
            raise SchemaError(f"{etype}.{name} must be {types[0].__name__}, not bool")
        if not isinstance(value, types):
            raise SchemaError(f"{etype}.{name} is missing or not {types[0].__name__}")
        if isinstance(value, float) and not math.isfinite(value):
            raise SchemaError(f"{etype}.{name} is not finite")
    for name in _LIST_FIELDS.get(etype, ()):
        value = event.get(name, [])
        if not isinstance(value, list) or not all(
            isinstance(x, _NUM) and not isinstance(x, bool) for x in value
        ):
            raise SchemaError(f"{etype}.{name} must be a list of numbers")
    if etype == RUN_FAILED and event["kind"] not in FAIL_KINDS:
        raise SchemaError(f"run_failed.kind must be one of {', '.join(FAIL_KINDS)}")
    return event


def parse_line(line: bytes | str) -> tuple[dict | None, str | None]:
    """One JSONL line from outside (a log file, the attach socket) as ``(event, None)``, or
    ``(None, reason)`` with reason ``not JSON``, ``unknown schema version`` or ``schema mismatch``."""
    import json

    try:
        event = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None, "not JSON"
    try:
        return validate(event), None
    except SchemaError as exc:
        return None, "unknown schema version" if "schema version" in str(exc) else "schema mismatch"


def make(etype: str, run_id: str, **payload: Any) -> dict:
    """Build an event dict of ``etype`` stamped with the schema version and the time now."""
    event = {"v": SCHEMA_VERSION, "type": etype, "run_id": run_id, "t": time.time()}
    event.update(payload)
    return event


@dataclass
class StepRecord:
    """Timings of one optimizer step.

    ``forward_ms`` and ``backward_ms`` hold one value per micro-batch (gradient-accumulation
    step), so the cost of each micro-batch stays visible. The phases add up to ``wall_ms``:
    ``other_ms`` is what is left once data, forward, backward and optimizer are counted.
    ``host_ms`` is the same step measured on the host clock (equal to ``wall_ms`` on CPU).
    """

    step: int
    warmup: bool
    wall_ms: float
    host_ms: float
    data_ms: float
    forward_ms: list[float]
    backward_ms: list[float]
    optimizer_ms: float
    other_ms: float
    loss: float | None = None
    tokens: int | None = None
    samples: int | None = None
    peak_mem_gib: float | None = None
    rank: int = 0
    extra: dict = field(default_factory=dict)

    def to_event(self, run_id: str) -> dict:
        payload = asdict(self)
        extra = payload.pop("extra")
        payload.update(extra)
        return make(STEP, run_id, **payload)


@dataclass
class GpuSample:
    """One NVML reading of the GPU a run uses (about ten a second)."""

    util: float
    mem_used_gib: float
    mem_total_gib: float
    power_w: float | None
    energy_j: float | None
    sm_clock_mhz: float | None
    temp_c: float | None
    gpu_index: int = 0

    def to_event(self, run_id: str) -> dict:
        return make(GPU, run_id, **asdict(self))
