"""The one event schema every part of tracetui speaks.

Workers, the attach callback, the socket listener, the JSONL store, the TUI and the exporters
all exchange plain JSON-able dicts of this shape, so a log written by a sweep on one machine can
be replayed by ``tracetui show`` on another, and nothing that crosses a process or socket
boundary is ever pickled.

Every event carries ``v`` (schema version), ``type``, ``run_id`` and ``t`` (unix seconds).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ..core.phases import BETWEEN_NAMES, NAMES, PHASES

#: the phases a step record may carry (checked once a step, as its event is made)
PHASE_NAMES = frozenset(NAMES)

SCHEMA_VERSION = 1

RUN_STARTED = "run_started"
STEP = "step"
GPU = "gpu"
NOTICE = "notice"
#: the level of a notice that says how long the sweep's runs left will take (after each run ends)
ESTIMATE = "estimate"
RUN_FINISHED = "run_finished"
RUN_FAILED = "run_failed"
#: what the trainer really runs with, read back once it is built (:mod:`tracetui.probe.settings`)
RUN_SETTINGS = "run_settings"
#: what a trial's process is doing before its first step (``stage``), and since when
RUN_STAGE = "run_stage"
#: the stage of a run that is built and waits for its turn (a head start, :mod:`tracetui.runner.turns`)
WAITING_STAGE = "built, waiting for its turn"
#: when the sweep's own parts happened (``times``: name -> unix seconds, :mod:`tracetui.core.clock`);
#: its ``run_id`` is the sweep's id. Sent as the sweep starts, and with its end as it ends
SWEEP = "sweep"

#: Failure kinds a run can end with. ``unavailable``: a varied setting cannot run here (a
#: package missing, a kernel this device lacks, a compile that fails); ``skipped``: a planner
#: decided not to start it (predicted not to fit in memory)
#: ``mismatch``: its trainer read back another split or setting than the plan
#: (:func:`tracetui.runner.supervise.as_planned`)
MISMATCH = "mismatch"
FAIL_KINDS = ("oom", "error", "crashed", "interrupted", "stalled", "unavailable", "skipped", MISMATCH)
#: attempts that are no run of their split, run again alone (head starts): ``crowded``, out of
#: memory beside the next run, built early; ``lost``, built early and waiting for its turn when
#: its fork server was killed from outside tracetui
AGAIN_KINDS = ("crowded", "lost")
#: every kind a run_failed may have: the failures, and the attempts run again
RUN_FAILED_KINDS = FAIL_KINDS + AGAIN_KINDS
#: failures nobody planned (not a memory bound, a skip, a setting unavailable here or a stop):
#: a sweep with one exits 1, whatever else finished (``mismatch``: its trainer read back another
#: split or setting than the plan, :func:`tracetui.runner.supervise.as_planned`)
UNPLANNED_KINDS = ("crashed", "error", "stalled", MISMATCH)

_NUM = (int, float)
_NONE = type(None)
#: a nested object of settings (``config``, ``env``, ``settings``, ``quiet``): a JSON object whose
#: values are scalars, lists of scalars or (one level down) such objects again
OBJ = "object"
#: a list of finite numbers
NUMS = "numbers"
#: a list of [rows, length] pairs of whole numbers (each micro-batch's input shape)
SHAPES = "shapes"

# Required fields per event type: name -> accepted python types (or OBJ / NUMS).
_REQUIRED: dict[str, dict[str, tuple[Any, ...]]] = {
    RUN_STARTED: {"label": (str,), "micro_batch": (int,), "grad_accum": (int,)},
    STEP: {"step": (int,), "warmup": (bool,), "wall_ms": _NUM},
    GPU: {"util": _NUM, "mem_used_gib": _NUM, "mem_total_gib": _NUM},
    NOTICE: {"message": (str,)},
    RUN_FINISHED: {},
    RUN_FAILED: {"kind": (str,), "message": (str,)},
    RUN_SETTINGS: {"settings": (OBJ,)},
    RUN_STAGE: {"stage": (str,), "elapsed_s": _NUM},
    SWEEP: {"times": (OBJ,)},
}

# Optional fields per event type, checked the same way when present. Fields not listed here are
# kept (forward compatible within one schema version) but must still be plain JSON: finite
# numbers, at most a few levels deep (see :func:`_plain`).
_OPTIONAL: dict[str, dict[str, tuple[Any, ...]]] = {
    RUN_STARTED: {
        "effective_batch": (int,), "world_size": (int,), "repeat": (int,), "pid": (int, _NONE),
        "rank": (int,), "global_rank": (int,), "precision": (str, _NONE), "env": (OBJ,), "config": (OBJ,),
        "settings": (OBJ,), "quiet": (OBJ, _NONE), "gpu": (int, _NONE), "log_path": (str, _NONE),
        "mode": (str,), "max_steps": (int, _NONE), "varied": (OBJ,), "why": (str,),
        # a run whose trainer read back another trial than its plan: what it trained
        "trained": (str,), "trained_fields": (OBJ,),
        # the Ray node the run ran on (--ray)
        "node": (str, _NONE),
    },
    STEP: {
        **{p.field: (NUMS,) if p.per_micro else _NUM for p in PHASES},  # declared once (phases.py)
        "host_ms": _NUM, "loss": _NUM + (_NONE,),
        "tokens": (int, _NONE), "samples": (int, _NONE), "peak_mem_gib": _NUM + (_NONE,),
        "rank": (int,), "t_end": _NUM, "backward_sync_ms": _NUM, "backward_nosync_ms": _NUM,
        "comm_est_ms": _NUM, "unprobed": (bool,),
        # what the step trained on (tracetui.probe.callback): a fingerprint of its rows (the same rows give
        # the same fingerprint whatever the split), each micro-batch's [rows, length] as it ran (padding
        # included), the positions the loss scored, and the query-key pairs attention spanned
        "fingerprint": (str,), "micro_shapes": (SHAPES,), "scored_tokens": (int, _NONE),
        "token_pairs": (int, _NONE),
        # the trainer's own work after the step, before the next (tracetui.core.phases.BETWEEN): kind -> ms each
        "between_ms": (OBJ,),
    },
    GPU: {
        "power_w": _NUM + (_NONE,),
        "energy_j": _NUM + (_NONE,), "sm_clock_mhz": _NUM + (_NONE,), "temp_c": _NUM + (_NONE,),
        "gpu_index": (int,), "slowdown": (str, _NONE), "other_procs": (int, _NONE),
        "other_mem_gib": _NUM + (_NONE,),
    },
    NOTICE: {"level": (str,)},
    RUN_FINISHED: {
        "rank": (int,), "steps": (int, _NONE), "train_runtime_s": _NUM + (_NONE,),
        "stopped_early": (bool,), "stop_reason": (str, _NONE), "quiet": (OBJ, _NONE),
        # stopped early by the trainer (a callback setting should_training_stop, its data running
        # out), in words; ``stop_reason`` is tracetui's own stopping rule (--until-confident)
        "trainer_stop": (str, _NONE),
    },
    RUN_FAILED: {"rank": (int,)},
    RUN_SETTINGS: {"rank": (int,)},
    RUN_STAGE: {"rank": (int,), "stages": (OBJ,)},
}

#: keys inside nested objects that tracetui reads, typed like fields (others: plain values)
_NESTED: dict[str, dict[str, tuple[Any, ...]]] = {
    "times": {k: _NUM for k in ("command", "server", "libraries", "checked", "sweep", "ended", "exit", "quit")},
    # warmup: a count, or "auto" (tracetui.core.warmup)
    "config": {"steps": (int, _NONE), "warmup": (int, str, _NONE), "seq_len": (int, _NONE),
               "memory_limit": _NUM + (_NONE,), "model": (str, _NONE), "dataset": (str, _NONE)},
    "between_ms": {k: (NUMS,) for k in BETWEEN_NAMES},
    "env": {"device": (str, _NONE), "gpu_name": (str, _NONE), "gpu_total_gib": _NUM + (_NONE,),
            "cpu_count": (int, _NONE), "host": (str, _NONE)},
}

#: integer fields that must be at least this (a split of micro-batch 0 means nothing)
_AT_LEAST = {"micro_batch": 1, "grad_accum": 1, "world_size": 1, "effective_batch": 1, "step": 0,
             "rank": 0, "gpu_index": 0, "gpu": 0, "repeat": 0, "tokens": 0, "samples": 0,
             "scored_tokens": 0, "token_pairs": 0}

#: a split label as tracetui writes them (``2x2``, ``2x2x4``): no markup, no control characters;
#: long enough for a trial of every speed setting varied at its longest value (175 characters)
_LABEL = re.compile(r"[A-Za-z0-9._#@:+=, -]{1,400}")

#: how deep unlisted fields and nested objects may go (JSON objects/lists inside each other)
_MAX_DEPTH = 4
_TYPE_NAMES = {str: "a string", int: "a whole number", float: "a number", bool: "true/false",
               _NONE: "null", OBJ: "an object of plain values", NUMS: "a list of numbers",
               SHAPES: "a list of [rows, length] pairs"}


class SchemaError(ValueError):
    """An event does not match the schema; the message says which field."""


#: the longest step tracetui takes for a measurement: a day. A step time beyond it, or one that
#: is not finite, or not positive (the wall time; a phase may be 0), is no step that ran
#: (``wall_ms`` 1e308 wrote a p90 of 309 digits and a time before the first step of -1e305 s)
MAX_STEP_MS = 24 * 3600 * 1000.0
#: a step event's times, in ms: the wall time (above 0), and the host clock's, each phase's
#: (per micro-batch for forward and backward) and the sync estimates (at least 0)
STEP_TIMES = ("wall_ms", "host_ms", *(p.field for p in PHASES), "backward_sync_ms", "backward_nosync_ms",
              "comm_est_ms")
#: the end of the year 9999 in unix seconds: no event's time (``t``, ``t_end``) is later (one of
#: 1e300 gave durations of as many digits)
MAX_UNIX_S = 253402300800.0
#: what a bad event of :class:`OutOfBounds` is counted as (:func:`parse_line`, the listener)
OUT_OF_BOUNDS = "step time out of bounds"


class OutOfBounds(SchemaError):
    """A step time that cannot be a real step's (:data:`MAX_STEP_MS`)."""


