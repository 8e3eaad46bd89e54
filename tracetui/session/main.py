"""What the entry points share, below them: exit codes, one-line errors, signals that stop a
sweep, output paths and their locks, loading and checking the config, headless runs and their
progress, writing the outputs and the exit status. The entry points (:mod:`tracetui.cli.main`,
:mod:`tracetui.cli.commands`) parse and dispatch; the monitor (:mod:`tracetui.tui.launchers`) and they
call this; nothing here imports them.
"""

from __future__ import annotations

import argparse
import os
import signal
import stat
from pathlib import Path

from ..analysis import LIVE_STATUSES, Results, repeat_mark, time_line, time_spent
from ..core.accepted import refusal as accepted_refusal
from ..core.accepted import valid_list
from ..core.config import (
    MAX_PROJECT_STEPS,
    ConfigError,
    SweepConfig,
    check_runs_dir,
    from_args,
    output_settings,
    validate,
    whole_number,
)
from ..core.foreign import parser_actions
from ..core.knobs import KNOBS, SHORT
from ..core.paths import folder_problem, output_file_problem
from ..core.text import clean, say
from ..core.trial import Trial
from ..events.schema import (
    MISMATCH,
    NOTICE,
    RUN_FAILED,
    RUN_FINISHED,
    RUN_STARTED,
    STEP,
    UNPLANNED_KINDS,
)
from ..launch.dialects import ConfigFile, launcher_for
from ..launch.fork import environment_of
from ..outputs.export import FORMATS
from ..outputs.writer import Outputs
from ..runner.lifetime import check_start_env, forking, trial_context
from ..runner.preflight import (
    offline_if_hub_unreachable,
    validate_deep,
    validate_deep_forked,
)
from ..runner.sweep import Sweep

EXIT_OK, EXIT_NONE_OK, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: the sweep ran, but some events could not be written to its log (a full disk): the outputs
#: are incomplete, and a line says how many events and why
EXIT_INCOMPLETE = 3
#: the signals that stop a sweep (SIGHUP: the terminal went away, as when an SSH session drops)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class UsageError(Exception):
    """A bad command line: printed on one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        # no flag taken for another it begins (--effective-batc for --effective-batch): a typo
        # is named, and a flag added later cannot change what an old command line means
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # one line, no usage dump
        raise UsageError(f"{message}{self._did_you_mean(message)}; see `{self.prog} --help`")

    def _did_you_mean(self, message: str) -> str:
        """For a misspelt flag (``--stepz``): the flags it is closest to, if any is close."""
        import difflib

        if not message.startswith("unrecognized arguments:"):
            return ""
        names = [o[2:] for a in parser_actions(self) for o in a.option_strings if o.startswith("--")]
        near = []  # (as given, the flag it is closest to)
        for word in message.split(":", 1)[1].split():
            if word.startswith("--"):
                given = word.split("=", 1)[0]
                near += [(given, f"--{m}") for m in difflib.get_close_matches(given[2:], names, n=1, cutoff=0.75)]
        if len(near) == 1:
            return f" (did you mean {near[0][1]}?)"
        return f" (did you mean: {', '.join(f'{g} -> {m}' for g, m in near)}?)" if near else ""


def add_output_args(p: argparse.ArgumentParser, default_out: str = "beside the events", answer: bool = False) -> None:
    """The output flags every mode takes (:mod:`tracetui.outputs.writer` writes them). ``answer``: also
    the flags that decide the answer, for the commands without a sweep's settings (show, watch)."""
    g = p.add_argument_group("output")
    g.add_argument("--export", choices=FORMATS, help="run headless and write the summary in this format")
    g.add_argument("-o", "--output", default=None,
                   help=f"summary path (default: {default_out}, named after the sweep; - for stdout); "
                        "a file already there is refused unless --force")
    g.add_argument("--force", action="store_true", help="replace an existing -o / --steps-csv / --emit-config file")
    g.add_argument("--steps-csv", metavar="PATH", help="also write every measured step as CSV")
    g.add_argument("--dry-run", action="store_true", help="check the settings, print the planned runs, and stop")
    g.add_argument("--project-steps", type=whole_number(1, MAX_PROJECT_STEPS), default=None, metavar="N",
                   help="project the wall time of a full training run of N optimizer steps per split")
    if answer:
        for name in ("allow_result_changes", "allow_busy"):
            g.add_argument("--" + name.replace("_", "-"), action="store_true",
                           help=SweepConfig.__dataclass_fields__[name].metadata["help"])
        g.add_argument("--peak-tflops", type=float, default=None, metavar="TFLOP/s",
                       help=SweepConfig.__dataclass_fields__["peak_tflops"].metadata["help"])


