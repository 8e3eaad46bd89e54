"""Other libraries' private names that tracetui relies on, each behind one function here.

Each is used because no public way exists to do what tracetui needs (named in each docstring).
A library that renames one breaks tracetui at one place, and ``tests/test_foreign.py`` fails
loudly on the installed versions instead of a ``getattr`` default hiding it. The heavy libraries
are imported inside the functions, so that importing this module stays light.
"""

from __future__ import annotations

import argparse
import sys
from types import FrameType
from typing import Any


class ForeignApiMissing(RuntimeError):
    """A private name tracetui relies on is gone from the installed library."""


def _need(owner: Any, name: str, library: str) -> Any:
    try:
        return getattr(owner, name)
    except AttributeError:
        raise ForeignApiMissing(f"{library} no longer has {name!r}, which tracetui relies on; "
                                "install a version tracetui supports (see pyproject.toml)") from None


# --- Python's standard library -------------------------------------------------------------


def caller_frame(depth: int = 1) -> FrameType:
    """The frame ``depth`` calls above the caller (``sys._getframe``: the only record, in a
    running program, of which line of a user's script set a value)."""
    return sys._getframe(depth + 1)  # noqa: SLF001 - CPython's documented frame access


def run_exit_functions() -> None:
    """Run what ``atexit`` registered (``atexit._run_exitfuncs``): a forked run ends with
    ``os._exit``, which skips the interpreter's own exit that would run them."""
    import atexit

    _need(atexit, "_run_exitfuncs", "Python's atexit")()


def run_multiprocessing_finalizers() -> None:
    """Run multiprocessing's finalizers (``multiprocessing.util._run_finalizers``): a worker that
    ends with ``os._exit`` would otherwise leave semaphores that libraries registered, which the
    resource tracker reports as leaked."""
    from multiprocessing import util

    _need(util, "_run_finalizers", "Python's multiprocessing.util")()


def _fork_server():
    from multiprocessing import forkserver

    return _need(forkserver, "_forkserver", "Python's multiprocessing.forkserver")


def fork_server_pid() -> int | None:
    """The running fork server's pid, or None (multiprocessing keeps it private)."""
    server = _fork_server()
    _need(server, "_forkserver_pid", "Python's multiprocessing.forkserver.ForkServer")
    return server._forkserver_pid  # noqa: SLF001 - no public accessor


def drop_fork_server_alive_fd() -> int | None:
    """Forget the fork server's "parent is alive" pipe in this process and return its file
    descriptor to close (None if there is none): multiprocessing hands it to every forked child
    and offers no public way to let go of it."""
    server = _fork_server()
    fd = _need(server, "_forkserver_alive_fd", "Python's multiprocessing.forkserver.ForkServer")
    server._forkserver_alive_fd = None  # noqa: SLF001
    return fd


def parser_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """An argparse parser's actions (``parser._actions``: argparse has no public list of them)."""
    return _need(parser, "_actions", "Python's argparse")


# --- accelerate, transformers, Textual ---------------------------------------------------------


def reset_accelerate_state() -> None:
    """Reset accelerate's process-wide state (each state class's ``_reset_state``), as a fresh
    process starts without it. Raises ImportError without accelerate."""
    from accelerate.state import AcceleratorState, GradientState, PartialState

    _need(AcceleratorState, "_reset_state", "accelerate's AcceleratorState")(reset_partial_state=True)
    _need(PartialState, "_reset_state", "accelerate's PartialState")()
    _need(GradientState, "_reset_state", "accelerate's GradientState")()


def attention_kernel(config: Any) -> str | None:
    """The attention kernel a transformers model config holds (``config._attn_implementation``:
    what the model really uses, after transformers resolved the requested one)."""
    return getattr(config, "_attn_implementation", None) if config is not None else None


def app_crashed(app: Any) -> bool:
    """Whether a Textual app ended on an exception (``App._exception``: Textual keeps it private;
    ``return_code`` is 1 for a crash and for an ordinary ``exit(1)`` alike)."""
    return _need(app, "_exception", "Textual's App") is not None