def _step_bounds(event: dict) -> None:
    """Raise :class:`OutOfBounds` for a time of step ``event`` that no step takes; values that
    are not numbers are the type check's to refuse."""
    for name in STEP_TIMES:
        value = event.get(name)
        for x in value if isinstance(value, list) else [value]:
            if not isinstance(x, _NUM) or isinstance(x, bool):
                continue
            if not math.isfinite(x):
                raise OutOfBounds(f"step.{name} is not finite")
            if x > MAX_STEP_MS or x < 0 or (name == "wall_ms" and x <= 0):
                raise OutOfBounds(f"step.{name} is {x:g} ms: a step takes more than 0 ms and at most a day")
    end = event.get("t_end")
    if isinstance(end, _NUM) and not isinstance(end, bool) and not 0 <= end < MAX_UNIX_S:
        raise OutOfBounds("step.t_end is not a time from 1970 to 9999")


def _finite(x: Any) -> bool:
    return isinstance(x, _NUM) and not isinstance(x, bool) and (isinstance(x, int) or math.isfinite(x))


def _plain(value: Any, depth: int) -> bool:
    """A JSON value of finite numbers nested at most ``depth`` containers deep."""
    if value is None or isinstance(value, (str, bool)):
        return True
    if isinstance(value, _NUM):
        return _finite(value)
    if depth <= 0:
        return False
    if isinstance(value, list):
        return all(_plain(v, depth - 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v, depth - 1) for k, v in value.items())
    return False


