"""The subcommands beside the sweep: ``show`` (replay logs), ``watch`` (listen for attached
scripts), ``sweep`` (run an unmodified training script once per split) and ``run`` (run one
unmodified command once, measured)."""

from __future__ import annotations

from pathlib import Path

from ..core import envvars
from ..analysis import Results
from ..core.checks import check_runs_dir
from ..core.config import ConfigError
from ..core.flags import add_arguments, whole_number
from ..outputs.emit import check_patch_target
from ..outputs.writer import Outputs
from ..core.paths import input_file_problem
from ..planning.plan import dry_run_lines
from ..runner.command import CommandRun
from ..launch.dialects import launcher_for
from ..runner.script import (ScriptSweep, check_command, check_program, check_script_exists, check_script_values,
                             check_settings_reach, how_runs_start, start_line)
from ..events.log import new_sweep_id
from ..planning.search import make_planner
from ..core.text import say
from ..session.exits import EXIT_NONE_OK, UsageError
from ..session.headless import run_headless, write_and_report
from ..session.loading import load_config
from ..session.output_paths import check_new, check_outputs, check_writable
from ..session.parser import Parser, add_output_args
from ..session.progress import progress_printer
from ..session.signals import StopSignals
from ..events.log import EventLog, ReadReport, read_events
from ..core.text import clean
from ..events.sockpath import ListenerError, default_socket_path, socket_origin
from ..events.wire import SocketListener
from ..tui.terminal import no_terminal


def _show_parser() -> Parser:
    p = Parser(prog="tracetui show", description=(
        "Replay saved event logs (from a sweep, a watch or a TraceCallback) into the final table "
        "and CSV. Several logs are compared side by side, each log's runs apart: labelled by GPU, and "
        "by file where logs come from one machine (CPU(a) 1x4)."))
    p.add_argument("files", nargs="+", metavar="FILE.jsonl")
    add_output_args(p, answer=True)
    return p


def _check_outputs(ns, default: str | None = None) -> None:
    """:func:`~tracetui.session.output_paths.check_outputs` as a usage error; ``default``: the summary's path
    when no ``-o`` is given (beside the log: refused too if a summary is already there)."""
    try:
        check_outputs(ns)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    try:
        if default and not ns.output:
            check_writable(default, "--output")
            check_new(default, "--output", ns.force)
    except ConfigError as exc:
        raise UsageError(f"{exc}; or give -o PATH") from None


def _check_runs_dir(ns) -> None:
    """``--runs-dir`` of ``watch`` and ``run``, as a sweep's (:func:`tracetui.core.config.check_runs_dir`)."""

    try:
        check_runs_dir(ns.runs_dir)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def show_main(argv: list[str]) -> int:

    ns = _show_parser().parse_args(argv)
    for f in ns.files:
        why = input_file_problem(f)
        why = why and why + {"is a FIFO (named pipe), not a file": ": save the events to a file first",
                             "is a socket, not a file": " (watch it with tracetui watch --socket)"}.get(why, "")
        if why:
            raise UsageError(f"show: {f} {why}; give the events.jsonl of a sweep, watch or callback")
    outputs = Outputs.from_args(ns, ns.files[0])
    _check_outputs(ns, outputs.summary if ns.export else None)
    report = read_logs(ns.files)
    if report.skipped:
        say(f"tracetui: {report.summary()}")
    results = Results(budget=None).extend(report.events)  # (a log read whole: every step exported)
    if not results.runs:
        say("tracetui: error: no valid events in " + ", ".join(ns.files))
        return EXIT_NONE_OK
    if not ns.export:
        from ..tui.launchers import run_replay

        return run_replay(report.events, ns, outputs, skipped=report.summary())
    return write_and_report(results, outputs, None)


def read_logs(files: list[str]) -> ReadReport:
    """The events of ``files``; where several come from one machine, each run's start there
    carries its file's short name (``log``, :func:`log_names`), so that each log's runs stay
    apart in the table, the answer and the exports (logs of different machines are told apart
    by their machine already)."""
    report = ReadReport()
    per_file = []
    for path in files:
        start = len(report.events)
        read_events([path], report)
        per_file.append(report.events[start:])
    machines = [{(e.get("env") or {}).get("gpu_name") or "CPU" for e in mine if e["type"] == "run_started"}
                for mine in per_file]
    shared = {m for i, ms in enumerate(machines) for m in ms if any(m in o for o in machines[:i] + machines[i + 1:])}
    seen: set[str] = set()
    for mine, name in zip(per_file, log_names(files) if shared else []):
        ids = {e["run_id"] for e in mine if "run_id" in e}
        for e in mine:
            if e["type"] == "run_started" and ((e.get("env") or {}).get("gpu_name") or "CPU") in shared:
                e["log"] = name
            if ids & seen and "run_id" in e:  # the same runs twice (a copied log): told apart by file
                e["run_id"] = f"{name}:{e['run_id']}"
        seen |= ids
    return report


