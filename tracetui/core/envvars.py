"""The environment protocol between tracetui and the processes it starts: every ``TRACETUI_*``
variable, declared once (its name, meaning, type and range), read and checked here.

Who sets what:

- a built-in sweep's trial sets ``TRIAL``, ``OWNER_PID`` and, beside a head start,
  ``HEAD_STARTS`` for itself (:mod:`tracetui.runner.worker`);
- the fork server keeps the user's own NVML check as ``USER_NVML_CHECK``, and is told it is the
  server by ``FORK_SERVER`` and where its output goes by ``SERVER_LOG`` (:mod:`tracetui.runner.lifetime`);
- every process of a run carries the run's mark, ``RUN_TREE`` (:mod:`tracetui.runner.lifetime`);
- a swept script and ``tracetui run``'s command get ``SOCKET``, ``WARMUP`` and ``OWNER_PID``; a
  swept one also ``RUN_ID``, ``VARIED``, ``PLAN``, ``STARTED_AT`` and, under ``--until-confident``,
  ``UNTIL_CONFIDENT`` and ``REFERENCES`` (:mod:`tracetui.runner.script`,
  :mod:`tracetui.runner.supervise`), and ``FORKED`` when its run is forked
  (:mod:`tracetui.runner.forkrun`);
- the user may set ``SOCKET``, ``WARMUP``, ``RUN_ID``, ``START`` and ``PRELOAD_OPTIONAL``.

Every variable that is set is checked before a command runs (:func:`check_environment`); in a
training script's own process a bad one is said once and left out (:func:`value_or` with
``say``), never raised into its training. ``tracetui/inject/sitecustomize.py`` reads
``OWNER_PID``, ``SOCKET`` and ``FORKED`` by name, before any of tracetui is imported.
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass
from typing import Any

from .checks import out_of_range
from .config import MAX_TEXT, ConfigError, shown
from .text import clean
from .warmup import parse as parse_warmup

SOCKET = "TRACETUI_SOCKET"
WARMUP = "TRACETUI_WARMUP"
START = "TRACETUI_START"
PRELOAD_OPTIONAL = "TRACETUI_PRELOAD_OPTIONAL"
RUN_ID = "TRACETUI_RUN_ID"
OWNER_PID = "TRACETUI_OWNER_PID"
FORKED = "TRACETUI_FORKED"
STARTED_AT = "TRACETUI_STARTED_AT"
UNTIL_CONFIDENT = "TRACETUI_UNTIL_CONFIDENT"
REFERENCES = "TRACETUI_REFERENCES"
VARIED = "TRACETUI_VARIED"
PLAN = "TRACETUI_PLAN"
TRIAL = "TRACETUI_TRIAL"
HEAD_STARTS = "TRACETUI_HEAD_STARTS"
USER_NVML_CHECK = "TRACETUI_USER_NVML_CHECK"
RUN_TREE = "TRACETUI_RUN_TREE"
FORK_SERVER = "TRACETUI_FORK_SERVER"
SERVER_LOG = "TRACETUI_SERVER_LOG"


@dataclass(frozen=True)
class EnvVar:
    """One ``TRACETUI_*`` variable tracetui reads, declared once like a setting: its type and
    range; ``by_tracetui``: set by tracetui for the processes it starts (a user has no reason to
    set it, and one left in a shell is refused all the same)."""

    name: str
    help: str
    kind: str = "str"  # str, int, float, json, choice, rule (PCT:MIN_STEPS) or flag (any value: set or not)
    low: float | None = None
    high: float | None = None
    max_len: int = MAX_TEXT
    by_tracetui: bool = False
    choices: tuple[str, ...] = ()
    #: the fix the one line gives, where the general one would say less
    fix: str = ""


#: every TRACETUI_* variable tracetui reads (a test checks that the code reads no other)
ENVIRONMENT: dict[str, EnvVar] = {v.name: v for v in (
    # a UNIX socket's path holds at most 107 bytes (sun_path)
    EnvVar(SOCKET, "the socket `watch` listens on and TraceCallback sends to", max_len=107),
    EnvVar(WARMUP, "TraceCallback's warm-up steps: auto or a count", "warmup", low=0, high=1_000_000),
    # a misspelt one (forksever) would quietly start fresh interpreters
    EnvVar(START, "how trials start", "choice", choices=("forkserver", "spawn"),
           fix="unset it (the fork server, on Linux), or set spawn for fresh interpreters"),
    EnvVar(PRELOAD_OPTIONAL, "whether the fork server imports the optional packages", "choice",
           choices=("0", "1"), fix="set 1 to let the fork server import them, or unset it"),
    # a run id is at most 200 characters (tracetui.events.schema)
    EnvVar(RUN_ID, "the run id TraceCallback reports under", max_len=200),
    EnvVar(OWNER_PID, "the tracetui process a trial dies with", "int", low=1, high=2**22,
           by_tracetui=True),
    # the probe's sitecustomize then leaves the chaining to the sitecustomize it shadows (the
    # fork server ran that one already)
    EnvVar(FORKED, "set in a script's run forked from tracetui's server", "choice", choices=("1",),
           by_tracetui=True),
    EnvVar(STARTED_AT, "when the sweep started a script's process (unix seconds)", "float", low=0,
           by_tracetui=True),
    EnvVar(UNTIL_CONFIDENT, "--until-confident for a swept script", "rule", by_tracetui=True),
    EnvVar(REFERENCES, "the intervals of the splits measured before a swept script's run", "json",
           max_len=1 << 20, by_tracetui=True),
    EnvVar(VARIED, "the varied settings of a swept script's trial", "json", max_len=1 << 20,
           by_tracetui=True),
    EnvVar(PLAN, "the trainer arguments a swept script's run trains with (applied inside its trainer)", "json",
           max_len=1 << 20, by_tracetui=True),
    EnvVar(TRIAL, "a process of a sweep", "flag", by_tracetui=True),
    EnvVar(HEAD_STARTS, "a run that may have the next one built beside it", "flag", by_tracetui=True),
    EnvVar(USER_NVML_CHECK, "the user's own NVML setting, kept for trials", "flag", by_tracetui=True),
    # read from other processes' /proc/PID/environ, never from tracetui's own
    EnvVar(RUN_TREE, "the mark of one run's processes (the tracetui pid and the run's number)", by_tracetui=True),
    EnvVar(FORK_SERVER, "set in the fork server as it starts (it makes itself a child subreaper)", "flag",
           by_tracetui=True),
    EnvVar(SERVER_LOG, "set in the fork server as it starts: the file its standard error goes to", by_tracetui=True),
)}


def env_value(name: str, environ: Any = None) -> Any:
    """Variable ``name`` read and checked by its declaration (:data:`ENVIRONMENT`): its value,
    or None when unset or empty; a :class:`ConfigError` naming it when the value is bad."""
    var = ENVIRONMENT[name]
    raw = (os.environ if environ is None else environ).get(name)
    if not raw:
        return None
    want = {"int": "a whole number", "warmup": "auto or a whole number", "float": "a number", "json": "JSON",
            "rule": "PCT:MIN_STEPS (e.g. 5:10)"}.get(var.kind, "text")
    fix = var.fix or ("unset it (tracetui sets it for the processes it starts)" if var.by_tracetui
                      else f"give {want} ({var.help}), or unset it")
    if var.kind == "flag":
        return raw
    if var.kind == "choice":
        if raw not in var.choices:
            said = (f"neither {var.choices[0]} nor {var.choices[1]}" if len(var.choices) == 2
                    else f"not one of {', '.join(var.choices)}")
            raise ConfigError(name, f"{shown(raw)} is {said}", fix)
        return raw
    if len(raw) > var.max_len:
        raise ConfigError(name, f"is {len(raw)} characters long, over the {var.max_len} it may be", fix)
    if var.kind != "json" and not raw.isprintable():
        raise ConfigError(name, f"{shown(raw)} holds a character that is not printable", fix)
    try:
        if var.kind == "int":
            value: Any = int(raw.strip())
        elif var.kind == "warmup":
            value = parse_warmup(raw)
        elif var.kind == "float":
            value = float(raw.strip())
            if not math.isfinite(value):
                raise ValueError
        elif var.kind == "json":
            value = json.loads(raw)
        elif var.kind == "rule":
            pct, least = raw.split(":")
            value = (float(pct), int(least))
            if not (0 < value[0] < 100 and 2 <= value[1] <= 1_000_000):
                raise ValueError
        else:
            value = raw
    except (ValueError, RecursionError):
        raise ConfigError(name, f"{shown(raw)} is not {want}", fix) from None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        why = out_of_range(value, {"low": var.low, "high": var.high})
        if why:
            raise ConfigError(name, why, fix)
    if name == SOCKET and len(raw.encode("utf-8", "surrogateescape")) > var.max_len:
        raise ConfigError(name, f"is over the {var.max_len} bytes a UNIX socket path may have",
                          "give a shorter path")
    return value


def check_environment(environ: Any = None) -> None:
    """Every ``TRACETUI_*`` variable that is set, checked before anything runs (the processes a
    command starts inherit them): the first bad one as a :class:`ConfigError`."""
    for name in ENVIRONMENT:
        env_value(name, environ)


def value_or(name: str, default: Any = None, environ: Any = None, say: bool = False) -> Any:
    """Variable ``name`` as :func:`env_value` reads it, or ``default`` when it is unset, empty or
    bad (the probe's side, in a user's process: a bad value is no reason to stop training).
    ``say``: a bad one is said on stderr, once."""
    try:
        value = env_value(name, environ)
    except ConfigError as exc:
        if say and name not in _said:
            _said.add(name)
            try:
                sys.stderr.write(clean(f"tracetui: {exc} (ignored)") + "\n")
            except (OSError, ValueError):
                pass
        return default
    return default if value is None else value


#: the bad variables said already (:func:`value_or`)
_said: set[str] = set()