def fail_line(msg: str, code: int = EXIT_USAGE) -> int:
    say(f"tracetui: error: {msg}")  # (one line, whatever the message quotes)
    return code


class StopSignals:
    """Catches :data:`STOP_SIGNALS` while a sweep runs and its outputs are written.

    The first signal sets the exit status and has ``stop`` called; later ones (a second Ctrl-C
    50 ms after the first, the shell's SIGHUP after the kernel's) change nothing, so nothing can
    cut the writing of the outputs short. ``stop`` runs on a thread of its own, woken through a
    pipe: a handler runs on the main thread wherever it was interrupted, and one that took a lock
    (setting an ``Event``) deadlocked when the signal had interrupted that same lock's holder: a
    hang-up delivers two SIGHUPs close together, and the second came inside the first one's
    ``Event.set`` (seen: a monitor that never ended). Once a signal came, :meth:`release` leaves
    the signals ignored: the process is on its way out, and a signal in its last moments would
    only print a ``KeyboardInterrupt`` traceback.

    Nothing can hold the command after a signal for ever: if it has not released the signals
    ``backstop_s`` after the first one (a write into a pipe nobody reads, a file system that
    hangs: what the handler's thread waits in, retried after each signal, never ends), one line
    says so and the process exits with 128 + the signal (:meth:`_backstop`); its trials die with
    it (their parent-death signal), every measured step is in the event log already."""

    def __init__(self, stop=None, backstop_s: float | None = None):
        import threading

        self.stop = stop
        self.signum: int | None = None
        self.backstop_s = STOP_BACKSTOP_S if backstop_s is None else backstop_s
        self._backstop_timer: threading.Timer | None = None
        self._released = False
        self._old: dict = {}
        self._stopper: threading.Thread | None = None
        self._wake_r, self._wake_w = os.pipe()
        try:
            for s in STOP_SIGNALS:  # (raises off the main thread: nothing is left behind then)
                self._old[s] = signal.signal(s, self._on_signal)
        except BaseException:
            self.release()
            os.close(self._wake_r)
            raise
        self._stopper = threading.Thread(target=self._stop_when_woken, name="tracetui-stop", daemon=True)
        self._stopper.start()

    def _on_signal(self, signum, frame) -> None:  # noqa: ARG002
        # no locks here: a plain assignment and a write to a pipe
        if self.signum is None:
            self.signum = int(signum)
            if self._wake_w >= 0:
                try:
                    os.write(self._wake_w, b"s")
                except OSError:
                    pass

    def _stop_when_woken(self) -> None:
        import threading

        try:
            woken = os.read(self._wake_r, 1)  # a signal's byte, or the end of the pipe (released)
        except OSError:
            return
        finally:
            os.close(self._wake_r)
        if woken:  # (armed before stop: stop itself may be what waits)
            timer = self._backstop_timer = threading.Timer(self.backstop_s, self._backstop)
            timer.daemon = True
            if not self._released:  # (released meanwhile: see release, which reads these the other way round)
                timer.start()
        if woken and self.stop is not None:
            try:
                self.stop()
            except Exception as exc:  # noqa: BLE001 - said, and the exit status still says the signal
                say(f"tracetui: stopping after {self.name} failed: {type(exc).__name__}: {exc}")

    def _backstop(self) -> None:
        """The command has not ended :attr:`backstop_s` after a stop signal: say so (on a thread of
        its own, given 2 s: stderr may be the pipe that blocks) and exit with 128 + the signal."""
        import threading

        status = 128 + (self.signum or signal.SIGTERM)
        line = (f"tracetui: error: still not ended {self.backstop_s:.0f} s after {self.name or 'a stop signal'} "
                "(something it waits on does not return: a write into a pipe nobody reads, a file system that "
                "hangs); ending now; every measured step is in the event log\n")
        said = threading.Thread(target=_write_stderr, args=(line,), daemon=True)
        said.start()
        said.join(2.0)
        try:
            release_outputs()
        except Exception:  # noqa: BLE001 - ending is what matters now
            pass
        os._exit(status)

    def wait_stopped(self, timeout: float = 5.0) -> None:
        """Until ``stop`` has run for a signal that came (returns at once if none came)."""
        if self.signum is not None and self._stopper is not None:
            self._stopper.join(timeout)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""

    def release(self) -> None:
        """Give the signals back (ignored from now on if one came); once is enough."""
        self._released = True
        for s in self._old:  # ignored first: a signal in between must not meet the old handler
            signal.signal(s, signal.SIG_IGN)
        if self.signum is None:
            for s, old in self._old.items():
                signal.signal(s, old)
        self._old = {}
        if self._wake_w >= 0:
            os.close(self._wake_w)  # a stopper still waiting ends without stopping anything
            self._wake_w = -1
        if self._backstop_timer is not None:  # released: the command ends by itself now
            self._backstop_timer.cancel()