def log_names(files: list[str]) -> list[str]:
    """Each log's short name: its file name without ``.jsonl``/``.gz``, with as many of its
    folders as it takes to tell the files apart (``a/events`` and ``b/events``)."""
    parts = [Path(f).parts for f in files]
    for depth in range(1, max(len(p) for p in parts) + 1):
        names = ["/".join(p[-depth:]) for p in parts]
        if len(set(names)) == len(names):
            break
    out = []
    for n in names:
        for suffix in (".gz", ".jsonl"):
            n = n.removesuffix(suffix)
        out.append(n)
    return out


def _watch_parser() -> Parser:
    p = Parser(prog="tracetui watch", description=(
        "Listen for training scripts that use TraceCallback and show them live (several at once are "
        "kept apart by run id). With --export, run headless until Ctrl-C, then write the summary."))
    p.add_argument("--socket", default=None, help=f"UNIX socket path (default ${envvars.SOCKET} or a per-user runtime folder)")
    p.add_argument("--runs-dir", default="tracetui_runs", help="where the received events are logged")
    add_output_args(p, answer=True)
    return p


def watch_main(argv: list[str]) -> int:
    import threading


    ns = _watch_parser().parse_args(argv)
    _check_runs_dir(ns)
    _check_outputs(ns)
    path = ns.socket or default_socket_path()
    origin = socket_origin(ns.socket)
    log = EventLog(Path(ns.runs_dir) / f"watch-{new_sweep_id()}" / "events.jsonl")
    outputs = Outputs.from_args(ns, log.path)
    if not ns.export:
        from ..tui.launchers import run_watch

        return run_watch(path, log, outputs, origin)
    results = Results()
    printer = progress_printer(0, 0)

    def on_event(e: dict) -> None:
        log.append(e)
        results.add(e)
        printer(e)

    try:
        # what the listener refuses or drops is said as it happens, not only at the end
        listener = SocketListener(path, on_event, origin=origin, on_notice=lambda line: say(f"tracetui: {line}")).start()
    except ListenerError as exc:
        log.discard_if_empty()
        raise UsageError(str(exc)) from None
    done = threading.Event()
    signals = StopSignals(stop=done.set)  # Ctrl-C, SIGTERM or an SSH drop (SIGHUP): stop and write
    say(f"tracetui: watching {path}; events -> {log.path}; Ctrl-C to stop and write the summary")
    try:
        try:
            while not done.wait(0.5):
                pass
        finally:
            listener.close()
            log.close()
        if listener.dropped_total:
            say(f"tracetui: {listener.describe_drops()}")
        line = memory_line(results, str(log.path))
        if line:
            say(f"tracetui: {line}")
        return write_and_report(results, outputs, str(log.path), log)
    finally:
        signals.release()


def memory_line(results, log_path: str) -> str:
    """What the summary left out to stay within its memory (:mod:`tracetui.core.bounded`), in one
    line, or "": the runs whose steps it took as an even sample, the runs it left out."""
    thinned = results.thinned()
    parts = []
    if thinned:
        seen = sum(r.steps.seen for r in thinned)
        held = sum(len(r.steps) for r in thinned)
        parts.append(f"{len(thinned)} run(s) summarised from an even sample of {held} of their {seen} steps")
    if results.left_out:
        parts.append(f"{results.left_out} event(s) of runs that started later left out")
    if not parts:
        return ""
    return f"to stay within its memory, {' and '.join(parts)}; every event is in {log_path}"


def _sweep_parser() -> Parser:
    p = Parser(prog="tracetui sweep", description=(
        "Run an unmodified HF/TRL training script once per split: tracetui applies each run's split "
        "and settings inside the script's Trainer (and as flags where the script parses them), reads "
        "back what trained, and attaches its probe. "
        "Usage: tracetui sweep --splits 1x4,2x2,4x1 -- python train.py ARGS"))
    add_arguments(p)
    add_output_args(p)
    p.add_argument("--fresh", action="store_true",
                   help="start each run as the command itself starts (a fresh interpreter), not forked from "
                        "tracetui's server with the libraries imported once")
    return p


