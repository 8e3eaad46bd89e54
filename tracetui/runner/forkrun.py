"""A user's command run forked from the fork server (:func:`run`): its libraries are imported
already, so a run reaches its script's first line without an interpreter's start and the
imports, which are most of a ``trl sft`` run's start.

What the command would have had, it has: its own ``argv``, its script or module run as
``__main__`` (:mod:`runpy`), its ``sys.path[0]``, its environment (tracetui's probe variables
included), its working directory, the terminal's signals at their defaults, its own process
group, stdin closed and its output in the run's log, its ``atexit`` functions at its end and its
exit status as the process's. The probe is attached as :mod:`tracetui.inject`'s
``sitecustomize`` would attach it in a fresh interpreter.

A launcher in front of the script (TRL's ``trl sft`` hands its script to ``accelerate launch``)
is resolved as it runs: where accelerate would start the script as one plain ``python script
ARGS`` process (its simple launcher), the script runs in this process instead, with the
environment accelerate gives it; any other launch (several processes, DeepSpeed) goes on as
accelerate does it.
"""

from __future__ import annotations

import importlib.util
import io
import os
import runpy
import signal
import sys
import traceback
from pathlib import Path

from ..core import envvars
from ..core.foreign import reset_accelerate_state, run_exit_functions
from . import startup
from .lifetime import release_server, set_parent_death_signal
from .threads import Inherited

#: the probe's sitecustomize
_INJECT = Path(__file__).resolve().parent.parent / "inject" / "sitecustomize.py"


def run(payload: dict) -> None:
    """Process entry point, in a process forked from the fork server. ``payload``: ``target``
    (:class:`tracetui.launch.fork.ForkTarget`'s fields), ``env``, ``cwd``, ``log_path``, ``parent_pid``
    (the server)."""
    release_server()
    set_parent_death_signal(payload["parent_pid"])
    # its own session, as a fresh run's (``start_new_session``): its own process group (the
    # supervisor's signals reach the children it starts), and where the kernel groups the CPU
    # by session (autogroup), a share of its own, not one with what tracetui's shell runs
    try:
        os.setsid()
    except OSError:  # a group leader already: its group is its own
        os.setpgid(0, 0)
    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    code = 1
    try:
        own_output(payload["log_path"], payload.get("output_fd"))
        for said in startup.PROBLEMS:  # (into the run's log)
            print(f"tracetui: {said}", file=sys.stderr)
        os.chdir(payload["cwd"])
        inherited = Inherited.now()  # (the server's environment, and torch's threads from it)
        os.environ.clear()
        os.environ.update(payload["env"], **{envvars.FORKED: "1"})
        inherited.follow(os.environ)
        _attach_probe()
        _simple_launches_here(inherited)
        code = _main(payload["target"])
    except BaseException:  # noqa: BLE001 - as an interpreter would: the traceback, status 1
        traceback.print_exc()
    finally:
        try:
            run_exit_functions()  # the interpreter's own exit, which os._exit skips
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):  # a closed stream has nothing to flush
                    pass
            os._exit(code)


def quiet_helper(server: int | None) -> None:
    """In a process forked from the fork server to answer tracetui through a pipe (a check, a read
    of TRL): as a trial, it lets go of the server's alive pipe and dies with the server; what the
    libraries print on the way goes nowhere (over the monitor's screen, or above a one-line
    refusal, it would be noise)."""
    release_server()
    if server:
        set_parent_death_signal(server)
    own_output(os.devnull)


def own_output(log_path: str, fd: int | None = None) -> None:
    """stdin from /dev/null, stdout and stderr to the run's log (as a fresh process would have;
    ``os.devnull`` for a process whose output nobody reads); ``fd``: the run's output pipe, which
    the sweep keeps in the log (:mod:`.runlog`), in place of the log itself."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    log = fd if fd is not None else os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True, errors="backslashreplace")
    sys.__stdout__, sys.__stderr__, sys.__stdin__ = sys.stdout, sys.stderr, sys.stdin


def _attach_probe() -> None:
    """Run the probe's sitecustomize as a fresh interpreter would (it patches transformers'
    Trainer, imported by the server already, and watches tracetui's process); it stands as
    ``sitecustomize``, where the probe's callback looks for its start marks."""
    spec = importlib.util.spec_from_file_location("sitecustomize", _INJECT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _simple_launches_here(inherited: Inherited) -> None:
    """accelerate's simple launcher (one ``python script ARGS`` process) runs the script in this
    process, with the environment accelerate would give that process, and the CPU threads a
    fresh interpreter would take from it (accelerate sets ``OMP_NUM_THREADS``: :mod:`.threads`)."""
    try:
        import accelerate.commands.launch as launch
        from accelerate.utils.launch import prepare_simple_launcher_cmd_env
    except ImportError:  # no accelerate, or one without these: launches go on as they do
        return
    original = launch.simple_launcher

    def here(args) -> None:
        cmd, env = prepare_simple_launcher_cmd_env(args)
        if len(cmd) < 2 or cmd[0] != sys.executable:
            return original(args)
        _reset_accelerate_state()
        os.environ.clear()
        os.environ.update(env)
        inherited.follow(os.environ)
        if cmd[1] == "-m":
            target = {"kind": "module", "target": cmd[2], "argv0": cmd[2], "path0": os.getcwd(), "args": cmd[3:]}
        else:
            script = os.path.abspath(cmd[1])
            target = {"kind": "path", "target": script, "argv0": cmd[1], "path0": os.path.dirname(script),
                      "args": cmd[2:]}
        code = _main(target)
        if code:
            raise SystemExit(code)

    launch.simple_launcher = here


def _reset_accelerate_state() -> None:
    """What the launcher's own process set up of accelerate's shared state is not the script's
    (a fresh process starts without it)."""
    try:
        reset_accelerate_state()
    except ImportError:  # no accelerate: nothing of it set up
        pass


def _main(target: dict) -> int:
    """Run ``target`` as ``__main__``; its exit status, as an interpreter gives it."""
    sys.argv = [target["argv0"], *target["args"]]
    sys.path[0:1] = [target["path0"]]
    try:
        if target["kind"] == "module":
            runpy.run_module(target["target"], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target["target"], run_name="__main__")
    except SystemExit as exc:
        return _exit_status(exc.code)
    return 0


def _exit_status(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1