#: seconds a command may take to end after a stop signal before it is ended regardless
#: (:class:`StopSignals`): after the workers' own grace (SIGTERM, SIGKILL 10 s later) and the
#: monitor's last resort (45 s, then at most 10 s of writing), so it cuts short only a wait that
#: would never end
STOP_BACKSTOP_S = 60.0


def _write_stderr(text: str) -> None:
    try:
        os.write(2, text.encode("utf-8", "replace"))
    except OSError:
        pass


_held_locks: dict[str, int] = {}


def _lock_path(path: str) -> str:
    return os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tracetui-lock")


def lock_output(path: str, flag: str) -> None:
    """Hold an exclusive lock beside ``path`` for as long as this process lives (or until
    :func:`release_outputs`): a second sweep writing the same file is refused with one line
    instead of silently replacing the first one's results. The kernel drops the lock when the
    process dies however it dies, so a lock file left by a killed sweep never blocks anyone."""
    import fcntl

    if path == "-":
        return
    key = os.path.abspath(path)
    if key in _held_locks:
        return
    lock = _lock_path(key)
    while True:
        try:  # (never through a link; O_NONBLOCK: a FIFO put there cannot make this wait)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError:
            return  # a folder we cannot write in: the output check says so where it matters
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # not a lock file of ours: nothing to lock
            os.close(fd)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            finally:
                os.close(fd)
            raise ConfigError(flag, f"{path} is being written by another tracetui sweep"
                              + (f" (pid {holder})" if holder.isdigit() else "") + ", which is still running",
                              "wait for it to finish, or give another path") from None
        except OSError:  # a file system without locks
            os.close(fd)
            return
        try:  # its last holder may have removed it between our open and lock: lock what is there
            st, mine = os.stat(lock), os.fstat(fd)
            if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:  # who holds it, for the line that refuses a second writer (a full disk: held all the same)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except OSError:
        pass
    _held_locks[key] = fd


def release_outputs() -> None:
    """Drop the output locks (removing their files while they are still held: see :func:`lock_output`)."""
    for key, fd in list(_held_locks.items()):
        try:
            os.unlink(_lock_path(key))
        except OSError:
            pass
        os.close(fd)
        del _held_locks[key]


def check_new(path: str | None, flag: str, force: bool) -> None:
    """Refuse an explicit output that is already there (a summary of an earlier sweep, a file of
    the user's) unless ``--force``: results are never replaced silently."""
    if not path or path == "-" or force:
        return
    p = Path(path)
    if p.is_file() and p.stat().st_size > 0:
        raise ConfigError(flag, f"{path} already exists", "give another path, or add --force to replace it")


def check_writable(path: str, flag: str) -> None:
    """``path`` as an output of ``flag``: nothing there but a regular file, in a folder that can
    be written (:func:`tracetui.core.paths.output_file_problem`); else one line naming the flag."""
    if path == "-":
        return
    why = output_file_problem(path)
    if why:
        raise ConfigError(flag, f"{clean(path)} {why}", "give the path of a file"
                          + (" (- for stdout)" if flag in ("--output", "--steps-csv") else ""))
    parent = os.path.dirname(os.path.abspath(path))
    why = folder_problem(parent, create=False)  # (proven by writing there)
    if why:
        raise ConfigError(flag, f"folder {clean(parent)} {why}", "create it or choose another path"
                          if why == "does not exist" else "choose a path in a folder you can write")


