"""The monitor's entry points: open it on a sweep, a replay, a watch or one command; take stop
signals and a hung-up terminal as a quit; and say where everything is once it has closed."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from ..core import envvars
from ..outputs.writer import Outputs
from ..runner.lifetime import ensure_resource_tracker
from ..events.log import new_sweep_id
from ..runner.sweep import Sweep
from ..core.text import say
from ..session.exits import EXIT_INTERRUPTED, exit_status, fail_line
from ..session.headless import log_exit, no_split_finished, report, sweep_time_line
from ..session.loading import deferred_checks
from ..session.signals import StopSignals
from ..core.text import clean
from ..events.sockpath import ListenerError, default_socket_path, prepare_socket_path
from .app import TraceApp, sweep_subtitle
from .sources import CommandSource, PreparingSource, ReplaySource, SweepSource, WatchSource
from .terminal import no_terminal, run_on_terminal


def quit_on_signals(app: TraceApp):
    """SIGTERM, SIGHUP or SIGINT make ``app`` quit as ``q`` does (see :func:`run_app`)."""
    signals = StopSignals(stop=lambda: setattr(app, "signalled", signals.signum))
    return signals


def run_app(cfg, splits, ns, sweep=None, checks_deferred: bool = False) -> int:
    """Open the monitor on a new sweep; after it closes, say where everything is.

    ``checks_deferred``: the checks of the model, the data and the device are still to run
    (:func:`tracetui.session.loading.load_config`'s ``defer``): the monitor opens at once and says it
    waits on them; the sweep is built once they pass (a failing one closes the monitor with
    its one line and exit status 2).

    SIGTERM, SIGHUP (the SSH session dropped) and SIGINT stop the workers at once and make the
    monitor quit as ``q`` does: what was measured is written, the terminal restored, and the exit
    status is 128 + the signal. Signals that come later change nothing (see
    :class:`~tracetui.session.signals.StopSignals`). Its callers refuse a command without a
    terminal before anything starts (:func:`tracetui.session.loading.load_config`'s ``refuse``)."""
    app: TraceApp | None = None
    source: SweepSource | None = None
    closed = threading.Event()
    watchdog: list[threading.Timer] = []

    def stop(signum: int | None = None) -> None:
        if app is not None:  # its timer quits, on the app's own thread
            app.signalled = signals.signum or signum or app.signalled
        if source is not None:
            source.stop()
        if not watchdog:
            watchdog.append(threading.Timer(STOP_GRACE_S, end_if_stuck, (lambda: app, closed, signals)))
            watchdog[0].daemon = True
            watchdog[0].start()

    signals = StopSignals(stop=stop)
    try:
        source, (sid, events), planned, subtitle, idle = _sweep_source(
            cfg, splits, sweep, checks_deferred, on_ready=lambda built: app.call_from_thread(app.sweep_ready, built))
        if signals.signum:
            source.stop()
        outputs = Outputs.from_args(ns, events, cfg=cfg, cmd=getattr(source.sweep, "user_command", None))
        outputs.own_sweep, outputs.end_mark = sid, "quit"  # its account runs to the quit (analysis.timing)
        app = TraceApp(source, planned=planned, subtitle=subtitle, outputs=outputs, idle=idle)
        app.signalled = signals.signum
        app.stop_requested = stop
        started = time.monotonic()
        run_on_terminal(app)
        closed.set()
        return _sweep_closed(app, source, signals.signum, started)
    finally:
        signals.release()
        signals.wait_stopped()  # (a stop that came at the very end has started its watchdog by now)
        for timer in watchdog:
            timer.cancel()  # closed in time


def _sweep_source(cfg, splits, sweep, checks_deferred: bool, on_ready):
    """The monitor's source for :func:`run_app` (a sweep, or the checks that build one:
    ``on_ready`` gets it), with the sweep's id and event log's path, the planned trials, the subtitle and the idle
    screen's words."""
    if sweep is None and checks_deferred:
        sid = new_sweep_id()
        ensure_resource_tracker()  # now, while sys.stderr is the real one (see Sweep)

        def build():
            deferred_checks(cfg)
            return Sweep(cfg, splits, sweep_id=sid)

        idle = (f"checking {cfg.model}, {cfg.dataset} and the device; the first run needs torch, transformers "
                "and TRL imported (seconds, the first time on a machine longer) ...")
        return (PreparingSource(build, on_ready=on_ready), (sid, Path(cfg.runs_dir) / sid / "events.jsonl"), [],
                sweep_subtitle(None, cfg), idle)
    if sweep is None:
        sweep = Sweep(cfg, splits)  # before the app: see Sweep's note on the resource tracker
    planned = [(s.run_id, s.trial) for s in (sweep.planned() or [])]
    return SweepSource(sweep), (sweep.sweep_id, sweep.log.path), planned, sweep_subtitle(sweep), ""


def _sweep_closed(app: TraceApp, source, signum: int | None, started: float) -> int:
    """Once the monitor of :func:`run_app` has closed: the sweep closed, where everything is
    said, the exit status; or the one line of checks that refused the settings, or of a
    monitor closed before they ended."""
    sweep = source.sweep
    if sweep is None:  # the checks refused the settings, or the monitor closed before they ended
        error = getattr(source, "error", None)
        if error:
            return fail_line(error)
        return fail_line("interrupted before any run started", 128 + (signum or 2) if signum else EXIT_INTERRUPTED)
    sweep.close()
    log_exit(app.results, app.outputs.own_sweep, sweep.log.path)
    return monitor_exit(app, sweep.log, getattr(sweep, "same_failure", None), signum, started)


#: seconds a stop signal may take to close the monitor (it stops the workers: SIGTERM, SIGKILL
#: after 10 s) before what was measured is written from here and tracetui exits
STOP_GRACE_S = 45.0


def end_if_stuck(get_app, closed: threading.Event, signals) -> None:
    """The last resort after a stop signal (SIGTERM, a hang-up): the monitor has not closed
    within :data:`STOP_GRACE_S` (a hang-up once outlasted 60 s in a few of some hundred runs of
    the tests: a signal handler that deadlocked, see :class:`~tracetui.session.signals.StopSignals`;
    this stays as the guard for whatever else might). What was measured is written (the monitor's CSV from its events;
    every step is in the event log anyway), one line says so, and tracetui exits with the
    signal's status; its trials die with it (their parent-death signal).

    Where every thread of tracetui stood is written beside the summary (``*.stuck.txt``), so that
    the hang can be found; and if writing blocks too (a lock the stuck thread holds), tracetui
    still exits :data:`STUCK_WRITE_S` later.

    Where the monitor did close (its outputs written) but tracetui has not ended (what follows
    it: the sweep's close, the closing lines), the stacks and one line, and tracetui exits."""
    app = get_app()
    status = 128 + (signals.signum or getattr(app, "signalled", None) or 15)
    if closed.is_set():
        _stuck_after_closing(app, status)
    backstop = threading.Timer(STUCK_WRITE_S, os._exit, (status,))
    backstop.daemon = True
    backstop.start()
    if not closed.is_set() and app is not None and app.source.live:
        stacks = dump_stacks(Path(str(app.out_path) + ".stuck.txt"))
        try:
            app.apply_events()
            err = app.write_outputs(final=True)
            sys.__stderr__.write(clean(f"tracetui: the monitor did not close within {STOP_GRACE_S:.0f} s of the signal; "
                                       f"{err or f'summary in {app.out_path}'}{stacks}") + "\n")
        except Exception as exc:  # noqa: BLE001 - whatever writing raised is said on stderr (this line), then tracetui exits: the events are on disk
            sys.__stderr__.write(clean(f"tracetui: the monitor did not close; the summary was not written "
                                       f"({type(exc).__name__}: {exc}){stacks}") + "\n")
    try:
        sys.__stderr__.flush()
    except (OSError, ValueError):
        pass
    os._exit(status)


#: seconds the last resort may spend writing before tracetui exits regardless
STUCK_WRITE_S = 10.0


def _stuck_after_closing(app, status: int) -> None:
    """:func:`end_if_stuck` once the monitor has closed: where each thread stood, one line, exit."""
    stacks = dump_stacks(Path(str(app.out_path) + ".stuck.txt")) if app is not None else ""
    try:
        sys.__stderr__.write(clean(f"tracetui: the monitor closed, but tracetui did not end within {STOP_GRACE_S:.0f} s "
                                   f"of the signal{stacks}") + "\n")
        sys.__stderr__.flush()
    except (OSError, ValueError):  # (the terminal gone: the stacks are on disk)
        pass
    os._exit(status)


def dump_stacks(path: Path) -> str:
    """Every thread's stack into ``path``; the words that say where ("" if it cannot be written)."""
    import faulthandler

    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("tracetui: where each thread stood when the monitor had not closed after a stop signal\n")
            fh.flush()
            faulthandler.dump_traceback(file=fh, all_threads=True)
    except (OSError, ValueError, RuntimeError):
        return ""
    return f" (where it stood: {path})"


def monitor_exit(app: TraceApp, log, same_failure: str | None = None, signum: int | None = None,
                 started: float | None = None) -> int:
    """Say where everything is once the monitor of a sweep has closed, and its exit status: the
    same as headless for the same outcome (:func:`tracetui.session.exits.exit_status`)."""
    import signal as _signal

    if signum and not app.quit_reason:  # came as the app was closing
        app.quit_reason = f"interrupted by {_signal.Signals(signum).name}"
        app.exit_code = 128 + signum
    took = f" ({time.monotonic() - started:.0f} s)" if started is not None else ""
    if app.quit_reason:
        done = [r.get("trial") or r["split"] for r in app.rows if r["status"] == "ok"]
        say(f"tracetui: {app.quit_reason}: finished splits: {', '.join(done) or 'none'}; "
            f"every measured step is in {log.path}")
    else:
        say(f"tracetui: events in {log.path}{took}")
    if app.written is not None:
        report(app.written)
    line = sweep_time_line(app.results, app.outputs.own_sweep)
    if line:
        say(f"tracetui: {line}")
    if log.incomplete:
        say(f"tracetui: error: {log.incomplete_message()}")
    interrupted = app.exit_code > 128
    if same_failure and not signum:
        say(f"tracetui: error: every run fails the same way before its first step: {same_failure}")
    elif not interrupted and not any(r["status"] == "ok" for r in app.rows):
        say(f"tracetui: error: {no_split_finished(app.results)}")
    return exit_status(app.rows, signum=signum or (app.exit_code - 128 if interrupted else None),
                       incomplete=log.incomplete, write_error=app.write_failed, same_failure=same_failure)


def run_replay(events: list[dict], ns, outputs: Outputs, skipped: str = "") -> int:
    """Open the monitor on saved events (``tracetui show``); as it closes, write what was asked
    for (``-o``, ``--steps-csv``) and say the answer."""
    why = no_terminal()
    if why:
        return fail_line(why)
    app = TraceApp(ReplaySource(events), subtitle="replay of " + ", ".join(Path(f).name for f in ns.files[:3]),
                   note=skipped, outputs=outputs)
    signals = quit_on_signals(app)
    try:
        run_on_terminal(app)
    finally:
        signals.release()
    if app.written is not None:
        report(app.written)
    else:  # nothing was asked to be written: the answer all the same
        for line in outputs.answer(app.rows).lines():
            say(f"tracetui: {line}")
    return exit_status(app.rows, signum=signals.signum, write_error=app.write_failed, need_ok=False)


def run_watch(path: str, log, outputs: Outputs, origin: str = "--socket") -> int:
    """Open the monitor on scripts attaching to ``path`` (``origin``: where the path came from,
    as the messages name it); on quit (or SIGTERM, SIGHUP, SIGINT), write the CSV."""
    why = no_terminal()
    try:
        if not why:
            prepare_socket_path(path, origin=origin)  # refuse a live watcher before the screen opens
    except ListenerError as exc:
        why = str(exc)
    if why:
        log.discard_if_empty()
        return fail_line(why)
    source = WatchSource(path, log, origin)
    app = TraceApp(source, subtitle=f"watching {path}", outputs=outputs, idle=watch_idle(path))
    signals = quit_on_signals(app)
    try:
        run_on_terminal(app)
        log.close()
        err = app.write_outputs(final=True)
        say(f"tracetui: events in {log.path}")
        report(app.written)
        if log.incomplete:
            say(f"tracetui: error: {log.incomplete_message()}")
        # as `watch --export`: a watch has no split to finish, so no run is no failure
        return exit_status(app.rows, signum=signals.signum, incomplete=log.incomplete, write_error=bool(err),
                           need_ok=False)
    finally:
        signals.release()


def run_command_app(run, outputs: Outputs) -> int:
    """Open the monitor on one unmodified command (``tracetui run``); as it closes, stop the
    command if it still runs, write the outputs and say the answer. The exit status is the
    command's when it failed, else the outputs' (as a watch's)."""
    import shlex

    why = no_terminal()
    if why:
        run.close()
        return fail_line(why)
    line = shlex.join(run.cmd)
    app = TraceApp(CommandSource(run), subtitle=f"run {line[:80]}", outputs=outputs,
                   idle=f"running {line[:120]}: waiting for its Trainer's first step (its output: {run.output_path})")
    signals = quit_on_signals(app)
    try:
        run_on_terminal(app)
    finally:
        signals.release()
        run.stop()
        run.close()
    say(f"tracetui: {run.ended_line()}; events in {run.log.path}")
    if app.written is not None:
        report(app.written)
    return run.exit_status(exit_status(app.rows, signum=signals.signum, incomplete=run.log.incomplete,
                                       write_error=app.write_failed, need_ok=False))


def watch_idle(path: str) -> str:
    """What the idle watch screen says: how to connect a training script to it."""
    how = "" if path in (default_socket_path(), os.environ.get(envvars.SOCKET)) else f" (set {envvars.SOCKET}={path} in its environment)"
    return (f"waiting for a training script on {path}{how}. In the script: "
            "from tracetui import TraceCallback; trainer.add_callback(TraceCallback()), then run it; "
            "or: python examples/train_lora.py")