def _matches(value: Any, types: tuple[Any, ...]) -> bool:
    for t in types:
        if t is OBJ:
            # scalars, lists of scalars, or one more level of such an object
            if isinstance(value, dict) and _plain(value, 3):
                return True
        elif t is NUMS:
            if isinstance(value, list) and all(_finite(x) for x in value):
                return True
        elif t is SHAPES:
            if isinstance(value, list) and len(value) <= 100_000 and all(
                    isinstance(p, list) and len(p) == 2 and all(isinstance(x, int) and not isinstance(x, bool)
                                                                and x >= 0 for x in p) for p in value):
                return True
        elif t is bool:
            if isinstance(value, bool):
                return True
        elif t in (int, float):
            if isinstance(value, t) and not isinstance(value, bool) and _finite(value):
                return True
        elif isinstance(value, t):
            return True
    return False


def _check(etype: str, name: str, value: Any, types: tuple[Any, ...]) -> None:
    if not _matches(value, types):
        want = " or ".join(dict.fromkeys(_TYPE_NAMES.get(t, str(t)) for t in types))
        if isinstance(value, float) and not math.isfinite(value):
            raise SchemaError(f"{etype}.{name} is not finite")
        raise SchemaError(f"{etype}.{name} must be {want}")
    if isinstance(value, dict):
        for key, types in _NESTED.get(name, {}).items():
            if key in value:
                _check(etype, f"{name}.{key}", value[key], types)
    least = _AT_LEAST.get(name.rsplit(".", 1)[-1])
    if least is not None and isinstance(value, int) and not isinstance(value, bool) and value < least:
        raise SchemaError(f"{etype}.{name} must be at least {least}")


