"""A sweep run headless: progress on stderr, stop signals caught, the outputs written, the answer
said and the exit status for it.
"""

from __future__ import annotations

from ..analysis import LIVE_STATUSES, Results, time_line, time_spent
from ..analysis.timing import end_mark
from ..core.config import ConfigError, SweepConfig
from ..core.text import say
from ..events.log import EventLog
from ..events.schema import SWEEP, make
from ..outputs.writer import Outputs
from ..runner.sweep import Sweep
from .exits import EXIT_USAGE, exit_status, fail_line
from .output_paths import release_outputs
from .progress import progress_printer
from .signals import StopSignals


def report(done) -> None:
    """Say how a command ends, in every mode (:meth:`tracetui.outputs.writer.Written.closing_lines`):
    what was written where, the verdict, the recommendation, and how to run it."""
    for line in done.closing_lines():
        say(f"tracetui: {line}")


def write_and_report(results, outputs, log_path: str | None, log=None) -> int:
    """Write ``outputs`` (:class:`tracetui.outputs.writer.Outputs`), say the answer on stderr; the exit
    status for it. ``log``: the :class:`~tracetui.events.log.EventLog` the events went to, if any."""
    done = outputs.write(results, log_path=log_path)
    report(done)
    incomplete = log is not None and log.incomplete
    if incomplete:
        say(f"tracetui: error: {log.incomplete_message()}")
    return exit_status(done.rows, incomplete=incomplete, write_error=bool(done.errors), need_ok=False)


def run_headless(cfg: SweepConfig, splits: list, ns, sweep=None) -> int:
    """Run ``sweep`` (default: a :class:`Sweep` of ``cfg``) with progress on stderr; write outputs.

    SIGINT, SIGTERM and SIGHUP stop it (:class:`StopSignals`), from before the sweep starts until
    the outputs are written."""
    signals = StopSignals(stop=sweep.stop if sweep is not None else None)
    try:
        return _run_headless(cfg, splits, ns, sweep, signals)
    finally:
        signals.release()
        release_outputs()


def _run_headless(cfg: SweepConfig, splits: list, ns, sweep, signals: StopSignals) -> int:
    results = Results()
    # A script sweep's step count is the script's own (it arrives with each run_started).
    if sweep is None:
        try:
            sweep = Sweep(cfg, splits)
        except ConfigError as exc:  # (where the runs would go refused it: --ray's cluster)
            return fail_line(str(exc))
        signals.stop = sweep.stop
    planned = sweep.planned()
    printer = progress_printer(len(planned) if planned is not None else 0,
                               0 if getattr(sweep, "cmd", None) else cfg.steps)

    def on_event(e: dict) -> None:
        results.add(e)
        printer(e)

    sweep.on_event = on_event
    for w in sweep.warnings:
        say(f"tracetui: warning: {w}")
    for line in (sweep.start_line(), sweep.estimate_line()):
        if line:
            say(f"tracetui: {line}")
    planned = sweep.planned()
    say(f"tracetui: {f'{len(planned)} run(s)' if planned is not None else 'runs decided as it goes'} "
        f"({sweep.planner.name}); events -> {sweep.log.path}")
    # (asked for before the runs: what --emit-config needs is read while they train)
    outputs = Outputs.from_args(ns, sweep.log.path, cfg=cfg, cmd=getattr(sweep, "user_command", None))
    outputs.own_sweep = getattr(sweep, "sweep_id", None)
    if signals.signum:  # came while the sweep was being set up
        sweep.stop()
    try:
        sweep.run()
    finally:
        sweep.close()
    done = outputs.write(results, log_path=str(sweep.log.path))
    rows, err = done.rows, bool(done.errors)
    report(done)
    log_exit(results, outputs.own_sweep, sweep.log.path)
    line = sweep_time_line(results, outputs.own_sweep)
    if line:
        say(f"tracetui: {line}")
    if sweep.log.incomplete:
        say(f"tracetui: error: {sweep.log.incomplete_message()}")
    same = getattr(sweep, "same_failure", None)
    if same and not signals.signum:
        skipped = sum(1 for r in rows if str(r.get("message") or "").startswith("not run:"))
        say(f"tracetui: error: every run fails the same way before its first step, so the settings are at fault, "
            f"not a split: {same}" + (f"; {skipped} more not run" if skipped else ""))
        return EXIT_USAGE
    if sweep.interrupted or signals.signum:
        done = [r.get("trial") or r["split"] for r in rows if r["status"] == "ok"]
        say(f"tracetui: interrupted by {signals.name or 'a stop request'}; "
            f"finished splits: {', '.join(done) or 'none'}; every measured step is in {sweep.log.path}")
    elif not err and not sweep.log.incomplete and not any(r["status"] == "ok" for r in rows):
        say(f"tracetui: error: {no_split_finished(results)}")
    return exit_status(rows, signum=signals.signum, interrupted=sweep.interrupted,
                       incomplete=sweep.log.incomplete, write_error=bool(err))


def log_exit(results, sweep_id: str | None, path) -> None:
    """Append to the sweep's log the end its account ran to (the outputs written, marked by
    :meth:`tracetui.outputs.writer.Outputs.write`), so that a replay gives the same account."""
    end = end_mark(results, sweep_id)
    if end is None:
        return
    try:
        log = EventLog(path)
    except OSError as exc:
        why = exc.strerror or str(exc)
    else:
        why = None if log.append(make(SWEEP, sweep_id, times=dict([end]))) else log.error
        log.close()
    if why:
        say(f"tracetui: warning: the command's end is not in {path}, so a replay's time account ends with "
            f"the sweep ({why})")


def sweep_time_line(results, sweep_id: str | None) -> str:
    """Where sweep ``sweep_id``'s time went, in one line (:func:`tracetui.analysis.time_line`)."""
    spent = [t for t in time_spent(results) if t["sweep"] == sweep_id]
    return f"time: {time_line(spent[0])}" if spent and time_line(spent[0]) else ""


def no_split_finished(results) -> str:
    """One line: nothing could be measured, and why (the first failure's reason)."""
    failed = [r for r in results.runs.values() if r.status not in ("ok", *LIVE_STATUSES)]
    if not failed:
        return "no split finished"
    kinds: dict[str, int] = {}
    for r in failed:
        kinds[r.status] = kinds.get(r.status, 0) + 1
    first = failed[0]
    return (f"no split finished: {len(failed)} run(s) failed ({', '.join(f'{n} {k}' for k, n in kinds.items())}); "
            f"{first.label if first.started else first.run_id.rsplit('/', 1)[-1]}: {first.message or first.status}")
