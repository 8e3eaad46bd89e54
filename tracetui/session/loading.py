"""The sweep's config loaded and checked before anything runs: the flags over the TOML file, the
checks that need no import, the values the installed libraries accept, the outputs, and (``deep``)
the model, data and device, here or in a process forked from the fork server.
"""

from __future__ import annotations

from typing import Callable

from ..core.accepted import refusal as accepted_refusal
from ..core.accepted import valid_list
from ..core.checks import check_runs_dir, validate
from ..core.config import ConfigError, SweepConfig
from ..core.flags import from_args
from ..core.knobs import KNOBS
from ..core.text import say
from ..launch.dialects import launcher_for
from ..launch.fork import environment_of
from ..runner.lifetime import check_start_env, forking, trial_context
from ..runner.onray import check_reachable
from ..runner.preflight import (
    offline_if_hub_unreachable,
    validate_deep,
    validate_deep_forked,
)
from .exits import UsageError
from .output_paths import check_outputs, release_outputs


def check_accepted(cfg: SweepConfig, cmd: list[str] | None = None) -> None:
    """Every value of a setting whose library declares what it takes (``Knob.accepts``: the
    optimizer, TRL's loss), against that library as the runs will import it, before anything
    runs: one line naming the flag and listing the values it takes. ``cmd``: a script's command
    (``tracetui sweep``), whose own Python environment's library counts; only the varied values
    reach it, and only those its trainer reads under the library's name (axolotl's ``optimizer``
    key takes names of axolotl's own)."""
    home = environment_of(cmd) if cmd else None
    launcher = launcher_for(cmd) if cmd else None
    for name, values in [(n, [getattr(cfg, n)]) for n in KNOBS if cmd is None] + list(cfg.varied().items()):
        knob = KNOBS[name]
        if knob.accepts is None:
            continue
        if launcher is not None and not launcher.library_reads(name, values[0]):
            continue
        flag = "--vary" if name in cfg.varied() else "--" + name.replace("_", "-")
        for value in values:
            why = accepted_refusal(knob.accepts, str(value), home)
            if why:
                raise ConfigError(flag, (f"{name}: " if flag == "--vary" else "") + why, valid_list(knob.accepts, home))


def load_config(ns, deep: bool = True, defer: bool = False, cmd: list[str] | None = None,
                refuse: Callable[[], str | None] | None = None) -> tuple[SweepConfig, list]:
    """The validated config and its splits; ``deep`` also checks model, data and device (not
    for ``sweep``, where the script owns those). ``defer``: where those checks run in a process
    forked from the fork server (which imports torch, transformers and TRL: seconds), start the
    server and leave them to :func:`deferred_checks`, so that the monitor can open at once and
    say what it waits for; ``ns.checks_deferred`` says whether they were left. ``cmd``: the
    script a ``sweep`` runs (:func:`check_accepted`). ``refuse``: why the command cannot run here
    (None: it can), asked once the settings passed and before anything starts (the monitor
    without a terminal: no fork server importing for seconds to be stopped)."""
    cfg = from_args(ns)
    splits = validate(cfg)
    check_accepted(cfg, cmd)
    check_runs_dir(cfg.runs_dir)
    if getattr(ns, "project_steps", None) is not None and ns.project_steps < 1:
        raise ConfigError("--project-steps", f"must be at least 1, got {ns.project_steps}", "give e.g. 1000")
    check_outputs(ns, cfg, lock=not getattr(ns, "dry_run", False))
    why = refuse() if refuse else None
    if why:
        release_outputs()
        raise UsageError(why)
    try:
        check_reachable(cfg.ray)  # (a socket, before the fork server starts and the checks run)
        if deep:
            check_start_env()
            offline = offline_if_hub_unreachable(cfg)  # before the fork server: its trials inherit it
            if offline:
                say(f"tracetui: {offline}")
            if not getattr(ns, "dry_run", False) and cfg.world_size == 1 and forking():
                # the fork server imports torch, transformers and TRL (which every trial needs)
                # and the checks run in a process forked from it, not here
                ctx = trial_context()  # (started now, from the main thread, before any app)
                ns.checks_deferred = defer
                if not defer:
                    validate_deep_forked(cfg, ctx)
            else:
                validate_deep(cfg)
    except ConfigError:
        release_outputs()
        raise
    return cfg, splits


def deferred_checks(cfg: SweepConfig) -> None:
    """The checks :func:`load_config` left (``defer``): in a process forked from the fork server
    once its imports are done. Raises :class:`ConfigError` as they would have."""
    validate_deep_forked(cfg, trial_context())