def validate(event: Any) -> dict:
    """Return ``event`` if it is a valid event dict, else raise :class:`SchemaError`.

    Used on everything that arrives from outside the process (socket, JSONL files), so it checks
    every field it knows, required and optional, strictly by type (a bool is not a number, numbers
    are finite, nested settings are objects of plain values), and bounds the depth of the fields
    it does not know: whatever passes can be analysed, shown and written back without surprise.
    """
    if not isinstance(event, dict):
        raise SchemaError("event is not a JSON object")
    v = event.get("v")
    if v != SCHEMA_VERSION or isinstance(v, bool):
        raise SchemaError(f"unknown schema version {v!r} (this tracetui reads v{SCHEMA_VERSION})")
    etype = event.get("type")
    if not isinstance(etype, str) or etype not in _REQUIRED:
        raise SchemaError(f"unknown event type {str(etype)[:40]!r}")
    run_id = event.get("run_id")
    if not isinstance(run_id, str) or not run_id or len(run_id) > 200:
        raise SchemaError("run_id must be a non-empty string of at most 200 characters")
    if not _finite(event.get("t")) or not 0 <= event["t"] < MAX_UNIX_S:
        raise SchemaError("t must be a number of unix seconds (from 1970 to 9999)")
    required, optional = _REQUIRED[etype], _OPTIONAL.get(etype, {})
    if etype == STEP:
        _step_bounds(event)
    for name, types in required.items():
        if name not in event:
            raise SchemaError(f"{etype}.{name} is missing")
        _check(etype, name, event[name], types)
    for name, value in event.items():
        if name in required or name in ("v", "type", "run_id", "t"):
            continue
        types = optional.get(name)
        if types is not None:
            _check(etype, name, value, types)
        elif not _plain(value, _MAX_DEPTH):
            raise SchemaError(f"{etype}.{name} is nested too deep or holds a number that is not finite")
    if etype == RUN_STARTED and not _LABEL.fullmatch(event["label"]):
        raise SchemaError("run_started.label must be a trial like 2x2 or 2x2 attn=eager (letters, digits, "
                          "spaces, . _ - # @ : + = ,)")
    if etype == SWEEP and any(isinstance(v, _NUM) and not 0 <= v < MAX_UNIX_S for v in event["times"].values()):
        raise SchemaError("sweep.times holds a time that is not from 1970 to 9999")
    if etype == RUN_STAGE and not 0 <= event["elapsed_s"] <= event["t"]:
        raise SchemaError("run_stage.elapsed_s must be from 0 to its time t (seconds since its process started)")
    if etype == RUN_FAILED and event["kind"] not in RUN_FAILED_KINDS:
        raise SchemaError(f"run_failed.kind must be one of {', '.join(RUN_FAILED_KINDS)}")
    return event


