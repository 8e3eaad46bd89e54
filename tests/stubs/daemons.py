"""A measured command that detaches two daemons (fork, setsid, fork: re-parented away from the run,
in a session and process group of their own), for tests/test_outlive.py: a ``sleep`` exec'd with
``TT_DAEMON_OF=FOLDER`` in its environment, and a Python process that never execs (its environment
in /proc is its parent's). Each writes its pid to FOLDER/sleep and FOLDER/python as it starts.

``python daemons.py FOLDER``: detach them, then exit; ``python daemons.py FOLDER wait``: then
say so (FOLDER/waiting) and wait to be stopped. :func:`detach` does the same from a process of
the stand-in worker."""

import os
import sys
import time


def _detach(folder: str, kind: str) -> None:
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            with open(os.path.join(folder, kind + ".tmp"), "w") as fh:
                fh.write(str(os.getpid()))
            os.replace(os.path.join(folder, kind + ".tmp"), os.path.join(folder, kind))
            if kind == "sleep":
                os.execvpe("sleep", ["sleep", "300"], dict(os.environ, TT_DAEMON_OF=folder))
            time.sleep(300)
        os._exit(0)
    os.waitpid(pid, 0)


def detach(folder: str) -> None:
    """Both daemons, started: back once each has written its pid."""
    _detach(folder, "sleep")
    _detach(folder, "python")
    end = time.monotonic() + 20
    while not all(os.path.exists(os.path.join(folder, k)) for k in ("sleep", "python")) and time.monotonic() < end:
        time.sleep(0.01)


if __name__ == "__main__":
    detach(sys.argv[1])
    if len(sys.argv) > 2:
        open(os.path.join(sys.argv[1], "waiting"), "w").close()
        time.sleep(300)
