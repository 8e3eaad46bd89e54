"""Command line: ``tracetui`` (live TUI), ``tracetui --export csv`` (headless), and the
``watch``, ``show`` and ``sweep`` subcommands.

User errors end with one line on stderr and exit status 2; no tracebacks. Heavy libraries are
imported only on the paths that train, so ``--help`` answers at once.

SIGINT, SIGTERM and SIGHUP (a dropped SSH session) stop a sweep the same way: workers stopped,
what was measured written, a line saying what was interrupted, exit status 128 + the signal.
"""

from __future__ import annotations

import argparse
import difflib
import sys

from .. import __version__
from ..core import clock
from . import commands
from ..core.config import ConfigError
from ..core.flags import add_arguments
from ..core.flags import from_args as config_from_args
from ..core.envvars import check_environment
from ..core.text import clean
from ..outputs.emit import check_patch_target
from ..planning.plan import dry_run_lines
from ..runner.lifetime import stop_server
from ..runner.script import DdpSweep
from ..planning.search import make_planner
from ..session.exits import EXIT_INTERRUPTED, EXIT_OK, UsageError, fail_line
from ..session.headless import run_headless
from ..session.loading import load_config
from ..tui.terminal import no_terminal
from ..session.output_paths import check_writable
from ..session.parser import Parser, add_output_args


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="tracetui", description=(
        "Measure how to split an effective batch into micro-batch x gradient accumulation for LoRA "
        "fine-tuning (transformers + TRL + PEFT). With no --export, opens the live terminal UI. "
        "Subcommands: watch (attach to scripts using TraceCallback), show FILE.jsonl..., "
        "sweep -- python train.py ARGS (once per split), run -- python train.py ARGS (once, measured)."))
    p.add_argument("--version", action="version", version=f"tracetui {__version__}")
    add_arguments(p)
    add_output_args(p)
    return p


#: the subcommands (``tracetui NAME``), each ``commands.NAME_main``
COMMANDS = ("show", "watch", "sweep", "run")


def unknown_command(word: str) -> str:
    """The line for ``tracetui WORD ...`` where WORD is no subcommand: the one it is closest to."""
    near = difflib.get_close_matches(word.lower(), COMMANDS, n=1, cutoff=0.6)
    return (f"{clean(word[:40])} is not a command" + (f" (did you mean {near[0]}?)" if near else "")
            + f"; the commands are {', '.join(COMMANDS)}, or flags alone for the built-in sweep: see `tracetui --help`")


def refuse_patch(ns) -> None:
    """``--emit-patch`` given to the built-in sweep (flag or TOML): one line before anything
    starts; a path that is no regular file is said first, as for every output."""
    path = config_from_args(ns).emit_patch
    if path:
        check_writable(path, "--emit-patch")
        check_patch_target(None)


def main(argv: list[str] | None = None) -> int:
    clock.mark_command_start(process=argv is None)  # (None: called as the program, not from Python)
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        check_environment()  # the TRACETUI_* variables, as the flags: before anything runs
        if argv and argv[0] in COMMANDS:
            return getattr(commands, f"{argv[0]}_main")(argv[1:])
        if argv and not argv[0].startswith("-"):  # (the sweep's own flags take no word before them)
            raise UsageError(unknown_command(argv[0]))
        ns = build_parser().parse_args(argv)
        refuse_patch(ns)
        # the monitor opens before the checks that import the libraries, and says it waits on them
        monitor = not ns.export and not ns.dry_run
        cfg, splits = load_config(ns, defer=monitor, refuse=no_terminal if monitor else None)
    except (UsageError, ConfigError) as exc:
        return fail_line(str(exc))
    except KeyboardInterrupt:
        stop_server()  # (it may still be importing: it would go on for seconds)
        return fail_line("interrupted before any run started", EXIT_INTERRUPTED)
    if getattr(ns, "dry_run", False):
        for line in dry_run_lines(make_planner(cfg, splits), cfg):
            print(line)
        return EXIT_OK
    sweep = None
    if cfg.world_size > 1:
        try:
            sweep = DdpSweep(cfg, splits)
        except ConfigError as exc:  # (where the runs would go refused it: --ray's cluster)
            return fail_line(str(exc))
    if ns.export:
        return run_headless(cfg, splits, ns, sweep=sweep)
    from ..tui.launchers import run_app

    return run_app(cfg, splits, ns, sweep=sweep, checks_deferred=getattr(ns, "checks_deferred", False))


if __name__ == "__main__":
    sys.exit(main())
