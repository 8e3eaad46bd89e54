"""How a command ends: its exit codes, one rule for them (:func:`exit_status`, headless and the
monitor alike), and the one-line error of a bad command line (:class:`UsageError`, :func:`fail_line`).
"""

from __future__ import annotations

import signal

from ..core.text import say
from ..events.schema import MISMATCH, UNPLANNED_KINDS

EXIT_OK, EXIT_NONE_OK, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: the sweep ran, but some events could not be written to its log (a full disk): the outputs
#: are incomplete, and a line says how many events and why
EXIT_INCOMPLETE = 3


class UsageError(Exception):
    """A bad command line: printed on one line, exit status 2."""


def fail_line(msg: str, code: int = EXIT_USAGE) -> int:
    say(f"tracetui: error: {msg}")  # (one line, whatever the message quotes)
    return code


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
