"""How the monitor ends: ``q``, a stop signal, a hung-up terminal; the workers stopped, what was
measured written, the exit status said."""

from __future__ import annotations

from textual import work

from .terminal import terminal_hung_up


class Quitting:
    """The quitting of :class:`~tracetui.tui.app.TraceApp` (its source, outputs and ``say``)."""

    def action_quit_app(self) -> None:
        if self._quitting:
            return
        self._quitting = True
        if self.source.running():
            self.say("stopping the workers ...")
            self.quit_reason = "quit while the sweep was running"
            self.exit_code = 130
            self.source.stop()
            self._finish_quit()
        else:
            self.source.stop()
            self._write_and_exit()

    def action_help_quit(self) -> None:
        """ctrl+c (Textual's own binding, which only says "press ctrl+q" and leaves the sweep
        running behind the toast): quit as ``q`` does, by the same path."""
        self.action_quit_app()

    def panic(self, *renderables) -> None:
        """Textual's input thread ends the app through here when reading the terminal fails. A
        terminal that hung up (an SSH drop) fails every read with EIO, often before the shell's
        SIGHUP is handled: that is the hang-up itself, and quits as it does (workers stopped,
        what was measured written, exit 129), not as a crash that writes nothing."""
        if terminal_hung_up(renderables):
            self._hang_up()
            self.quit_on_signal(self.signalled)
            return
        super().panic(*renderables)

    def _hang_up(self) -> None:
        """The terminal hung up: stop as on a SIGHUP (through :func:`~tracetui.tui.launchers.run_app`, which also arms
        its last resort), quitting on the next tick."""
        import signal

        if self.stop_requested is not None:
            self.stop_requested(signal.SIGHUP)
        self.signalled = self.signalled or signal.SIGHUP

    def quit_on_signal(self, signum: int) -> None:
        """Quit as ``q`` does (workers stopped, what was measured written, the terminal given
        back), with the signal's exit status."""
        import signal

        if self._quitting:
            return
        self._quitting = True
        self.quit_reason = f"interrupted by {signal.Signals(signum).name}"
        self.exit_code = 128 + signum
        self.source.stop()
        if self.source.running():
            self._finish_quit()
        else:
            self._write_and_exit()

    @work(thread=True, exclusive=True, exit_on_error=False)
    def _finish_quit(self) -> None:
        self.source.join(timeout=30)
        self.call_from_thread(self._write_and_exit)

    def _write_and_exit(self) -> None:
        self.apply_events()
        self.rows = self.outputs.rows(self.results)
        if getattr(self.source, "sweep", True) is None:  # closed before its checks had passed: no sweep
            self.exit(return_code=self.exit_code)
            return
        if self.source.live or self.outputs.explicit:
            err = self.write_outputs(final=True)
            if err:
                self.quit_reason = (self.quit_reason + "; " if self.quit_reason else "") + err
                self.write_failed = True
        self.exit(return_code=self.exit_code)

    #: the summary could not be written at the end (the exit status says so, as headless)
    write_failed = False