def _finite_or_null(text: str) -> float | None:
    x = float(text)
    return x if math.isfinite(x) else None


def _no_constant(_name: str) -> None:
    return None


def loads(line: bytes | str) -> Any:
    """``json.loads`` for lines from outside: ``NaN``, ``Infinity`` and numbers too large for a
    float become ``null`` (as tracetui itself writes them), never a float that is not finite."""
    import json

    return json.loads(line, parse_float=_finite_or_null, parse_constant=_no_constant)


def parse_line(line: bytes | str) -> tuple[dict | None, str | None]:
    """One JSONL line from outside (a log file, the attach socket) as ``(event, None)``, or
    ``(None, reason)`` with reason ``not JSON``, ``unknown schema version``, ``schema mismatch`` or
    :data:`OUT_OF_BOUNDS`.

    Never raises: a line nested too deep for the parser (``[[[[...``) is ``not JSON``."""
    try:
        event = loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError, MemoryError):
        return None, "not JSON"
    try:
        return validate(event), None
    except OutOfBounds:
        return None, OUT_OF_BOUNDS
    except SchemaError as exc:
        return None, "unknown schema version" if "schema version" in str(exc) else "schema mismatch"
    except RecursionError:
        return None, "schema mismatch"


def sanitise(value: Any) -> Any:
    """``value`` with every float that is not finite replaced by ``None`` (JSON ``null``)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: sanitise(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [sanitise(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """JSON text of ``value`` that every reader accepts: ``NaN``/``Infinity`` written as ``null``
    (``allow_nan=False`` guards that nothing else slips through); objects JSON does not know are
    written as their ``str``."""
    import json

    kwargs.setdefault("default", str)
    try:
        return json.dumps(value, allow_nan=False, **kwargs)
    except ValueError:
        return json.dumps(sanitise(value), allow_nan=False, **kwargs)


def make(etype: str, run_id: str, **payload: Any) -> dict:
    """Build an event dict of ``etype`` stamped with the schema version and the time now."""
    event = {"v": SCHEMA_VERSION, "type": etype, "run_id": run_id, "t": time.time()}
    event.update(payload)
    return event


@dataclass
class StepRecord:
    """Timings of one optimizer step.

    ``phases``: ms per phase name (:data:`tracetui.core.phases.PHASES`), a list of one value per
    micro-batch (gradient-accumulation step) for a phase that is ``per_micro`` (forward,
    backward), so the cost of each micro-batch stays visible; in the event each is the field
    ``<name>_ms``, an absent phase 0 (or no micro-batch). The phases add up to ``wall_ms``:
    ``other`` is what is left once the others are counted. ``host_ms`` is the same step measured
    on the host clock (equal to ``wall_ms`` on CPU).
    """

    step: int
    warmup: bool
    wall_ms: float
    host_ms: float
    phases: dict[str, Any]
    loss: float | None = None
    tokens: int | None = None
    samples: int | None = None
    peak_mem_gib: float | None = None
    rank: int = 0
    extra: dict = field(default_factory=dict)

    def to_event(self, run_id: str) -> dict:
        payload = asdict(self)
        extra, phases = payload.pop("extra"), payload.pop("phases")
        assert not phases.keys() - PHASE_NAMES, f"no such phase: {sorted(phases.keys() - PHASE_NAMES)}"
        for p in PHASES:
            payload[p.field] = phases.get(p.name, [] if p.per_micro else 0.0)
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
    #: clock slowdowns not of the workload's making (see :mod:`tracetui.probe.gpu`), or None
    slowdown: str | None = None
    #: other compute processes on this GPU and their memory (about once a second, else None)
    other_procs: int | None = None
    other_mem_gib: float | None = None

    def to_event(self, run_id: str) -> dict:
        return make(GPU, run_id, **asdict(self))
