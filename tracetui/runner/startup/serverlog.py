"""Imported by the fork server second (:data:`tracetui.runner.lifetime.PRELOAD`): its standard error
goes to the file tracetui named in ``TRACETUI_SERVER_LOG`` (taken out of the environment here, so
that no trial inherits it), not to the terminal the monitor draws on. What the server says goes
there, and so does what a trial forked from it says before it has opened its run's log (a death
in multiprocessing's start of the child): the supervisor quotes that to explain such a death
(:func:`tracetui.runner.lifetime.server_said`). The file's name is removed once it is open: it
lives while the server, its trials or tracetui hold it, and is gone with the last of them."""

import os

from ...core import envvars

_path = os.environ.pop(envvars.SERVER_LOG, None)
if _path:
    try:
        _fd = os.open(_path, os.O_WRONLY | os.O_APPEND)
    except OSError:  # (removed meanwhile: its standard error stays the terminal's, as without one)
        _fd = None
    if _fd is not None:
        os.dup2(_fd, 2)
        os.close(_fd)
        try:  # the name goes: tracetui reads the file through its own descriptor, and nothing is left behind
            os.remove(_path)
        except OSError:  # (gone already: nothing to leave)
            pass