def _command_after_dashes(argv: list[str], name: str, parser) -> tuple[list[str], list[str]]:
    """``own flags -- the user's command``; ``--help`` without a command prints the help."""
    if "--" not in argv:
        if any(a in ("-h", "--help") for a in argv):
            parser().parse_args(["--help"])  # prints the help and exits 0
        raise UsageError(f"{name}: give the training command after --, e.g. tracetui {name} -- python train.py")
    i = argv.index("--")
    return argv[:i], argv[i + 1:]


def _run_parser() -> Parser:
    p = Parser(prog="tracetui run", description=(
        "Run one unmodified training command once, with tracetui's probe attached to every "
        "transformers Trainer it builds, and show it live (or headless with --export): its own "
        "split and settings, no sweep. Usage: tracetui run -- trl sft ARGS, or -- python train.py ARGS. "
        "The command's output goes to a file beside the events."))
    p.add_argument("--runs-dir", default="tracetui_runs", help="where the events and the command's output go")

    p.add_argument("--warmup", type=whole_number(0, 1_000_000), default=3,
                   help="optimizer steps measured but not counted")
    add_output_args(p, answer=True)
    return p


def run_main(argv: list[str]) -> int:
    import shlex


    own, cmd = _command_after_dashes(argv, "run", _run_parser)
    ns = _run_parser().parse_args(own)
    if not cmd:
        raise UsageError("run: no training command given; write it after --, e.g. -- python train.py")
    if ns.warmup < 0:
        raise UsageError(f"--warmup: must be 0 or more, got {ns.warmup}; give e.g. --warmup 3")
    try:
        check_program(cmd, "run")
        check_script_exists(cmd)
        check_script_values(cmd, "run")
    except ConfigError as exc:
        raise UsageError(str(exc).replace("sweep:", "run:", 1)) from None
    _check_runs_dir(ns)
    _check_outputs(ns)
    try:
        run = CommandRun(cmd, ns.runs_dir, ns.warmup)
    except OSError as exc:
        raise UsageError(f"--runs-dir: cannot write {ns.runs_dir} ({exc.strerror}); choose a writable folder") from None
    outputs = Outputs.from_args(ns, run.log.path)
    if not ns.export:
        from ..tui.launchers import run_command_app

        return run_command_app(run, outputs)
    results = Results()
    printer = progress_printer(0, 0)

    def on_event(e: dict) -> None:
        results.add(e)
        printer(e)

    signals = StopSignals(stop=run.stop)  # Ctrl-C, SIGTERM or an SSH drop: stop the command, write
    try:
        say(f"tracetui: running {shlex.join(cmd)}; its output -> {run.output_path}; events -> {run.log.path}")
        try:
            run.start(on_event)
        except OSError as exc:
            raise UsageError(f"run: cannot start {cmd[0]} ({exc.strerror or exc})") from None
        run.wait()
        run.close()
        say(f"tracetui: {run.ended_line()}")
        if not results.runs:
            say("tracetui: no transformers Trainer reported to the probe: nothing was measured "
                "(is it a Trainer/TRL script? see the command's output)")
        status = write_and_report(results, outputs, str(run.log.path), run.log)
        if signals.signum:
            return 128 + signals.signum
        return run.exit_status(status)
    finally:
        signals.release()


def sweep_main(argv: list[str]) -> int:
    own, cmd = _command_after_dashes(argv, "sweep", _sweep_parser)
    ns = _sweep_parser().parse_args(own)
    try:
        check_command(cmd)
        check_script_exists(cmd)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    # (the monitor without a terminal refused before the sweep starts its fork server)
    cfg, splits = load_config(ns, deep=False, cmd=cmd, refuse=None if ns.export or getattr(ns, "dry_run", False) else no_terminal)
    try:
        check_settings_reach(cfg)
        if cfg.emit_patch:
            check_patch_target(cmd)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    if getattr(ns, "dry_run", False):  # each run's command (the script's steps and model are its own)
        check_command(cmd, cfg.varied())  # what the sweep itself refuses (a --vary the command cannot take)
        launcher = launcher_for(cmd)
        for line in dry_run_lines(make_planner(cfg, splits, short_runs=False), cfg,
                                  lambda d: ": " + launcher.trial_command(cmd, d.trial).described()):
            print(line)
        print(clean(start_line(cmd, *how_runs_start(cmd, ns.fresh))))
        return 0
    sweep = ScriptSweep(cfg, splits, cmd, fresh=ns.fresh)
    if ns.export:
        return run_headless(cfg, splits, ns, sweep=sweep)
    from ..tui.launchers import run_app

    return run_app(cfg, splits, ns, sweep=sweep)