def output_paths(ns, cfg=None) -> list[tuple[str, str]]:
    """The explicit output paths of a command, with their flags (the defaults are the sweep's own):
    ``-o``, ``--steps-csv``, and every setting declared an output (:func:`tracetui.core.config.output_settings`)."""
    source = cfg if cfg is not None else ns
    given = [(getattr(ns, "output", None), "--output"), (getattr(ns, "steps_csv", None), "--steps-csv")]
    given += [(getattr(source, name, None), flag) for name, flag in output_settings()]
    return [(path, flag) for path, flag in given if path]


def check_outputs(ns, cfg=None, lock: bool = True) -> None:
    """Every explicit output, before anything runs: a path that can be written, not a symbolic
    link, not one already there (unless ``--force``), no two flags on one file, and (``lock``)
    locked against a second command writing it at the same time."""
    peak = getattr(ns, "peak_tflops", None)
    if cfg is None and isinstance(peak, float) and not 0 < peak < 1e6:  # show, watch (a sweep's config checks its own)
        raise ConfigError("--peak-tflops", f"must be a positive number of TFLOP/s, got {peak}",
                          "give e.g. --peak-tflops 989 (an H100 SXM's dense bf16)")
    seen: dict[str, str] = {}
    for path, flag in output_paths(ns, cfg):
        if path == "-":
            continue
        key = os.path.abspath(path)
        if key in seen:
            raise ConfigError(flag, f"{path} is also given to {seen[key]}", "give each output its own path")
        seen[key] = flag
        check_writable(path, flag)
    if lock:
        # Before the checks that take seconds (a second sweep on the same outputs is refused at
        # once), and held until the process ends; let go if anything below refuses the run.
        if not _held_locks:
            import atexit

            atexit.register(release_outputs)
        for path, flag in output_paths(ns, cfg):
            lock_output(path, flag)
    try:
        if lock:  # after the lock, so that a command still writing it is named as such
            for path, flag in output_paths(ns, cfg):
                check_new(path, flag, bool(getattr(ns, "force", False)))
    except ConfigError:
        release_outputs()
        raise


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
        if isinstance(launcher, ConfigFile) and name in launcher.dialect.settings \
                and set(launcher.dialect.settings[name](values[0])) != set(knob.sft(values[0])):
            continue
        flag = "--vary" if name in cfg.varied() else "--" + name.replace("_", "-")
        for value in values:
            why = accepted_refusal(knob.accepts, str(value), home)
            if why:
                raise ConfigError(flag, (f"{name}: " if flag == "--vary" else "") + why, valid_list(knob.accepts, home))


def load_config(ns, deep: bool = True, defer: bool = False, cmd: list[str] | None = None) -> tuple[SweepConfig, list]:
    """The validated config and its splits; ``deep`` also checks model, data and device (not
    for ``sweep``, where the script owns those). ``defer``: where those checks run in a process
    forked from the fork server (which imports torch, transformers and TRL: seconds), start the
    server and leave them to :func:`deferred_checks`, so that the monitor can open at once and
    say what it waits for; ``ns.checks_deferred`` says whether they were left. ``cmd``: the
    script a ``sweep`` runs (:func:`check_accepted`)."""
    cfg = from_args(ns)
    splits = validate(cfg)
    check_accepted(cfg, cmd)
    check_runs_dir(cfg.runs_dir)
    if getattr(ns, "project_steps", None) is not None and ns.project_steps < 1:
        raise ConfigError("--project-steps", f"must be at least 1, got {ns.project_steps}", "give e.g. 1000")
    check_outputs(ns, cfg, lock=not getattr(ns, "dry_run", False))
    try:
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


