"""The signals that stop a sweep (SIGINT, SIGTERM, SIGHUP), caught from before it starts until its
outputs are written (:class:`StopSignals`), with a backstop that ends a command a stop signal
could not end.
"""

from __future__ import annotations

import os
import signal

from ..core.text import say
from .output_paths import release_outputs

#: the signals that stop a sweep (SIGHUP: the terminal went away, as when an SSH session drops)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopSignals:
    """Catches :data:`STOP_SIGNALS` while a sweep runs and its outputs are written.

    The first signal sets the exit status and has ``stop`` called; later ones (a second Ctrl-C
    right after the first, the shell's SIGHUP after the kernel's) change nothing, so nothing can
    cut the writing of the outputs short. ``stop`` runs on a thread of its own, woken through a
    pipe: a handler runs on the main thread wherever it was interrupted, so one that took a lock
    (setting an ``Event``) would deadlock when the signal interrupted that same lock's holder, as
    when a hang-up delivers two SIGHUPs close together and the second lands inside the first
    one's ``Event.set`` (the monitor would never end). Once a signal came, :meth:`release` leaves
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
        except BaseException:  # re-raised: only the signals set so far are given back first
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
            except Exception as exc:  # noqa: BLE001 - said on stderr (one line), and the exit status still says the signal
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
        finally:  # whatever releasing raised: ending is what matters now
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
