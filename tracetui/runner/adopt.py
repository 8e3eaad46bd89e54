"""Imported by the fork server before the libraries (:data:`tracetui.runner.lifetime.PRELOAD`): the server becomes
a child subreaper, so that what a run started and left behind when its process went (a daemon
that double-forked out of the run's tree) re-parents to the server, where the supervisor finds
and ends it (:func:`tracetui.runner.leftovers.end_run`), instead of to PID 1. The server waits for
any child that ends (multiprocessing's own loop), so nothing it adopts stays a zombie; the
warning that loop gives for a child it did not fork is not for the terminal.

Only in the server (``TRACETUI_FORK_SERVER``, set while tracetui starts it, taken out of the
environment here so that no trial inherits it)."""

import os
import warnings

from ..core import envvars

if os.environ.pop(envvars.FORK_SERVER, None):
    from .leftovers import become_subreaper

    become_subreaper()
    warnings.filterwarnings("ignore", message="forkserver: waitpid returned unexpected pid")
