"""The terminal the monitor draws on: whether there is one, whether it hung up (an SSH drop),
and an output that survives the hang-up."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from ..core.foreign import app_crashed

if TYPE_CHECKING:
    from textual.app import App


def no_terminal() -> str | None:
    """Why the monitor cannot open here (None: it can). Without a terminal Textual would draw
    into a pipe and wait for keys that never come."""
    if sys.stdin.isatty() and sys.stdout.isatty():
        return None
    return ("the live monitor needs a terminal, and stdin or stdout is not one; "
            "add --export csv (or json) to run without it")


def terminal_fd(headless: bool) -> int | None:
    """The terminal the monitor reads its keys from (None when headless or not a terminal)."""
    if headless:
        return None
    try:
        fd = sys.__stdin__.fileno()
        return fd if os.isatty(fd) else None
    except (AttributeError, OSError, ValueError):
        return None


def hung_up(fd: int | None) -> bool:
    """Whether the terminal on ``fd`` hung up (an SSH drop): asking for its settings fails with
    EIO from then on."""
    if fd is None:
        return False
    import errno
    import termios

    try:
        termios.tcgetattr(fd)
    except termios.error as exc:
        return bool(exc.args) and exc.args[0] == errno.EIO
    except (OSError, ValueError):
        return False
    return False


def terminal_hung_up(renderables) -> bool:
    """Whether a panic's traceback is a read of a terminal that hung up (``OSError`` EIO)."""
    import errno

    for r in renderables:
        stacks = getattr(getattr(r, "trace", None), "stacks", None) or ()
        # the exception raised (first), not one it was raised while handling
        if stacks and stacks[0].exc_type == "OSError" and str(stacks[0].exc_value).startswith(f"[Errno {errno.EIO}]"):
            return True
    return False


class TerminalOut:
    """The monitor's output (Textual draws to ``sys.__stderr__``): the terminal, until it hangs up
    (an SSH drop). From then on every write fails with EIO, which would end Textual's writer
    thread and leave its shutdown waiting on it for ever, CSV unwritten; they are dropped instead."""

    def __init__(self, file) -> None:
        self._file = file
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self._file.write(text)
            except (OSError, ValueError):
                self.gone = True
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._file.flush()
            except (OSError, ValueError):
                self.gone = True

    def __getattr__(self, name: str):
        return getattr(self._file, name)


def run_on_terminal(app: App) -> None:
    """Run ``app``, its output proof against a terminal that hangs up (:class:`TerminalOut`)."""
    terminal, sys.__stderr__ = sys.__stderr__, TerminalOut(sys.__stderr__)
    try:
        app.run()
    finally:
        sys.__stderr__ = terminal
    if app_crashed(app):  # it crashed (its traceback is out): nothing written at its end, never exit 0
        app.write_failed = True