def progress_printer(total_runs: int, steps: int):
    """Headless progress: one line per run start/end and per tenth of a run's steps."""
    state: dict = {"n": 0, "steps": {}, "labels": {}}

    def on_event(e: dict) -> None:
        t = e["type"]
        if t == RUN_STARTED:  # written as everywhere else: 1x4#2 ckpt=on (never the run id's slug)
            try:
                state["labels"][e["run_id"]] = Trial.from_fields(e).label(SHORT, repeat_mark(e["run_id"]))
            except (KeyError, TypeError, ValueError):
                pass
        label = state["labels"].get(e["run_id"]) or e["run_id"].split("/", 1)[-1]
        if t == RUN_STARTED:
            if e.get("rank", 0) != 0:
                return
            if e["run_id"].endswith("-alone"):  # a head start's run again, alone (crowded or lost): no run of the plan
                say(f"[again] {label}: started alone")
                state["steps"][e["run_id"]] = (e.get("config") or {}).get("steps") or steps or 0
                return
            state["n"] += 1
            # the run's own (a memory probe runs fewer), else the sweep's
            state["steps"][e["run_id"]] = (e.get("config") or {}).get("steps") or steps or 0
            env = e.get("env") or {}
            where = env.get("gpu_name") or "CPU"
            of = f"/{total_runs}" if total_runs else ""
            if e.get("mode") == "not started":  # skipped or unavailable: its reason follows
                say(f"[{state['n']}{of}] {label}: not started")
                return
            pid = f" (pid {e['pid']})" if e.get("pid") else ""  # (none where the supervisor reports it)
            early = ", a head start: built now, it steps once the run before it ends" if e.get("head_start") else ""
            say(f"[{state['n']}{of}] {label}: started on {where}{pid}{early}")
        elif t == STEP and e.get("rank", 0) == 0:
            total = state["steps"].get(e["run_id"], steps)
            # a tenth of the run at a time; with no total known, 1-9, 10, 20, ..., 100, 200, ...
            every = max(1, total // 10) if total else 10 ** (len(str(max(1, e["step"]))) - 1)
            if e["step"] % every == 0 or e["step"] == total:
                tag = " (warm-up)" if e["warmup"] else ""
                of = f"/{total}" if total else ""
                say(f"  {label}: step {e['step']}{of} {e['wall_ms']:.1f} ms{tag}")
        elif t == RUN_FINISHED and e.get("rank", 0) == 0:
            say(f"  {label}: ok")
        elif t == RUN_FAILED:
            say(f"  {label}: {e['kind']}: {e['message']}")
        elif t == NOTICE and e.get("level") == "warning":
            say(f"  {label}: {e['message']}")

    return on_event


def exit_status(rows: list[dict], *, signum: int | None = None, interrupted: bool = False,
                incomplete: bool = False, write_error: bool = False, same_failure: str | None = None,
                need_ok: bool = True) -> int:
    """The exit status of a sweep, one rule for headless and the monitor: 2 when every run failed
    the same way before its first step (the settings), 128 + the signal when interrupted, 3 when
    events could not be written, 1 when the summary could not be written or no split finished
    (``need_ok``: a sweep; a replay or a watch has nothing to finish) or a run failed in a way
    nobody planned (crashed, an error, stalled, a mismatch: :data:`~tracetui.events.schema.UNPLANNED_KINDS`;
    a mismatch in every mode), else 0."""
    if same_failure and not signum:
        return EXIT_USAGE
    if interrupted or signum:
        return 128 + (signum or signal.SIGINT)
    if incomplete:
        return EXIT_INCOMPLETE
    if write_error:
        return EXIT_NONE_OK
    if need_ok and not any(r.get("status") == "ok" for r in rows):
        return EXIT_NONE_OK
    if need_ok and any(k in UNPLANNED_KINDS for r in rows for k in r.get("failed_kinds") or ()):
        return EXIT_NONE_OK
    if any(MISMATCH in (r.get("failed_kinds") or ()) for r in rows):
        return EXIT_NONE_OK  # a run that trained another trial than planned: in a replay or a watch too
    return EXIT_OK


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
        sweep = Sweep(cfg, splits)
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
    line = sweep.start_line()
    if line:
        say(f"tracetui: {line}")
    planned = sweep.planned()
    say(f"tracetui: {f'{len(planned)} run(s)' if planned is not None else 'runs decided as it goes'} "
        f"({sweep.planner.name}); events -> {sweep.log.path}")
    if signals.signum:  # came while the sweep was being set up
        sweep.stop()
    try:
        sweep.run()
    finally:
        sweep.close()
    outputs = Outputs.from_args(ns, sweep.log.path, cfg=cfg, cmd=getattr(sweep, "user_command", None))
    done = outputs.write(results, log_path=str(sweep.log.path))
    rows, err = done.rows, bool(done.errors)
    report(done)
    line = sweep_time_line(results, getattr(sweep, "sweep_id", None))
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


